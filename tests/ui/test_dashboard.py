"""The dashboard in a real browser, against a real daemon serving `--listen` on TCP."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from rota_testing import wait_until

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture fails (ROTA_REQUIRE_BROWSER) or skips each test
    expect = None

Dashboard = Any  # conftest.Dashboard: the daemon under test and its tokens
Seen = Any  # conftest.Seen: every /v1 answer the page got, and its script errors

SECRET = "s3cr3t-Value-8471"
Page = Any
Open = Callable[..., Page]


def job_id_from(page: Page) -> int:
    m = re.search(r"#/jobs/(\d+)$", page.url)
    assert m, page.url
    return int(m.group(1))


# --- serving --------------------------------------------------------------------------------

def test_page_and_assets_need_no_token_and_are_not_cached(dashboard: Dashboard) -> None:
    with httpx.Client(base_url=dashboard.url.rstrip("/"), timeout=30) as c:
        page = c.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["cache-control"] == "no-cache"
        assert "script-src 'self'" in page.headers["content-security-policy"]
        for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css"),
                           ("icon.svg", "image/svg+xml")):
            r = c.get(f"/ui/{name}")
            assert r.status_code == 200, name
            assert r.headers["content-type"].startswith(kind)
            assert r.headers["cache-control"] == "no-cache"
        assert c.get("/ui/nope.js").status_code == 404
        assert c.get("/ui/..%2Fdashboard.py").status_code == 404
        assert c.get("/v1/jobs").status_code == 401  # the data still needs the token


# --- signing in -----------------------------------------------------------------------------

def test_a_token_is_asked_for_checked_and_kept_for_the_tab(open_page: Open,
                                                          dashboard: Dashboard) -> None:
    page = open_page(None)
    expect(page.get_by_role("heading", name="Sign in to Rota")).to_be_visible()
    page.get_by_label("API token").fill("rota_not-a-real-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#token-error")).to_contain_text("not accepted")

    page.get_by_label("API token").fill(dashboard.tokens["alice"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#who")).to_contain_text("alice")
    expect(page.locator("#who")).to_contain_text("admin")
    expect(page.get_by_role("heading", name="Queue")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('rota.token')") == dashboard.tokens["alice"]
    page.reload()  # the token survives a reload of the tab
    expect(page.get_by_role("heading", name="Queue")).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in to Rota")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('rota.token')") is None


# --- submit, run, log -----------------------------------------------------------------------

def test_submit_form_checks_fields_then_the_job_runs_and_its_log_is_searchable(
        open_page: Open, dashboard: Dashboard, seen: Seen) -> None:
    page = open_page(hash="#/submit")
    form = page.locator("form.submit-form")
    # an argv with quoting that a naive split would mangle
    page.get_by_label("Command").fill(
        """sh -c 'echo "hello  world"; for i in 1 2 3; do echo "step $i loss 0.$i"; done; """
        """echo "answer-$((6*7))"'""")
    preview = page.locator(".argv-preview .argv-word")
    expect(preview).to_have_count(3)
    expect(preview.nth(2)).to_have_text(re.compile(r'^echo "hello  world"; for i'))

    page.get_by_label("Name", exact=True).fill("ui-hello")
    page.get_by_label("GPUs").fill("1.5")
    page.get_by_label("GPU memory").fill("2 lots")
    page.get_by_label("Environment", exact=True).fill("MODE=test\nnot a pair")
    page.get_by_label("Secret environment").fill(f"API_KEY={SECRET}")
    before = len(seen.bodies)
    page.get_by_role("button", name="Submit job").click()
    gpus_error = page.locator("#s-gpus-error")
    expect(gpus_error).to_contain_text("GPUs:")
    expect(gpus_error).to_contain_text("whole number")
    expect(page.locator("#s-gpu_mem-error")).to_contain_text("GPU memory:")
    expect(page.locator("#s-env-error")).to_contain_text("line 2")
    expect(page.get_by_label("GPUs")).to_have_attribute("aria-invalid", "true")
    expect(form.locator(".error-box")).to_contain_text("these 3 fields")
    expect(page.get_by_label("GPUs")).to_be_focused()
    assert len(seen.bodies) == before, "nothing is sent while the form has errors"

    # fixed in the browser; the server still refuses the working directory, at that field
    page.get_by_label("GPUs").fill("0.5")
    page.get_by_label("GPU memory").fill("2G")
    page.get_by_label("Environment", exact=True).fill("MODE=test")
    page.get_by_label("Priority").fill("5")
    page.get_by_label("Time limit").fill("10m")
    page.get_by_text("More options").click()
    page.get_by_label("Working directory").fill("/nonexistent/rota-ui-test")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#s-cwd-error")).to_contain_text("is not a directory")
    expect(page.get_by_label("Working directory")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#s-gpus-error")).to_be_hidden()

    page.get_by_label("Working directory").fill("/tmp")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r"#/jobs/\d+$"))
    job_id = job_id_from(page)
    expect(page.locator(".page-head .badge")).to_have_text("completed")
    spec = dashboard.job(job_id)["spec"]
    assert spec["command"][:2] == ["sh", "-c"]
    assert spec["command"][2].startswith('echo "hello  world"; for i in 1 2 3;')
    assert (spec["gpus"], spec["gpu_mem"], spec["priority"], spec["time_limit"]) == \
        (0.5, 2 << 30, 5, 600.0)

    log = page.locator("pre.log")
    expect(log).to_contain_text("hello  world")
    expect(log).to_contain_text("answer-42")
    page.get_by_label("Search the log").fill("loss")
    expect(log.locator("mark")).to_have_count(3)
    page.get_by_label("Only matching lines").check()
    expect(log).not_to_contain_text("answer-42")
    expect(log.locator(".log-line")).to_have_count(3)
    expect(page.locator(".card-head [role=status]")).to_contain_text("3 matching lines")

    # the spec is shown with the secret masked; the timeline and attempts are there
    expect(page.locator("table.env")).to_contain_text("MODE")
    expect(page.locator("table.env tr", has_text="API_KEY")).to_contain_text("***")
    expect(page.locator(".timeline")).to_contain_text("completed")
    expect(page.locator("[aria-labelledby=h-attempts] tbody tr")).to_have_count(1)
    expect(page.get_by_role("button", name="Requeue")).to_be_visible()
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)
    page.get_by_label("Only matching lines").uncheck()
    page.get_by_label("Search the log").fill("")

    for where in ("#/jobs", "#/gpus", f"#/jobs/{job_id}"):
        page.goto(dashboard.url + where)
        page.wait_for_selector(".live:not(.live-error)")
        page.wait_for_timeout(300)
        assert SECRET not in page.content()
    assert seen.bodies and not any(SECRET in b for b in seen.bodies)


def test_the_log_of_a_running_job_streams_in_live(open_page: Open, dashboard: Dashboard,
                                                  tmp_path: Path) -> None:
    go = tmp_path / "go"  # the job's second line waits for it (not for a time: a busy
    job = dashboard.submit(  # machine may take longer to show the first)
        command=["sh", "-c", f"echo first-line; while [ ! -e {go} ]; do sleep 0.1; done; "
                 "echo second-line"], name="ui-live-log", gpus=0)
    page = open_page(hash=f"#/jobs/{job['id']}")
    log = page.locator("pre.log")
    expect(log).to_contain_text("first-line")
    assert dashboard.job(job["id"])["state"] == "running"  # it came while the job ran
    expect(log).not_to_contain_text("second-line")
    go.touch()
    expect(log).to_contain_text("second-line")  # pushed by the stream, no reload
    expect(page.locator(".page-head .badge")).to_have_text("completed")
    expect(log).to_contain_text("first-line\nsecond-line")  # each line once, in order
    assert page.locator("pre.log").inner_text().count("first-line") == 1
    # it came over one event stream (ended by the job's end), not by polling byte ranges
    urls = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert sum(f"/v1/jobs/{job['id']}/logs/stream" in u for u in urls) == 1, urls
    assert not any(f"/v1/jobs/{job['id']}/logs?" in u for u in urls), urls


def test_metrics_and_progress_from_the_output_are_drawn(open_page: Open,
                                                        dashboard: Dashboard) -> None:
    script = ("import time\n"
              "for i in range(1, 41):\n"
              "    print(f'step {i}/40: loss={4.0 / i:.4f} acc: {i / 40:.3f}', flush=True)\n"
              "    if i % 10 == 0:\n"
              "        print(f'step {i}/40: val_loss={5.0 / i:.4f}', flush=True)\n"
              "    time.sleep(0.15)\n"
              "print('step 40/40: grad_norm=1.5', flush=True)\n")
    job = dashboard.submit(command=[sys.executable, "-u", "-c", script], name="ui-metrics",
                           gpus=0)
    page = open_page(hash=f"#/jobs/{job['id']}")
    bar = page.locator("progress.job-progress")
    expect(bar).to_be_visible()  # shown while it runs
    assert 0 < float(bar.get_attribute("value") or 0) < 1
    expect(page.locator("dl.kv").first).to_contain_text("step ")
    wait_until(lambda: dashboard.job(job["id"])["state"] == "completed", timeout=30,
               what="the job to end")
    expect(page.locator(".page-head .badge")).to_have_text("completed")
    loss = page.locator("figure[data-metric=loss]")
    expect(loss).to_be_visible()
    expect(loss.locator("h3")).to_contain_text("44 samples")  # every step, fetched in parts
    # train and validation loss share one chart, each named in its legend with its last value
    expect(loss.locator(".chart-legend li")).to_have_count(2)
    expect(loss.locator(".chart-legend [data-series=loss]")).to_contain_text("loss 0.1")
    expect(loss.locator(".chart-legend [data-series=val_loss]")).to_contain_text("val_loss 0.125")
    line = loss.locator("[data-series=loss] polyline")
    expect(line).to_have_count(1)
    assert len((line.get_attribute("points") or "").split()) == 40
    expect(loss.locator("[data-series=val_loss] polyline")).to_have_count(1)
    # axes with round ticks: values on the left, steps below
    y_ticks = loss.locator(".axis-y .tick").all_text_contents()
    x_ticks = loss.locator(".axis-x .tick").all_text_contents()
    assert len(y_ticks) >= 3 and all(re.fullmatch(r"-?[\d.]+", t) for t in y_ticks), y_ticks
    assert len(x_ticks) >= 2 and all(re.fullmatch(r"\d+", t) for t in x_ticks), x_ticks
    assert int(x_ticks[-1]) <= 40
    # hovering reads each series at the nearest step
    chart = loss.locator("svg.metric-chart")
    box = chart.bounding_box()
    assert box is not None
    # the last step's column (the plot ends 12 of the chart's 600 units from its right edge)
    chart.hover(position={"x": box["width"] * 586 / 600, "y": box["height"] / 2})
    readout = loss.locator(".chart-readout")
    expect(readout).to_be_visible()
    expect(readout).to_contain_text("step 40")
    expect(readout).to_contain_text("loss 0.1")
    expect(readout).to_contain_text("val_loss 0.125")
    page.mouse.move(0, 0)
    expect(readout).to_be_hidden()
    # smoothing: each series drawn raw (faint) and smoothed; remembered for the next page
    page.locator("#m-smooth").fill("0.9")
    expect(loss.locator("polyline.line-smoothed")).to_have_count(2)
    expect(loss.locator("polyline.raw")).to_have_count(2)
    # a metric of one sample is a point, not an empty box
    expect(page.locator("figure[data-metric=grad_norm] circle.chart-point")).to_have_count(1)
    expect(page.locator("figure[data-metric=acc]")).to_be_visible()
    page.reload()
    expect(page.locator("#m-smooth")).to_have_value("0.9")
    page.locator("#m-smooth").fill("0")
    expect(page.locator("figure[data-metric=loss] polyline.line-smoothed")).to_have_count(0)


def test_a_jobs_saved_outputs_are_listed_and_download_byte_equal(
        open_page: Open, dashboard: Dashboard, tmp_path: Any) -> None:
    script = ("import os\n"
              "os.makedirs('out/sub', exist_ok=True)\n"
              "open('out/model.bin', 'wb').write(bytes(range(256)) * 100)\n"
              "open('out/sub/notes.txt', 'w').write('done\\n')\n"
              "os.symlink('/etc/passwd', 'out/link')\n")
    job = dashboard.submit(command=[sys.executable, "-c", script], name="ui-outputs", gpus=0,
                           cwd=str(tmp_path), outputs=["out"])
    page = open_page(hash=f"#/jobs/{job['id']}")
    card = page.locator("section.artifacts")
    expect(card).to_contain_text("4 files", timeout=30_000)  # and its card, .md and .html
    expect(card.locator("tbody tr")).to_have_count(4)
    expect(card).to_contain_text("rota-card/card.html")
    expect(card).to_contain_text("out/model.bin")
    expect(card).to_contain_text("out/link: a link, not followed")
    with page.expect_download() as got:
        card.locator("button[data-path='out/model.bin']").click()
    saved = tmp_path / "downloaded.bin"
    got.value.save_as(saved)
    assert saved.read_bytes() == bytes(range(256)) * 100

    # a link to one file that works without an account, shown once with its expiry
    card.locator("button[data-share='out/model.bin']").click()
    link = card.get_by_label("Share link for out/model.bin")
    expect(link).to_have_value(re.compile(r"^http://127\.0\.0\.1:\d+/share/[A-Za-z0-9_-]{16,}$"))
    expect(card.locator(".share-box")).to_contain_text("works without an account until")
    shared = httpx.get(link.input_value(), timeout=30)  # no token
    assert shared.status_code == 200 and shared.content == bytes(range(256)) * 100
    card.get_by_role("button", name="Share all…").click()
    expect(card.get_by_label("Share link for all the files")).to_have_value(re.compile("/share/"))
    with dashboard.api() as c:
        links = c.get("/v1/share-links", params={"job": job["id"]}).json()["links"]
    assert sorted((x["path"] or "") for x in links) == ["", "out/model.bin"]

    # its card, from the page head
    with page.expect_download() as got:
        page.locator(".page-head").get_by_role("button", name="Card").click()
    assert got.value.suggested_filename == f"job-{job['id']}-card.html"
    got.value.save_as(tmp_path / "card.html")
    assert "ui-outputs" in (tmp_path / "card.html").read_text()
    # a job without outputs shows no such card
    plain = dashboard.submit(command=["true"], name="ui-no-outputs", gpus=0)
    page = open_page(hash=f"#/jobs/{plain['id']}")
    expect(page.locator(".page-head .badge")).to_have_text("completed")
    expect(page.locator("section.artifacts")).to_be_hidden()


def test_a_running_job_is_cancelled_after_a_confirmation(open_page: Open,
                                                         dashboard: Dashboard) -> None:
    job = dashboard.submit(command=["sleep", "600"], name="ui-long-sleep", gpus=0.25)
    page = open_page(hash=f"#/jobs/{job['id']}")
    expect(page.locator(".page-head .badge")).to_have_text("running")
    expect(page.get_by_role("button", name="Hold")).to_have_count(0)

    page.get_by_role("button", name="Cancel job").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Cancel job {job['id']}?")
    dialog.get_by_role("button", name="Keep it").click()
    expect(dialog).to_be_hidden()
    assert dashboard.job(job["id"])["state"] == "running"

    page.get_by_role("button", name="Cancel job").click()
    dialog.get_by_role("button", name="Cancel job").click()
    expect(page.locator(".page-head .badge")).to_have_text("cancelled")
    assert dashboard.job(job["id"])["state"] == "cancelled"

    # an ended job is requeued as a new job, and the page follows it
    page.get_by_role("button", name="Requeue").click()
    page.wait_for_url(lambda url: not url.endswith(f"#/jobs/{job['id']}"))
    again = job_id_from(page)
    expect(page.locator(".page-head .badge")).to_have_text("running")
    expect(page.locator(".toast-ok", has_text=f"submitted again as job {again}")).to_be_visible()
    with dashboard.api() as c:
        c.post(f"/v1/jobs/{again}/cancel").raise_for_status()


def test_hold_and_release_follow_the_state(open_page: Open, dashboard: Dashboard) -> None:
    job = dashboard.submit(command=["true"], name="ui-held", hold=True)
    page = open_page(hash=f"#/jobs/{job['id']}")
    expect(page.locator(".page-head .badge")).to_have_text("held")
    expect(page.locator(".callout")).to_contain_text("held")
    page.get_by_role("button", name="Release").click()
    expect(page.locator(".page-head .badge")).not_to_have_text("held")
    wait_until(lambda: dashboard.job(job["id"])["state"] == "completed", what="the job to end")
    expect(page.locator(".page-head .badge")).to_have_text("completed")


def test_what_the_api_forbids_is_shown_with_its_reason(open_page: Open,
                                                       dashboard: Dashboard) -> None:
    job = dashboard.submit(command=["sleep", "600"], name="alice-only", hold=True)
    page = open_page("bob", hash=f"#/jobs/{job['id']}")
    expect(page.locator("#who")).not_to_contain_text("admin")
    expect(page.locator("pre.log")).to_contain_text("not shown")  # nor read its log
    page.get_by_role("button", name="Cancel job").click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel job").click()
    toast = page.locator(".toast-error")
    expect(toast).to_contain_text("Not allowed")
    expect(toast).to_contain_text("belongs to alice")
    assert dashboard.job(job["id"])["state"] == "held"
    with dashboard.api() as c:
        c.post(f"/v1/jobs/{job['id']}/cancel").raise_for_status()


# --- the command line -> argv ---------------------------------------------------------------

ARGV_CASES = [
    "python train.py --lr 3e-4",
    "  python   -u  train.py  ",
    "echo 'a b'  \"c d\" e\\ f",
    "sh -c 'echo \"$HOME\"; exit 3'",
    'printf "%s\\n" "a \\"quoted\\" word" \'it\'\\\'\'s\'',
    "python x.py --name=\"\" ''",
    "a'b'\"c\"d",
    "echo $HOME *.py ~/x | tee log",
    "tab\tseparated\nwords",
    "unicode 'ünï cödé' 日本",
]


def test_the_command_field_splits_like_a_posix_shell(open_page: Open) -> None:
    import shlex

    page = open_page(hash="#/submit")
    got = page.evaluate("""async (cases) => {
        const m = await import('/ui/argv.js');
        return cases.map((c) => { try { return m.splitArgv(c); } catch (e) { return 'error'; } });
    }""", [*ARGV_CASES, "echo 'open", 'echo "open', "echo end\\",
           'echo "\\$HOME \\` \\x"', "python train.py \\\n  --lr 1"])
    for case, argv in zip(ARGV_CASES, got, strict=False):
        assert argv == shlex.split(case), case
    assert got[len(ARGV_CASES):-2] == ["error"] * 3  # unclosed quotes, a trailing backslash
    # as in sh, and unlike shlex: in double quotes a backslash also keeps $ and ` literal,
    # and a backslash at the end of a line joins the next one
    assert got[-2] == ["echo", "$HOME ` \\x"]
    assert got[-1] == ["python", "train.py", "--lr", "1"]


# --- the queue ------------------------------------------------------------------------------

def test_queue_filters_sorts_pages_and_opens_a_job(open_page: Open, dashboard: Dashboard) -> None:
    with dashboard.api() as c:
        specs = [{"command": ["true"], "name": f"ui-batch-{i:03d}", "hold": True,
                  "priority": i % 7, "gpus": 1} for i in range(105)]
        assert c.post("/v1/jobs", json={"jobs": specs}).status_code == 201
    page = open_page()
    rows = page.locator("table.jobs tbody tr")
    page.get_by_label("Name").fill("ui-batch-")
    expect(page).to_have_url(re.compile(r"name=ui-batch-"))
    expect(page.locator("#queue-summary")).to_have_text("100 jobs shown; more below.")
    expect(rows).to_have_count(100)
    more = page.get_by_role("button", name="Load more")
    more.click()
    expect(rows).to_have_count(105)
    expect(more).to_be_hidden()

    page.locator("[data-state-filter=held]").click()
    expect(page.locator("[data-state-filter=held]")).to_have_attribute("aria-pressed", "true")
    assert "state=held" in page.url
    page.get_by_role("button", name="Priority").click()
    first = rows.first.locator("td.c-priority")
    expect(first).to_have_text("0")
    page.get_by_role("button", name="Priority").click()
    expect(first).to_have_text("6")
    expect(page.locator("th[aria-sort]")).to_have_attribute("aria-sort", "descending")

    page.get_by_label("Name").fill("ui-batch-042")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".reason")).to_contain_text("held")
    rows.first.locator("td.c-user").click()  # a click anywhere on the row opens the job
    page.wait_for_url(re.compile(r"#/jobs/\d+$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("ui-batch-042")

    with dashboard.api() as c:  # leave the machine as it was
        for j in c.get("/v1/jobs", params={"state": "held", "limit": 1000}).json()["jobs"]:
            c.post(f"/v1/jobs/{j['id']}/cancel")


def test_a_pending_job_shows_why_it_waits(open_page: Open, dashboard: Dashboard) -> None:
    blocker = dashboard.submit(command=["sleep", "600"], name="ui-big", gpus=4)
    waiting = dashboard.submit(command=["true"], name="ui-waits-for-gpus", gpus=4)
    try:
        page = open_page()
        row = page.locator(f"tr[data-job='{waiting['id']}']")
        expect(row.locator(".badge")).to_have_text("pending")
        expect(row.locator(".reason")).to_contain_text("GPU")
        expect(page.locator(f"tr[data-job='{blocker['id']}'] .badge")).to_have_text("running")
    finally:
        with dashboard.api() as c:
            for j in (waiting, blocker):
                c.post(f"/v1/jobs/{j['id']}/cancel")


def test_a_job_holding_an_idle_gpu_is_flagged_in_its_row_and_on_its_page(
        open_page: Open, new_dashboard: Callable[..., Any], tmp_path: Any) -> None:
    home = tmp_path / "idle-home"
    home.mkdir()
    (home / "rota.toml").write_text("[idle]\nminutes = 0.02\n")  # flagged after 1.2 s
    with new_dashboard(home) as dash:
        job = dash.submit(command=["sleep", "600"], name="ui-idle", gpus=1, allowed_gpus=[3])
        with dash.api() as c:
            c.post("/v1/gpus/3/simulate", json={"utilization": 0.0}).raise_for_status()
        page = open_page(on=dash)
        row = page.locator(f"tr[data-job='{job['id']}']")
        expect(row.locator(".idle-flag")).to_contain_text("its GPU 3 has been under 5 % for")
        row.locator("a.job-link").click()
        expect(page.locator("dd .idle-flag")).to_contain_text("its GPU 3 has been under 5 %")
        with dash.api() as c:
            c.post(f"/v1/jobs/{job['id']}/cancel")


def test_a_jobs_wandb_run_is_linked(open_page: Open, dashboard: Dashboard) -> None:
    job = dashboard.submit(command=["true"], name="ui-wandb", gpus=0, wandb=True,
                           wandb_project="tiny", wandb_entity="lab")
    page = open_page(hash=f"#/jobs/{job['id']}")
    link = page.get_by_role("link", name=re.compile(r"^run rota-"))
    expect(link).to_have_attribute(
        "href", re.compile(rf"^https://wandb\.ai/lab/tiny/runs/rota-[0-9a-f]+-{job['id']}$"))
    expect(link).to_have_attribute("rel", "noopener noreferrer")


def test_no_script_runs_from_job_names(open_page: Open, dashboard: Dashboard) -> None:
    name = '<img src=x onerror="window.__xss=1">'
    job = dashboard.submit(command=["true"], name=name,
                           env={"X": "<script>window.__xss=2</script>"})
    page = open_page(hash="#/jobs")
    expect(page.locator(f"tr[data-job='{job['id']}'] .job-link")).to_have_text(name)
    page.goto(dashboard.url + f"#/jobs/{job['id']}")
    expect(page.get_by_role("heading", level=1)).to_contain_text(name)
    expect(page.locator("table.env")).to_contain_text("<script>")
    assert page.evaluate("window.__xss") is None
    assert page.locator("img[src=x]").count() == 0


# --- GPUs -----------------------------------------------------------------------------------

def test_a_gpu_is_paused_and_resumed_from_its_card(open_page: Open, dashboard: Dashboard) -> None:
    job = dashboard.submit(command=["sleep", "600"], name="ui-on-a-gpu", gpus=0.5,
                           gpu_mem="6G")
    page = open_page(hash="#/gpus")
    card = page.locator("[data-gpu='3']")
    expect(page.locator(".gpu-card")).to_have_count(4)
    expect(card.locator(".spark")).to_have_count(3)
    busy = page.locator(".gpu-card", has=page.locator(f"a[href='#/jobs/{job['id']}']"))
    expect(busy).to_contain_text("ui-on-a-gpu")
    expect(busy.locator(".gpu-value").first).to_have_text("50%")

    card.get_by_role("button", name="Pause").click()
    expect(card.locator(".badge-paused")).to_have_text("paused")
    expect(card.get_by_role("button", name="Resume")).to_be_visible()
    with dashboard.api() as c:
        assert c.get("/v1/gpus").json()["gpus"][3]["paused"] is True
    card.get_by_role("button", name="Resume").click()
    expect(card.locator(".badge-paused")).to_have_count(0)
    with dashboard.api() as c:
        assert c.get("/v1/gpus").json()["gpus"][3]["paused"] is False
        c.post(f"/v1/jobs/{job['id']}/cancel")


# --- layout, theme, keyboard ----------------------------------------------------------------

def test_phone_width_has_no_horizontal_scrolling(open_page: Open, dashboard: Dashboard) -> None:
    job = dashboard.submit(command=["sleep", "600"], name="a-rather-long-job-name-for-a-phone-"
                           "screen-with-no-spaces-in-it", gpus=0.25)
    try:
        page = open_page(width=375, height=740)
        expect(page.locator(f"tr[data-job='{job['id']}']")).to_be_visible()
        for where in ("#/jobs", f"#/jobs/{job['id']}", "#/gpus", "#/pools", "#/submit",
                      "#/usage"):
            page.goto(dashboard.url + where)
            page.wait_for_selector(".page")
            if where == f"#/jobs/{job['id']}":
                expect(page.locator("[aria-labelledby=h-attempts] tbody tr")).to_have_count(1)
            page.wait_for_timeout(500)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 375, f"{where} is {width}px wide at a 375px viewport"
            # nor is a table cut, to be scrolled sideways inside its box
            cut = page.evaluate("[...document.querySelectorAll('.table-wrap')]"
                                ".filter((w) => w.scrollWidth > w.clientWidth + 1)"
                                ".map((w) => w.parentElement.getAttribute('aria-labelledby')"
                                " || w.parentElement.className)")
            assert not cut, f"{where}: tables cut at a 375px viewport: {cut}"
    finally:
        with dashboard.api() as c:
            c.post(f"/v1/jobs/{job['id']}/cancel")


def test_dark_mode_follows_the_system_and_the_toggle(open_page: Open) -> None:
    page = open_page(scheme="dark")
    bg = "getComputedStyle(document.body).backgroundColor"
    dark = page.evaluate(bg)
    assert _luma(dark) < 60, dark
    toggle = page.locator("#theme-toggle")
    toggle.click()  # auto -> light
    expect(toggle).to_have_attribute("aria-label", "Colour theme: light")
    assert _luma(page.evaluate(bg)) > 200
    toggle.click()  # light -> dark
    assert _luma(page.evaluate(bg)) < 60
    page.reload()  # the choice is remembered
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    toggle.click()  # back to automatic
    expect(page.locator("html")).not_to_have_attribute("data-theme", re.compile(".*"))


def test_the_main_controls_are_reachable_by_keyboard(open_page: Open) -> None:
    page = open_page()
    page.reload()
    expect(page.get_by_role("heading", name="Queue")).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.locator("#skip-link")).to_be_focused()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Queue", exact=True)).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="GPUs", exact=True)).to_be_focused()
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    # the 2-second refresh leaves the focus where it was
    chip = page.locator("[data-state-filter=all]")
    chip.focus()
    link = page.locator(".job-link").first
    page.wait_for_timeout(2500)
    expect(chip).to_be_focused()
    link.focus()
    page.wait_for_timeout(2500)
    expect(link).to_be_focused()
    page.get_by_role("link", name="GPUs", exact=True).focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="GPUs")).to_be_visible()
    pause = page.get_by_role("button", name="Pause").first
    pause.focus()
    expect(pause).to_be_focused()
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"


def _luma(css_rgb: str) -> float:
    r, g, b = (int(x) for x in re.findall(r"\d+", css_rgb)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_a_failed_jobs_page_opens_with_how_it_ended_and_its_last_lines(
        open_page: Open, dashboard: Dashboard) -> None:
    script = "; ".join([f"print('line {i}')" for i in range(20)]
                       + ["print('Traceback: ValueError: bad batch', flush=True)",
                          "raise SystemExit(3)"])
    job = dashboard.submit(command=[sys.executable, "-c", script], name="ui-fails", gpus=0)
    wait_until(lambda: dashboard.job(job["id"])["state"] == "failed", timeout=30,
               what="the job to fail")
    page = open_page(hash=f"#/jobs/{job['id']}")
    banner = page.locator(".end-banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Failed (exit code 3)")
    expect(banner.locator(".end-tail")).to_contain_text("Traceback: ValueError: bad batch")
    expect(banner.locator(".end-tail")).to_contain_text("line 13")  # the last 8 lines
    expect(banner.locator(".end-tail")).not_to_contain_text("line 12")
    ok = dashboard.submit(command=["true"], name="ui-fine", gpus=0)
    wait_until(lambda: dashboard.job(ok["id"])["state"] == "completed", timeout=30)
    page = open_page(hash=f"#/jobs/{ok['id']}")
    expect(page.locator(".page-head .badge")).to_have_text("completed")
    expect(page.locator(".end-banner")).to_be_hidden()


def test_a_running_jobs_row_shows_its_step_loss_and_eta(open_page: Open,
                                                        dashboard: Dashboard) -> None:
    script = ("import time\nfor s in range(1, 10000):\n"
              "    print(f'step {s}/10000 loss={2.0 / s:.4f}', flush=True)\n    time.sleep(0.05)")
    job = dashboard.submit(command=[sys.executable, "-c", script], name="ui-progress", gpus=0)
    try:
        page = open_page()
        row = page.locator(f"tr[data-job='{job['id']}']")
        expect(row.locator(".badge")).to_have_text("running")
        text = row.locator(".progress-text")
        expect(text).to_contain_text(re.compile(r"step \d+/10000 · loss 0\.\d+"))
        expect(text).to_contain_text("ETA")
    finally:
        with dashboard.api() as c:
            c.post(f"/v1/jobs/{job['id']}/cancel")


def test_the_queue_shows_running_jobs_first_however_old(open_page: Open,
                                                        dashboard: Dashboard) -> None:
    old = dashboard.submit(command=["sleep", "600"], name="ui-long-runner", gpus=0)
    with dashboard.api() as c:  # more jobs after it than one page holds, all ended
        specs = [{"command": ["true"], "name": f"ui-after-{i:03d}", "gpus": 0}
                 for i in range(105)]
        made = c.post("/v1/jobs", json={"jobs": specs}).json()["jobs"]
    try:
        for j in (made[0], made[-1]):
            wait_until(lambda j=j: dashboard.job(j["id"])["state"] == "completed", timeout=60,
                       what="the later jobs to end")
        page = open_page()
        first = page.locator("table.jobs tbody tr").first
        expect(first).to_have_attribute("data-job", str(old["id"]))
        expect(first.locator(".badge")).to_have_text("running")
        expect(page.locator("#f-sort")).to_have_value("activity:asc")
        page.get_by_role("button", name="ID").click()  # a column's order still applies
        expect(page.locator("table.jobs tbody tr").first).not_to_have_attribute(
            "data-job", str(old["id"]))
    finally:
        with dashboard.api() as c:
            c.post(f"/v1/jobs/{old['id']}/cancel")


def test_the_queue_has_a_project_column(open_page: Open, dashboard: Dashboard) -> None:
    job = dashboard.submit(command=["true"], name="ui-in-a-project", gpus=0, hold=True,
                           project="vision")
    try:
        page = open_page()
        expect(page.locator("table.jobs thead")).to_contain_text("Project")
        expect(page.locator(f"tr[data-job='{job['id']}'] td.c-project")).to_have_text("vision")
    finally:
        with dashboard.api() as c:
            c.post(f"/v1/jobs/{job['id']}/cancel")


def test_the_submit_form_takes_a_project_datasets_and_a_sweep(open_page: Open,
                                                              dashboard: Dashboard) -> None:
    page = open_page(hash="#/submit")
    page.get_by_label("Command").fill("echo lr={lr}")
    page.get_by_label("Name", exact=True).fill("ui-form-sweep")
    page.get_by_label("Project").fill("not a project!")
    page.get_by_label("GPUs").fill("0")
    page.get_by_text("More options").click()
    page.get_by_label("Sweep").fill("lr")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#s-project-error")).to_contain_text("is not a project name")
    expect(page.locator("#s-sweep-error")).to_contain_text("is not key=values")

    # the server's refusals: at their fields, without the batch's "jobs[0]: "
    page.get_by_label("Project").fill("vision")
    page.get_by_label("Sweep").fill("lr=1,2,3")
    page.get_by_label("Datasets").fill("no-such-set")
    page.get_by_role("button", name="Submit job").click()
    error = page.locator("#s-datasets-error")
    expect(error).to_contain_text("no dataset 'no-such-set' you may read")
    expect(error).not_to_contain_text("jobs[0]")
    page.get_by_label("Datasets").fill("")
    page.get_by_label("GPUs").fill("16")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#s-gpus-error")).to_contain_text("16")
    expect(page.locator("form.submit-form")).not_to_contain_text("jobs[0]")

    page.get_by_label("GPUs").fill("0")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r"#/$"))
    expect(page.locator(".toast")).to_contain_text("Submitted 3 jobs")
    with dashboard.api() as c:
        jobs = [j for j in c.get("/v1/jobs", params={"limit": 500}).json()["jobs"]
                if j["name"].startswith("ui-form-sweep[")]
    assert sorted(j["name"] for j in jobs) == [f"ui-form-sweep[lr={n}]" for n in (1, 2, 3)]
    assert {j["project"] for j in jobs} == {"vision"}
    for j in jobs:
        wait_until(lambda j=j: dashboard.job(j["id"])["state"] == "completed",
                   what="the sweep's jobs to end")
    assert dashboard.job(jobs[0]["id"])["spec"]["command"][1].startswith("lr=")
