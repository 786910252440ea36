"""The web dashboard: the static HTML, CSS and JavaScript beside this module, shipped in
the package, no build step.

`/` answers the page and `/ui/<file>` its assets. They need no token: they hold no data, and
every number the page shows comes from `/v1`, which does. The files are read on each request
(they are small, and `no-cache` makes browsers revalidate anyway), from a fixed list taken at
mount time, so no client text ever reaches the filesystem.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import Response

WEB_DIR = Path(__file__).parent  # the assets sit beside this module

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

# The page loads nothing from elsewhere and runs no inline script or style.
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")

_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def asset_names(web_dir: Path = WEB_DIR) -> dict[str, Path]:
    """The files the dashboard may serve: those in web/ with a known type, by name."""
    return {p.name: p for p in sorted(web_dir.iterdir())
            if p.is_file() and p.suffix in _TYPES}


def _answer(path: Path, *, page: bool = False) -> Response:
    headers = dict(_HEADERS)
    if page:
        headers["Content-Security-Policy"] = _CSP
        headers["X-Frame-Options"] = "DENY"
    return Response(path.read_bytes(), media_type=_TYPES[path.suffix], headers=headers)


def mount_dashboard(app: FastAPI) -> None:
    """Serve the dashboard at `/` and its assets under `/ui/`, outside the token check."""
    assets = asset_names()
    index = assets["index.html"]

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def dashboard_page() -> Response:
        return _answer(index, page=True)

    @app.api_route("/ui/{name}", methods=["GET", "HEAD"], include_in_schema=False)
    async def dashboard_asset(name: str) -> Response:
        path = assets.get(name)
        if path is None:
            return Response("not found\n", status_code=404, media_type="text/plain",
                            headers=_HEADERS)
        return _answer(path, page=path.suffix == ".html")
