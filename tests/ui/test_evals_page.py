"""The evaluations page in a real browser, against a daemon with a few runs shaped like
evaluations (jobs tagged ``eval`` and ``eval:NAME`` that print their metrics as one JSON line,
as rota.eval.run does): the runs side by side, the best of each metric, a chart per metric,
the filters in the address, the empty state."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rota_testing import wait_until

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture fails (ROTA_REQUIRE_BROWSER) or skips each test
    expect = None

Page = Any
Open = Callable[..., Page]
SMALL, LARGE = "org/small-1b", "org/large-7b"
# (config, model, metrics), oldest first: large wins arc_easy and perplexity, `other` hellaswag
RUNS = [
    ("suite", SMALL, {"arc_easy/acc": 0.5, "arc_easy/acc_stderr": 0.02, "hellaswag/acc": 0.4,
                      "wikitext/word_perplexity": 20.5, "heldout/eval_tokens": 120}),
    ("suite", LARGE, {"arc_easy/acc": 0.7, "arc_easy/acc_stderr": 0.01, "hellaswag/acc": 0.6,
                      "wikitext/word_perplexity": 12.25, "heldout/eval_tokens": 96}),
    ("other", SMALL, {"arc_easy/acc": 0.55, "hellaswag/acc": 0.65}),
]
#: heldout/eval_tokens is a count (tokens scored): a column, never ranked
COLUMNS = ["arc_easy/acc", "heldout/eval_tokens", "hellaswag/acc", "wikitext/word_perplexity"]


def submit_eval_runs(dash: Any, runs: list[tuple[str, str, dict[str, float]]]) -> list[int]:
    """Submit a job per run, shaped like an evaluation; wait until each one's metrics are
    in the results. Returns the jobs' ids in submission order."""
    ids = []
    for name, model, metrics in runs:
        line = json.dumps(metrics)
        job = dash.submit(command=[sys.executable, "-c", f"print({line!r})"], gpus=0,
                          name=f"eval-{name}", tags=["eval", f"eval:{name}"],
                          env={"ROTA_EVAL_NAME": name, "ROTA_EVAL_MODEL": model,
                               "ROTA_EVAL_HARNESS": "lm-eval"})
        ids.append(int(job["id"]))

    def all_in() -> bool:
        with dash.api() as c:
            got = c.get("/v1/eval/results").raise_for_status().json()["runs"]
        return {r["id"]: r["metrics"] for r in got} == {
            i: m for i, (_, _, m) in zip(ids, runs, strict=True)}
    wait_until(all_in, timeout=60, every=0.3, what="the evaluation runs' metrics")
    return ids


@pytest.fixture(scope="module")
def evals(tmp_path_factory: pytest.TempPathFactory,
          new_dashboard: Callable[[Path], contextlib.AbstractContextManager[Any]],
          ) -> Iterator[tuple[Any, list[int]]]:
    with new_dashboard(tmp_path_factory.mktemp("ui-evals")) as dash:
        yield dash, submit_eval_runs(dash, RUNS)


def _rows(page: Page) -> Any:
    return page.locator("table.evals tbody tr")


def _cell(page: Page, job: int, metric: str) -> Any:
    return page.locator(f"tr[data-run='{job}'] td[data-metric='{metric}']")


def test_runs_side_by_side_with_the_best_of_each_metric(
        open_page: Open, evals: tuple[Any, list[int]]) -> None:
    dash, (small, large, other) = evals
    page = open_page(on=dash, hash="#/jobs")
    page.get_by_role("link", name="Evals").click()
    expect(page.get_by_role("heading", name="Evaluations")).to_be_visible()
    expect(page.get_by_role("link", name="Evals")).to_have_attribute("aria-current", "page")
    expect(_rows(page)).to_have_count(3)
    assert [int(x) for x in _rows(page).evaluate_all("rs => rs.map(r => r.dataset.run)")] == \
        [other, large, small]  # newest first
    heads = page.locator("table.evals thead th")
    expect(heads).to_have_count(7 + len(COLUMNS))  # the stderr is folded into its metric's
    assert page.locator("thead th.c-metric").evaluate_all(
        "hs => hs.map(h => h.dataset.metric)") == COLUMNS
    expect(page.locator("thead th[data-metric='wikitext/word_perplexity']")).to_contain_text(
        "lower is better")
    expect(page.locator("thead th[data-metric='heldout/eval_tokens']")).to_contain_text(
        "a count, not ranked")
    expect(page.locator("#evals-summary")).to_contain_text("3 runs · 4 metrics")

    row = page.locator(f"tr[data-run='{small}']")
    expect(row.locator(".c-name")).to_have_text("suite")
    expect(row.locator(".c-model")).to_have_text(SMALL)
    expect(row.locator(".c-harness")).to_have_text("lm-eval")
    expect(row.locator(".c-state")).to_have_text("completed")
    expect(row.locator(".c-commit")).to_have_text("\u2013")  # no config file, no commit
    expect(_cell(page, small, "arc_easy/acc")).to_have_text("0.5 ± 0.02")
    expect(_cell(page, large, "wikitext/word_perplexity")).to_have_text("★ 12.25 (best)")
    expect(_cell(page, other, "arc_easy/acc")).to_have_text("0.55")  # no stderr reported
    expect(_cell(page, other, "wikitext/word_perplexity")).to_have_text("\u2013")

    best = page.locator("td.best")  # higher is better, except perplexity; counts unranked
    expect(best).to_have_count(3)
    expect(_cell(page, small, "heldout/eval_tokens")).to_have_text("120")
    for job, metric in ((large, "arc_easy/acc"), (other, "hellaswag/acc"),
                        (large, "wikitext/word_perplexity")):
        expect(_cell(page, job, metric)).to_have_class("num c-metric best")

    row.locator(".c-id a").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("eval-suite")
    assert page.url.endswith(f"#/jobs/{small}")


def test_a_chart_per_metric_with_a_bar_per_run_coloured_by_model(
        open_page: Open, evals: tuple[Any, list[int]]) -> None:
    dash, (small, large, other) = evals
    page = open_page(on=dash, hash="#/evals")
    charts = page.locator("figure.ev-chart")
    expect(charts).to_have_count(len(COLUMNS))
    assert charts.evaluate_all("fs => fs.map(f => f.dataset.metric)") == COLUMNS
    arc = page.locator("figure[data-metric='arc_easy/acc']")
    expect(arc.get_by_role("heading")).to_contain_text("arc_easy/acc")
    expect(arc.locator(".bar")).to_have_count(3)
    expect(page.locator("figure[data-metric='wikitext/word_perplexity'] .bar")).to_have_count(2)
    expect(arc.locator(".bar-label")).to_have_text([f"#{other} {SMALL}", f"#{large} {LARGE}",
                                                    f"#{small} {SMALL}"])
    expect(arc.locator(".bar-value")).to_have_text(["0.55", "0.7 ± 0.01", "0.5 ± 0.02"])
    # the values as text for a screen reader, the best named
    alt = arc.get_by_role("img").get_attribute("aria-label") or ""
    assert alt.startswith("arc_easy/acc, higher is better: ")
    assert f"#{large} {LARGE} 0.7 ± 0.01 (best)" in alt and f"#{small} {SMALL} 0.5 ± 0.02" in alt
    # bars on one scale (scores: 0..1): 0.7 is 70% of the track
    width = arc.locator(".bar").nth(1).evaluate(
        "b => b.getBoundingClientRect().width / b.parentElement.getBoundingClientRect().width")
    assert abs(width - 0.7) < 0.02
    expect(arc.locator(".bar-best")).to_have_count(1)

    def colour(metric: str, i: int) -> str:
        bar = page.locator(f"figure[data-metric='{metric}'] .bar").nth(i)
        value: str = bar.evaluate("b => getComputedStyle(b).backgroundColor")
        return value
    # rows: other (small), large, small: one colour per model, the same in every chart
    assert colour("arc_easy/acc", 0) == colour("arc_easy/acc", 2) == colour("hellaswag/acc", 0)
    assert colour("arc_easy/acc", 1) == colour("hellaswag/acc", 1) != colour("arc_easy/acc", 0)
    expect(page.locator(".ev-legend li")).to_have_text([LARGE, SMALL])


def test_filters_narrow_the_runs_and_stay_in_the_address(
        open_page: Open, evals: tuple[Any, list[int]]) -> None:
    dash, (small, _, _) = evals
    page = open_page(on=dash, hash="#/evals")
    expect(_rows(page)).to_have_count(3)
    # the fields suggest what the runs have
    for key, values in (("name", ["other", "suite"]), ("model", [LARGE, SMALL]),
                        ("task", ["arc_easy", "heldout", "hellaswag", "wikitext"])):
        assert page.locator(f"#ev-{key} ~ datalist option").evaluate_all(
            "os => os.map(o => o.value)") == values
    page.get_by_label("Config", exact=True).fill("suite")
    page.get_by_label("Config", exact=True).press("Enter")
    expect(_rows(page)).to_have_count(2)
    assert page.url.endswith("#/evals?name=suite")
    expect(page.locator("figure[data-metric='arc_easy/acc'] .bar")).to_have_count(2)

    page.get_by_label("Model", exact=True).fill(SMALL)
    page.get_by_label("Model", exact=True).press("Enter")
    expect(_rows(page)).to_have_count(1)
    expect(page.locator(f"tr[data-run='{small}']")).to_have_count(1)

    # a shared address opens the same view, the filters filled in
    shared = open_page(on=dash, hash="#/evals?model=org%2Fsmall-1b&task=hellaswag")
    expect(shared.get_by_label("Model", exact=True)).to_have_value(SMALL)
    expect(shared.get_by_label("Task", exact=True)).to_have_value("hellaswag")
    expect(_rows(shared)).to_have_count(2)
    assert shared.locator("thead th.c-metric").evaluate_all(
        "hs => hs.map(h => h.dataset.metric)") == ["hellaswag/acc"]
    expect(shared.locator("figure.ev-chart")).to_have_count(1)

    # what the API would refuse is said at the field, and nothing changes
    shared.get_by_label("Config", exact=True).fill("no such/config")
    shared.get_by_label("Config", exact=True).press("Enter")
    expect(shared.get_by_label("Config", exact=True)).to_have_attribute("aria-invalid", "true")
    expect(shared.locator("#ev-name ~ .field-error")).to_contain_text("config name")
    expect(_rows(shared)).to_have_count(2)
    assert "name=" not in shared.url

    shared.get_by_label("Config", exact=True).fill("nothing-ran")
    shared.get_by_label("Config", exact=True).press("Enter")
    expect(shared.locator(".empty")).to_contain_text("No evaluation runs match these filters.")
    expect(shared.locator("table.evals")).to_be_hidden()
    shared.get_by_role("button", name="Clear").click()
    expect(_rows(shared)).to_have_count(3)
    assert shared.url.endswith("#/evals")


def test_with_no_results_the_page_says_how_to_get_some(open_page: Open, dashboard: Any) -> None:
    with dashboard.api() as c:
        assert c.get("/v1/eval/results").raise_for_status().json()["runs"] == []
    page = open_page(hash="#/evals")
    empty = page.locator(".empty")
    expect(empty).to_have_text("No evaluation results yet. Run an evaluation with "
                               "rota eval submit CONFIG.yaml; each run shows here with its "
                               "metrics once it reports them.")
    expect(empty.locator("code")).to_have_text("rota eval submit CONFIG.yaml")
    expect(page.locator("table.evals")).to_be_hidden()
    expect(page.locator("figure.ev-chart")).to_have_count(0)


def _many(runs: int, tasks: int) -> dict[str, Any]:
    """An answer with `runs` runs of 4 models, each with acc and acc_stderr of `tasks` tasks."""
    return {"runs": [
        {"id": 1000 + i, "name": "big-suite", "model": f"org/model-{i % 4}", "harness": "lm-eval",
         "git_commit": "0123456789abcdef", "state": "completed", "pool": None,
         "created_at": 1.7e9 + i, "ended_at": 1.7e9 + i + 60,
         "metrics": {k: v for t in range(tasks) for k, v in (
             (f"task_{t:02d}/acc", ((i * 7 + t) % 100) / 100), (f"task_{t:02d}/acc_stderr", 0.01))}}
        for i in range(runs)]}


def test_many_runs_and_metrics_scroll_inside_the_page(open_page: Open,
                                                      evals: tuple[Any, list[int]]) -> None:
    dash, _ = evals
    answer = json.dumps(_many(200, 30))
    for width in (1280, 375):
        page = open_page(on=dash, hash="#/jobs", width=width, height=800)
        page.route("**/v1/eval/results*", lambda route: route.fulfill(
            status=200, content_type="application/json", body=answer))
        page.goto(dash.url + "#/evals?limit=200")
        expect(_rows(page)).to_have_count(200)
        expect(page.locator("thead th.c-metric")).to_have_count(30)
        expect(page.locator("figure.ev-chart")).to_have_count(30)
        expect(page.locator("figure.ev-chart .bar")).to_have_count(200 * 30)
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"#/evals is {scroll}px wide at a {width}px viewport"
        # the table and each chart scroll inside their boxes, not the page
        wrap = page.locator(".evals-wrap").evaluate(
            "e => [e.scrollHeight > e.clientHeight, e.scrollWidth > e.clientWidth, e.clientHeight]")
        assert wrap[0] and wrap[1] and wrap[2] <= 800, wrap
        chart = page.locator(".bar-chart").first.evaluate(
            "e => [e.scrollHeight > e.clientHeight, e.clientHeight]")
        assert chart[0] and chart[1] < 500, chart
        tops = page.locator("figure.ev-chart").evaluate_all(
            "fs => new Set(fs.map(f => Math.round(f.getBoundingClientRect().top))).size")
        assert tops == (30 if width == 375 else 10), tops  # three abreast on a wide screen
