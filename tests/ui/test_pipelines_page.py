"""The pipelines page in a real browser: a pipeline with three ended rounds (accepted,
rejected with both numbers, failed) stored before the daemon starts, and one added through
the API whose first round fails for want of data: the list with each one's next step in
words, a pipeline's rounds with their verdicts, steps and jobs, the held-out metric per
round as a chart, the lineage and the current base; resume and run-now from the page, and
a refusal shown."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rota.pipeline.config import load_text
from rota.store.repo import Store

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture fails (ROTA_REQUIRE_BROWSER) or skips each test
    expect = None

Page = Any
Open = Callable[..., Page]
CONFIG = ("version: 1\nname: {name}\nmodel_repo: /models/base\ndatasets: [{{name: {data}, "
          "field_instruction: q, field_output: a}}]\ntrain: {{gpus: 0}}\n"
          "on_failure: {{backoff: 1d}}\n")


def seed(home: Path) -> None:
    """A paused pipeline with three ended rounds, as the daemon would have stored them."""
    home.mkdir(parents=True)
    store = Store.open(f"sqlite:///{home / 'rota.db'}")
    [cfg] = load_text(CONFIG.format(name="qwen-refresh", data="/data/qa.jsonl"))
    now = time.time()
    p = store.add_pipeline(now=now - 7200, name="qwen-refresh", user="alice", format="rota",
                           config_text="", config_path="/home/alice/p.yaml",
                           config=cfg.model_dump(mode="json"), paused=True,
                           paused_reason="data refresh", next_at=now + 3600,
                           next_why="drawn in run_intervals", base_model="/runs/r1/merged",
                           base_round=1, base_metric=1.25, base_metric_data=cfg.data_hash())
    common = {"pipeline_id": p.id, "folder": "/runs", "data_hash": cfg.data_hash(),
              "chunks": 3, "due_at": now - 7000}
    store.add_round(number=1, state="accepted", step="done", chunk=0,
                    reason="accepted: heldout/eval_loss 1.25 against the base's 1.5 "
                           "(margin 0)", jobs={"prep": 1, "train": 2, "merge": 3,
                                               "evaluate": 4, "evaluate_base": 5},
                    base_model="/models/base", adapter="/runs/r1/train/adapter",
                    merged_model="/runs/r1/merged", metric=1.25, base_metric=1.5,
                    facts={"chunk_rows": 32, "heldout_rows": 24}, started_at=now - 7000,
                    ended_at=now - 6000, **common)
    store.add_round(number=2, state="rejected", step="done", chunk=1,
                    reason="rejected: heldout/eval_loss 1.6 against the base's 1.25 "
                           "(margin 0): worse by 0.35", jobs={"prep": 6, "train": 7,
                                                              "merge": 8, "evaluate": 9},
                    base_model="/runs/r1/merged", adapter="/runs/r2/train/adapter",
                    merged_model="/runs/r2/merged", metric=1.6, base_metric=1.25,
                    facts={}, started_at=now - 5000, ended_at=now - 4000, **common)
    store.add_round(number=3, state="failed", step="done", chunk=2,
                    reason="merge: job 12 failed: exit code 2", jobs={"prep": 10,
                                                                      "train": 11,
                                                                      "merge": 12},
                    base_model="/runs/r1/merged", adapter="/runs/r3/train/adapter",
                    facts={}, started_at=now - 3000, ended_at=now - 2000, **common)
    store.update_pipeline(p.id, rounds=3, failures=1)
    store.engine.dispose()


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory,
              new_dashboard: Callable[[Path], contextlib.AbstractContextManager[Any]],
              ) -> Iterator[Any]:
    home = tmp_path_factory.mktemp("ui-pipelines") / "home"
    seed(home)
    with new_dashboard(home) as dash:
        with dash.api() as c:  # alice's second pipeline: no data, so its round fails
            r = c.post("/v1/pipelines", json={"config": CONFIG.format(
                name="nodata", data="/no/such/data.jsonl"), "path": "/x/p.yaml"})
            assert r.status_code == 201, r.text
        yield dash


def test_the_list_says_what_each_pipeline_does_next(open_page: Open, pipelines: Any) -> None:
    page = open_page(on=pipelines, hash="#/jobs")
    page.get_by_role("link", name="Pipelines").click()
    expect(page.get_by_role("heading", name="Pipelines")).to_be_visible()
    row = page.locator("tr[data-pipeline='qwen-refresh']")
    expect(row).to_contain_text("paused: data refresh")
    expect(row).to_contain_text("round 1 (heldout/eval_loss 1.25)")
    nodata = page.locator("tr[data-pipeline='nodata']")
    expect(nodata).to_contain_text("backing off after 1 failed round in a row: 1d")


def test_a_pipelines_rounds_chart_and_lineage(open_page: Open, pipelines: Any) -> None:
    page = open_page(on=pipelines, hash="#/pipelines/qwen-refresh")
    expect(page.get_by_role("heading", name="Pipeline qwen-refresh")).to_be_visible()
    rounds = page.locator("article.pl-round")
    expect(rounds).to_have_count(3)
    assert rounds.evaluate_all("rs => rs.map(r => r.dataset.round)") == ["3", "2", "1"]
    second = page.locator("article[data-round='2']")
    expect(second.locator("[data-verdict]")).to_have_text("rejected")
    expect(second).to_contain_text("worse by 0.35")
    expect(second).to_contain_text("1.6 against the base's 1.25")
    first = page.locator("article[data-round='1']")
    expect(first).to_contain_text("the current base")
    expect(first.locator(".pl-lineage")).to_have_text(
        "/models/base → /runs/r1/train/adapter → /runs/r1/merged")
    expect(first.locator("[data-step]")).to_have_count(5)
    expect(first.locator("[data-step='evaluate_base'] a")).to_have_attribute("href", "#/jobs/5")
    expect(page.locator("article[data-round='3']")).to_contain_text(
        "merge: job 12 failed: exit code 2")
    # the chart: a point per round with a metric, marked by its verdict
    points = page.locator("svg.pl-chart circle.pl-point")
    expect(points).to_have_count(2)
    assert points.evaluate_all("ps => ps.map(p => p.getAttribute('class'))") == [
        "pl-point pl-accepted", "pl-point pl-rejected"]
    expect(page.locator("svg.pl-chart")).to_have_attribute(
        "aria-label", "heldout/eval_loss per round: round 1 1.25 (accepted; base 1.5); "
                      "round 2 1.6 (rejected; base 1.25)")


def test_resume_and_run_now_from_the_page_and_a_refusal_shown(open_page: Open,
                                                              pipelines: Any) -> None:
    page = open_page(on=pipelines, hash="#/pipelines/nodata")
    summary = page.locator(".pl-summary")
    expect(summary).to_contain_text("backing off")
    summary.get_by_role("button", name="Pause").click()
    expect(summary).to_contain_text("paused: paused from the dashboard")
    summary.get_by_role("button", name="Resume").click()
    expect(summary.get_by_role("button", name="Pause")).to_be_visible()
    summary.get_by_role("button", name="Run now").click()
    # round 2 begins (and fails for want of data, as round 1 did)
    expect(page.locator("article[data-round='2']")).to_be_visible()
    # bob may not run alice's pipeline: the refusal is shown, nothing changes
    bob = open_page("bob", on=pipelines, hash="#/pipelines")
    expect(bob.locator("tr[data-pipeline]")).to_have_count(0)  # his own only: none
    with pipelines.api("bob") as c:
        assert c.post("/v1/pipelines/nodata/run-now").status_code == 404
