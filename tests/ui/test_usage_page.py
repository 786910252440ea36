"""The Usage page: its assets served and linked (its chart is inline SVG drawn by usage.js:
nothing fetched elsewhere), and the page itself in a real browser."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest
from fastapi.testclient import TestClient

from rota.server.api import build_app
from rota_testing import moto_s3, s3_client, wait_until

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
    # a value axis with round ticks, a label under the bar, a legend naming each colour
    ticks = chart.locator(".axis-y .tick").all_text_contents()
    assert len(ticks) >= 2 and ticks[0] == "0", ticks
    expect(chart.locator(".axis-x .tick").first).to_be_visible()
    expect(page.locator(".usage-legend li")).to_have_text(["alice", "bob"])
    # one day's bar is a bar, not the whole chart
    assert float(chart.locator("rect").first.get_attribute("width") or 0) <= 56
    # each heading stands over its values (numbers right-aligned under theirs)
    heads = page.locator("table.usage thead th")
    cells = row.locator("td")
    for i in range(5):
        head, cell = heads.nth(i).bounding_box(), cells.nth(i).bounding_box()
        assert head and cell and abs(head["x"] - cell["x"]) < 2 and \
            abs(head["width"] - cell["width"]) < 2, (i, head, cell)
    for i in (2, 3, 4):
        assert heads.nth(i).evaluate("e => getComputedStyle(e).textAlign") == "right"
        assert cells.nth(i).evaluate("e => getComputedStyle(e).textAlign") == "right"
    # the pickers are labelled fields
    expect(page.get_by_label("Group by")).to_have_value("user")
    expect(page.get_by_label("Per", exact=True)).to_have_value("day")
    expect(page.locator("table.usage thead")).to_contain_text("Idle GPU-h")
    # no [tiers] in its rota.toml: the costs are at Rota's shipped prices, and say so
    expect(page.locator("table.usage thead")).to_contain_text("Cost*")
    expect(page.get_by_text("at Rota's default prices")).to_be_visible()


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


BUCKET = "rota-ui-ws"


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield from moto_s3(tmp_path_factory, BUCKET)


def test_the_usage_page_says_how_each_workspace_stands_with_its_bucket(
        open_page: Open, new_dashboard: Callable[..., contextlib.AbstractContextManager[Any]],
        aws: dict[str, str], tmp_path: Path) -> None:
    """With workspaces in a bucket, a Bucket column: a workspace whose job's files went
    up reads "synced" (its URL on hover); one whose copy cannot be brought, "failed" with
    the bucket's error, as a warning."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "rota.toml").write_text(f'[storage]\nworkspace_url = "s3://{BUCKET}/ws"\n')
    write = "import os; open(os.path.join(os.environ['ROTA_WORKSPACE'], 'w.txt'), 'w').write('x')"
    with new_dashboard(home, aws) as dash:
        def sync_of(name: str) -> dict[str, Any] | None:
            with dash.api() as c:
                spaces = c.get("/v1/workspaces").raise_for_status().json()["workspaces"]
            found = [w["sync"] for w in spaces if w["name"] == name]
            return found[0] if found else None

        job = dash.submit(command=["python3", "-c", write], gpus=0, project="kept")
        wait_until(lambda: dash.job(job["id"])["state"] == "completed", timeout=30,
                   what="the job to end")
        wait_until(lambda: (sync_of("alice/kept") or {}).get("state") == "synced",
                   timeout=30, what="its workspace to reach the bucket")
        s3 = s3_client(aws)
        assert s3.get_object(Bucket=BUCKET, Key="ws/alice/kept/w.txt")["Body"].read() == b"x"
        for obj in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []):
            s3.delete_object(Bucket=BUCKET, Key=obj["Key"])
        s3.delete_bucket(Bucket=BUCKET)  # the next workspace cannot be brought
        lost = dash.submit(command=["python3", "-c", write], gpus=0, project="lost")
        wait_until(lambda: (sync_of("alice/lost") or {}).get("state") == "failed",
                   timeout=30, what="the bucket's trouble")
        page = open_page(hash="#/usage", on=dash)
        spaces = page.locator("section.workspaces")
        expect(spaces.locator("thead")).to_contain_text("Bucket")
        kept = spaces.locator("tr[data-workspace='alice/kept'] td.sync")
        expect(kept).to_contain_text("synced, last synced")
        expect(kept).to_have_attribute("title", f"s3://{BUCKET}/ws/alice/kept")
        failed = spaces.locator("tr[data-workspace='alice/lost'] td.sync .warn")
        expect(failed).to_contain_text("failed")
        expect(failed).to_contain_text("NoSuchBucket")
        expect(failed).to_contain_text("tried again in")
        assert dash.job(lost["id"])["state"] == "pending"
