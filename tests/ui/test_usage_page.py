"""The Usage page's assets: served by the dashboard, linked from the page, and reading the
report endpoint (its chart is inline SVG drawn by usage.js: nothing fetched elsewhere)."""

from __future__ import annotations

from unittest.mock import MagicMock

from fastapi.testclient import TestClient

from rota.server.api import build_app


def test_the_usage_page_is_served_and_linked() -> None:
    client = TestClient(build_app(MagicMock(), MagicMock()))
    page = client.get("/")
    assert page.status_code == 200 and 'href="#/usage"' in page.text
    script = client.get("/ui/usage.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "/v1/report" in script.text and "http" not in script.text.replace("https?", "")
    assert 'from "./usage.js"' in client.get("/ui/app.js").text
