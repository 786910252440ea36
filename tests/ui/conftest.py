"""Fixtures for the dashboard tests: a real daemon serving TCP, its users and tokens made
through the CLI, and Chromium (Debian's, at /usr/bin/chromium) driven by Playwright.

Without a browser these tests skip, unless ROTA_REQUIRE_BROWSER=1 (scripts/test.sh sets it):
then they fail, so CI can never pass by skipping them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota_testing import PATIENCE_S, DaemonProcess, free_port, kill_job_processes

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# How long a UI expectation may take: the page polls every 1-2 s, and this machine is
# shared (a loaded 2-core machine); Playwright polls, so a fast one is no slower.
WAIT_MS = int(PATIENCE_S * 1000)


def _no_browser(why: str) -> None:
    if os.environ.get("ROTA_REQUIRE_BROWSER"):
        pytest.fail(f"ROTA_REQUIRE_BROWSER is set but {why}")
    pytest.skip(why)


class Dashboard:
    """The daemon under test: its URL, tokens for alice (admin) and bob, and API helpers."""

    def __init__(self, daemon: DaemonProcess, port: int) -> None:
        self.daemon = daemon
        self.url = f"http://127.0.0.1:{port}/"
        self.tokens: dict[str, str] = {}

    def cli(self, *args: str) -> dict[str, Any]:
        r = subprocess.run([sys.executable, "-m", "rota", *args, "--json"], env=self.daemon.env,
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        out: dict[str, Any] = json.loads(r.stdout)
        return out

    def api(self, user: str = "alice") -> httpx.Client:
        return httpx.Client(base_url=self.url.rstrip("/"), timeout=30,
                            headers={"Authorization": f"Bearer {self.tokens[user]}"})

    def submit(self, user: str = "alice", **spec: Any) -> dict[str, Any]:
        with self.api(user) as c:
            r = c.post("/v1/jobs", json={"jobs": [spec]})
            assert r.status_code == 201, r.text
            job: dict[str, Any] = r.json()["jobs"][0]
            return job

    def job(self, job_id: int) -> dict[str, Any]:
        with self.api() as c:
            out: dict[str, Any] = c.get(f"/v1/jobs/{job_id}").raise_for_status().json()
            return out


@contextlib.contextmanager
def running_dashboard(home: Path, env: dict[str, str] | None = None) -> Iterator[Dashboard]:
    """A daemon on simulated GPUs with `--listen` on a free port; users alice (admin) and bob
    and a token for each, made through the CLI as a person would. ``env``: more of the
    daemon's environment (a bucket's endpoint and keys)."""
    port = free_port()
    d = DaemonProcess(home, simulate="4x24G", extra_env=env,
                      args=["--listen", f"127.0.0.1:{port}"]).start()
    try:
        dash = Dashboard(d, port)
        dash.cli("user", "add", "alice", "--admin")
        dash.cli("user", "add", "bob")
        for name in ("alice", "bob"):
            dash.tokens[name] = dash.cli("token", "create", "--user", name)["token"]
        yield dash
    finally:
        d.stop()
        kill_job_processes(home)


@pytest.fixture(scope="session")
def new_dashboard() -> Callable[..., contextlib.AbstractContextManager[Dashboard]]:
    """`with new_dashboard(home[, env]) as dash:` a daemon of one's own, for a test that
    needs a queue nobody else touches (or a setting of its own: HOME/rota.toml)."""
    return running_dashboard


@pytest.fixture(scope="session")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """One daemon for the UI suite."""
    with running_dashboard(tmp_path_factory.mktemp("ui-home")) as dash:
        yield dash


# module-scoped: Playwright's sync API keeps an event loop running on the main thread while
# it is open, so with it open any later test of the same xdist worker that calls
# asyncio.run() fails ("cannot be called from a running event loop")
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _no_browser(f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _no_browser("the playwright package is not installed (pip install -e '.[test]')")
    from playwright.sync_api import expect

    # expect(...)'s own deadline (5 s unless set) is not the context's default timeout
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Seen:
    """Everything the browser got from /v1 and every script error on the page."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.errors: list[str] = []


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def open_page(browser: Any, dashboard: Dashboard, seen: Seen) -> Iterator[Callable[..., Any]]:
    """open_page(user="alice", width=1280, scheme="light", sign_in=True) -> a Playwright page."""
    contexts: list[Any] = []

    def make(user: str | None = "alice", *, width: int = 1280, height: int = 900,
             scheme: str = "light", hash: str = "#/jobs", on: Dashboard = dashboard) -> Any:
        from playwright.sync_api import expect

        ctx = browser.new_context(viewport={"width": width, "height": height},
                                  color_scheme=scheme)
        ctx.set_default_timeout(WAIT_MS)
        contexts.append(ctx)
        page = ctx.new_page()
        page.on("pageerror", lambda e: seen.errors.append(str(e)))
        page.on("console", lambda m: seen.errors.append(m.text)
                if m.type == "error" and "401" not in m.text and "403" not in m.text
                and "409" not in m.text and "422" not in m.text else None)

        def keep(resp: Any) -> None:
            if "/v1/" in resp.url:
                # a body the browser already dropped (after a navigation) cannot be read
                with contextlib.suppress(Exception):
                    seen.bodies.append(resp.text())
        page.on("response", keep)
        page.goto(on.url + hash)
        if user is not None:
            page.get_by_label("API token").fill(on.tokens[user])
            page.get_by_role("button", name="Sign in").click()
            expect(page.locator("#who")).to_contain_text(user)
        return page

    yield make
    for ctx in contexts:
        ctx.close()
    assert not seen.errors, f"errors on the page: {seen.errors}"


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Any, str], Path]:
    """shot(page, name): a full-page screenshot into $ROTA_SCREENSHOTS (docs/img when making
    the docs) or a temp dir, as dashboard-<name>.png."""
    where = os.environ.get("ROTA_SCREENSHOTS")
    out = Path(where) if where else tmp_path_factory.mktemp("screenshots")
    out.mkdir(parents=True, exist_ok=True)

    def shot(page: Any, name: str, *, full_page: bool = True) -> Path:
        assert re.fullmatch(r"[a-z0-9-]+", name)
        path = out / f"dashboard-{name}.png"
        page.screenshot(path=str(path), full_page=full_page, animations="disabled")
        return path

    return shot
