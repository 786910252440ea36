"""The Usage page: its assets served and linked (its chart is inline SVG drawn by usage.js:
nothing fetched elsewhere), and the page itself in a real browser."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest.mock import MagicMock

from fastapi.testclient import TestClient

from rota.server.api import build_app
from rota_testing import wait_until

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture fails (ROTA_REQUIRE_BROWSER) or skips each test
    expect = None

Open = Callable[..., Any]
Dashboard = Any  # conftest.Dashboard: the daemon under test and its tokens


def test_the_usage_page_is_served_and_linked() -> None:
    client = TestClient(build_app(MagicMock(), MagicMock()))
    page = client.get("/")
    assert page.status_code == 200 and 'href="#/usage"' in page.text
    script = client.get("/ui/usage.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "/v1/report" in script.text and "http" not in script.text.replace("https?", "")
    assert 'from "./usage.js"' in client.get("/ui/app.js").text


def test_the_usage_page_draws_gpu_hours_stacked_by_user_with_the_table(
        open_page: Open, dashboard: Dashboard) -> None:
    """In a real browser: jobs of two users that ran show as one bar of two coloured parts,
    and the table's totals match the report the API gives."""
    jobs = [dashboard.submit(command=["sleep", "0.3"], name="ui-usage", gpus=1),
            dashboard.submit("bob", command=["sleep", "0.3"], name="ui-usage", gpus=1)]
    for j in jobs:
        wait_until(lambda j=j: dashboard.job(j["id"])["state"] == "completed", timeout=30,
                   what="the job to end")
    page = open_page(hash="#/usage?by=user&period=day")
    chart = page.locator("svg.usage-chart")
    expect(chart).to_be_visible()
    expect(chart.locator("rect[data-group='bob']").first).to_be_attached()
    expect(chart.locator("rect[data-group='alice']").first).to_be_attached()
    with dashboard.api() as c:
        totals = {t["group"]: t for t in c.get("/v1/report", params={"by": "user"}).json()
                  ["totals"]}
    row = page.locator("table.usage tr.total", has_text="bob")
    expect(row).to_contain_text(f"{totals['bob']['gpu_hours']:.2f}")
    expect(page.locator("table.usage thead")).to_contain_text("Idle GPU-h")


def test_the_usage_page_lists_the_workspaces_with_their_size_and_quota(
        open_page: Open, dashboard: Dashboard) -> None:
    """A job's workspace appears with its size as measured and the default quota."""
    script = ("import os; open(os.path.join(os.environ['ROTA_WORKSPACE'], 'w.bin'), 'wb')"
              ".write(b'x' * 3000)")
    job = dashboard.submit(command=["python3", "-c", script], name="ui-workspace", gpus=0,
                           project="ui-space")
    wait_until(lambda: dashboard.job(job["id"])["state"] == "completed", timeout=30,
               what="the job to end")
    page = open_page(hash="#/usage")
    row = page.locator("section.workspaces tr[data-workspace='alice/ui-space']")
    expect(row).to_be_visible()
    expect(row).to_contain_text("100")  # the default quota, 100G
