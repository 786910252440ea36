"""The pools page and a job's pool, in a real browser, against a daemon whose rota.toml
declares a Slurm pool whose client is not installed, a Kubernetes pool, and a Slurm pool
whose (fake) client takes jobs and keeps them waiting."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture fails (ROTA_REQUIRE_BROWSER) or skips each test
    expect = None

Page = Any
Open = Callable[..., Page]
# the Slurm client's folder: its name is markup, so the engine's message (which names the
# folder) is too; the page must show it as text
MARKUP = "<img src=x onerror=window.__xss=1>"
# A Slurm client that takes every job as 4242 and says it waits there for resources (until
# scancel); just enough of sbatch, squeue, scontrol, sacct and sinfo for Rota to hand a job.
FAKE_SLURM = {
    "sbatch": "cat >/dev/null; echo 4242",
    "squeue": r"""case "$*" in
  *--name=*) ;;
  *%T\|%D*) echo "PENDING|1" ;;
  *) if [ -e "$(dirname "$0")/cancelled" ]; then echo "4242|CANCELLED|None|N/A|N/A|||4242"
     else echo "4242|PENDING|Resources|N/A|N/A|||4242"; fi ;;
esac""",
    "scancel": 'touch "$(dirname "$0")/cancelled"',
    "scontrol": "true",
    "sacct": "true",
    "sinfo": 'echo "n1|idle|gpu:4|gpu:0|"',
}
TOML = """
[pools.hpc]
engine = "slurm"
shared_workspaces = true
partition = "gpu"
bin_dir = "{bin_dir}"
description = "the lab's Slurm cluster"

[pools.lab]
engine = "slurm"
shared_workspaces = true
bin_dir = "{fake_slurm}"

[pools.k8s]
engine = "kubernetes"
workspace_claim = "team-workspaces"
namespace = "ml"
image = "python:3.11-slim"
max_in_flight = 7
"""


@pytest.fixture(scope="module")
def pools_daemon(tmp_path_factory: pytest.TempPathFactory,
                 new_dashboard: Callable[[Path], contextlib.AbstractContextManager[Any]],
                 ) -> Iterator[Any]:
    home = tmp_path_factory.mktemp("ui-pools")
    no_slurm = home / MARKUP  # an empty folder: no sinfo, so the pool is unreachable
    no_slurm.mkdir()
    fake = home / "fake-slurm"
    fake.mkdir()
    for prog, body in FAKE_SLURM.items():
        (fake / prog).write_text(f"#!/bin/sh\n{body}\n")
        (fake / prog).chmod(0o755)
    (home / "rota.toml").write_text(TOML.format(bin_dir=no_slurm, fake_slurm=fake))
    with new_dashboard(home) as dash:
        yield dash


def _pools(dash: Any) -> dict[str, Any]:
    with dash.api() as c:
        answer: dict[str, Any] = c.get("/v1/pools").raise_for_status().json()
    return {p["name"]: p for p in answer["pools"]}


def _expect_row(page: Page, pool: str, **cells: str) -> None:
    """Each named cell of the pool's row (engine, up, gpus, max, can, message) reads so."""
    row = page.locator(f"tr[data-pool={pool}]")
    for column, text in cells.items():
        expect(row.locator(f".c-{column}")).to_have_text(text)


def test_the_pools_page_lists_each_pool_with_its_engines_health(
        open_page: Open, pools_daemon: Any) -> None:
    api = _pools(pools_daemon)
    page = open_page(on=pools_daemon, hash="#/pools")
    expect(page.get_by_role("heading", name="Pools")).to_be_visible()
    expect(page.get_by_role("link", name="Pools", exact=True)).to_have_attribute(
        "aria-current", "page")
    rows = page.locator("table.pools tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.first).to_have_attribute("data-pool", "local")  # the default comes first
    down = sum(not p["health"]["reachable"] for p in api.values())
    assert down >= 1  # hpc at least
    expect(page.locator("#pools-summary")).to_have_text(
        f"4 pools · default: local · {down} unreachable")

    def message(name: str) -> str:
        text: str = api[name]["health"]["message"]
        return text

    def up(name: str) -> str:
        return "yes" if api[name]["health"]["reachable"] else "no"

    _expect_row(page, "local", engine="local", up="yes", gpus="4 of 4", max="100",
                can="Rota places jobs here", message=message("local"))
    # no GPU count from an engine not reached; its message shown whole, as text
    assert message("hpc").startswith("sinfo not found in ") and MARKUP in message("hpc")
    _expect_row(page, "hpc", engine="slurm", up="no", gpus="\u2013",
                can="multi-node, arrays, dependencies, conda", message=message("hpc"))
    _expect_row(page, "k8s", engine="kubernetes", up=up("k8s"), max="7",
                message=message("k8s"))
    _expect_row(page, "lab", engine="slurm", up="yes", gpus="4 of 4",
                message="1/1 nodes up, 4/4 GPUs free")
    expect(page.locator("tr[data-pool=k8s] .c-can")).to_contain_text("images")
    names = page.locator(".c-name")
    expect(names.filter(has=page.locator(".badge-default"))).to_have_text(["local default"])
    expect(page.locator("tr[data-pool=hpc] .c-name")).to_contain_text("the lab's Slurm cluster")
    yes, no = (page.locator(f"tr[data-pool={p}] .c-up .badge") for p in ("local", "hpc"))
    colour = "e => getComputedStyle(e).color"
    assert yes.evaluate(colour) != no.evaluate(colour)  # not by the word alone

    assert page.evaluate("window.__xss") is None
    assert page.locator("img[src=x]").count() == 0


def test_long_engine_messages_wrap_and_the_page_fits_a_phone(open_page: Open,
                                                              pools_daemon: Any) -> None:
    for width in (1280, 375):
        page = open_page(on=pools_daemon, hash="#/pools", width=width, height=800)
        cell = page.locator("tr[data-pool=hpc] .pool-message")
        expect(cell).to_contain_text("sinfo not found in ")
        box = cell.evaluate("e => [e.scrollWidth, e.clientWidth]")
        assert box[0] <= box[1], f"the message is cut at {width}px: {box}"
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"#/pools is {scroll}px wide at a {width}px viewport"


def test_a_job_shows_its_pool_in_the_queue_and_on_its_page(open_page: Open,
                                                           pools_daemon: Any) -> None:
    named = pools_daemon.submit(command=["true"], name="ui-on-local", gpus=0, pool="local")
    plain = pools_daemon.submit(command=["true"], name="ui-on-default", gpus=0)
    page = open_page(on=pools_daemon, hash=f"#/jobs/{named['id']}")
    overview = page.locator("[aria-labelledby=h-overview] dl")
    expect(overview.locator("dt", has_text="Pool")).to_have_count(1)
    expect(page.locator("a.job-pool")).to_have_text("local")
    expect(overview.locator("dt", has_text="Engine")).to_have_count(0)  # run here, by Rota
    page.goto(pools_daemon.url + f"#/jobs/{plain['id']}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("ui-on-default")
    expect(page.locator("a.job-pool")).to_have_text("default")
    page.locator("a.job-pool").click()
    expect(page.get_by_role("heading", name="Pools")).to_be_visible()

    page.goto(pools_daemon.url + "#/jobs")
    expect(page.locator(f"tr[data-job='{named['id']}'] td.c-pool")).to_have_text("local")
    expect(page.locator(f"tr[data-job='{plain['id']}'] td.c-pool")).to_have_text("default")


def test_a_job_handed_to_an_engine_shows_where_it_waits_there(open_page: Open,
                                                               pools_daemon: Any) -> None:
    job = pools_daemon.submit(command=["true"], name="ui-on-slurm", gpus=1, pool="lab")
    try:
        page = open_page(on=pools_daemon, hash=f"#/jobs/{job['id']}")
        expect(page.locator("a.job-pool")).to_have_text("lab")
        engine = page.locator(".job-engine")
        expect(engine).to_contain_text("slurm:lab · job 4242 · queued")
        expect(engine.locator(".engine-reason")).to_have_text("Resources")
        expect(page.locator(".callout")).to_have_text(
            "Engine: handed to slurm:lab as job 4242; it waits there: Resources")
        page.goto(pools_daemon.url + "#/jobs")
        row = page.locator(f"tr[data-job='{job['id']}']")
        expect(row.locator("td.c-pool")).to_have_text("lab")
        expect(row.locator(".reason")).to_have_text(
            "handed to slurm:lab as job 4242; it waits there: Resources")
    finally:
        with pools_daemon.api() as c:
            c.post(f"/v1/jobs/{job['id']}/cancel")
