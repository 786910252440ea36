"""The datasets page, in a real browser, against a daemon of its own: two datasets added
through the CLI as a person adds them (one private with two versions, one shared with a
description and more files than the page lists), a job that reads one; the list, a
version's detail with its files and jobs, the version selector, and the job page's link
back. Also the empty state, and a dataset that is not there."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import subprocess
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
OWNER = "root"  # the CLI talks over the daemon's socket as this account (the suite's)
CORPUS = "ui-ds-corpus"
MANY = "ui-ds-many"
MANY_FILES = 503  # three more than the page lists
DESCRIPTION = "product reviews, cleaned <b>not bold</b>"
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"

# the corpus's two versions: v2 changes train.txt and adds blob.bin
V1 = {"train.txt": b"a" * 2048, "sub/valid.jsonl": b"b" * 1024}  # 3072 bytes: 3K
V2 = {"train.txt": b"c" * 2048, "sub/valid.jsonl": b"b" * 1024,
      "blob.bin": bytes(range(256)) * 6144}  # 1575936 bytes: 1.5M


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


def _sha16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


class Datasets:
    """The daemon and what was added to it."""

    def __init__(self, dash: Any) -> None:
        self.dash = dash
        self.v1: dict[str, Any] = {}
        self.v2: dict[str, Any] = {}
        self.many: dict[str, Any] = {}
        self.job = 0


@pytest.fixture(scope="module")
def datasets_daemon(tmp_path_factory: pytest.TempPathFactory,
                    new_dashboard: Callable[[Path], contextlib.AbstractContextManager[Any]],
                    ) -> Iterator[Datasets]:
    home = tmp_path_factory.mktemp("ui-datasets")
    corpus = home.parent / f"{home.name}-corpus"
    many = home.parent / f"{home.name}-many"
    corpus.mkdir()
    many.mkdir()
    with new_dashboard(home / "home") as dash:
        got = Datasets(dash)
        _write(corpus, V1)
        got.v1 = dash.cli("dataset", "add", CORPUS, str(corpus))["version"]
        (corpus / "train.txt").unlink()
        _write(corpus, V2)
        got.v2 = dash.cli("dataset", "add", CORPUS, str(corpus))["version"]
        assert (got.v1["version"], got.v2["version"]) == (1, 2)
        _write(many, {f"part-{i:03d}.txt": b"x" * 1024 for i in range(MANY_FILES)})
        got.many = dash.cli("dataset", "add", MANY, str(many), "--shared",
                            "-m", DESCRIPTION)["version"]
        # a job that reads the corpus, submitted as a person does (its latest: v2)
        r = subprocess.run([sys.executable, "-m", "rota", "submit", "--json", "--gpus", "0",
                            "--name", "ui-ds-reader", "--dataset", CORPUS, "--", "sh", "-c",
                            'test -f "$ROTA_DATASET_UI_DS_CORPUS/blob.bin"'],
                           env=dash.daemon.env,
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        got.job = int(json.loads(r.stdout)["jobs"][0]["id"])
        wait_until(lambda: dash.job(got.job)["state"] == "completed", timeout=60,
                   what="the job that reads the corpus to end")
        yield got


def _row(page: Page, name: str) -> Any:
    return page.locator(f"table.datasets tr[data-dataset='{OWNER}/{name}']")


def _expect_cells(row: Any, **cells: str) -> None:
    for column, text in cells.items():
        expect(row.locator(f".c-{column}")).to_have_text(text)


def test_the_list_shows_each_dataset_with_its_versions_size_and_access(
        open_page: Open, datasets_daemon: Datasets) -> None:
    dash = datasets_daemon.dash
    page = open_page(on=dash, hash="#/datasets")
    expect(page.get_by_role("heading", name="Datasets", level=1)).to_be_visible()
    expect(page.get_by_role("link", name="Datasets", exact=True)).to_have_attribute(
        "aria-current", "page")
    expect(page.locator("table.datasets tbody tr")).to_have_count(2)
    expect(page.locator("table.datasets thead th")).to_have_text(
        ["Dataset", "Latest", "Versions", "Files", "Size", "Access", "On this machine",
         "Added", "Description"])
    corpus, many = _row(page, CORPUS), _row(page, MANY)
    # the corpus's latest version was fetched here for the job; the other one never was
    _expect_cells(corpus, name=f"{OWNER}/{CORPUS}", latest="v2", versions="v1, v2",
                  files="3", size="1.5M", access="private", here="yes", desc="\u2013")
    _expect_cells(many, name=f"{OWNER}/{MANY}", latest="v1", versions="v1",
                  files=str(MANY_FILES), size="503K", access="shared", here="no",
                  desc=DESCRIPTION)  # markup in it is text
    for row in (corpus, many):
        expect(row.locator(".c-added")).to_have_text(re.compile(f"^{STAMP} by {OWNER}$"))
    assert page.locator(".datasets b").count() == 0
    expect(page.locator("#datasets-summary")).to_have_text(
        "2 datasets · 2.0M in their latest versions")  # 1575936 + 503 * 1024 bytes
    # the access badges differ by colour, not by the word alone
    colour = "e => getComputedStyle(e).backgroundColor"
    assert corpus.locator(".c-access .badge").evaluate(colour) != \
        many.locator(".c-access .badge").evaluate(colour)

    # bob is no admin: he sees the shared dataset only (the API decides)
    bobs = open_page("bob", on=dash, hash="#/datasets")
    expect(_row(bobs, MANY)).to_be_visible()
    expect(bobs.locator("table.datasets tbody tr")).to_have_count(1)

    # a dataset is reached by Tab and opened by Enter, its focus ring shown as other links'
    link = corpus.get_by_role("link", name=f"{OWNER}/{CORPUS}", exact=True)
    page.locator("#skip-link").focus()
    for _ in range(40):
        page.keyboard.press("Tab")
        if link.evaluate("e => e === document.activeElement"):
            break
    expect(link).to_be_focused()
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"{OWNER}/{CORPUS}")
    assert page.url.endswith(f"#/datasets/{OWNER}/{CORPUS}")


def test_the_detail_shows_files_and_jobs_and_switches_version(
        open_page: Open, datasets_daemon: Datasets) -> None:
    got = datasets_daemon
    dash = got.dash
    page = open_page(on=dash, hash=f"#/datasets/{OWNER}/{CORPUS}")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"{OWNER}/{CORPUS}")
    picker = page.get_by_label("Version")
    expect(picker).to_have_value("v2")
    expect(picker.locator("option")).to_have_text(["v2 (latest)", "v1"])

    facts = page.locator("dl.dataset-facts")

    def fact(name: str) -> Any:
        return facts.locator(f"dt:text-is('{name}') + dd")

    expect(fact("Version")).to_have_text("v2 of 2")
    expect(fact("Digest")).to_have_text(got.v2["digest"])
    expect(fact("Source")).to_have_text(got.v2["source"])
    expect(fact("Store key")).to_have_text(got.v2["key"])
    expect(fact("Size")).to_have_text("1.5M")
    expect(fact("Access")).to_have_text("private")

    files = page.locator("table.dataset-files tbody tr")
    expect(files).to_have_count(3)
    for path, data in V2.items():
        row = page.locator(f"table.dataset-files tr[data-path='{path}']")
        expect(row.locator(".c-sha")).to_have_text(_sha16(data))
    expect(page.locator("tr[data-path='blob.bin'] .c-size")).to_have_text("1.5M")
    expect(page.locator("tr[data-path='train.txt'] .c-size")).to_have_text("2K")
    expect(page.locator("tr[data-path='train.txt'] .c-sha code")).to_have_attribute(
        "title", hashlib.sha256(V2["train.txt"]).hexdigest())
    expect(page.locator(".dataset-more")).to_have_count(0)

    jobs = page.locator("table.dataset-jobs tbody tr")
    expect(jobs).to_have_count(1)
    expect(jobs).to_have_text(f"#{got.job}completed")

    # the version selector shows v1's files, and the address follows; the focus stays on it
    picker.focus()
    picker.select_option("v1")
    expect(fact("Version")).to_have_text("v1 of 2")
    expect(fact("Digest")).to_have_text(got.v1["digest"])
    expect(files).to_have_count(2)
    expect(page.locator("tr[data-path='train.txt'] .c-sha")).to_have_text(
        _sha16(V1["train.txt"]))
    expect(page.locator("tr[data-path='sub/valid.jsonl'] .c-size")).to_have_text("1K")
    expect(page.locator("tr[data-path='blob.bin']")).to_have_count(0)
    expect(page.get_by_text("No job has read this version.")).to_be_visible()
    expect(picker).to_be_focused()
    assert page.url.endswith(f"#/datasets/{OWNER}/{CORPUS}?version=v1")
    page.reload()  # the address alone brings it back
    expect(fact("Digest")).to_have_text(got.v1["digest"])
    expect(page.get_by_label("Version")).to_have_value("v1")

    picker = page.get_by_label("Version")
    picker.select_option("v2")
    expect(jobs).to_have_count(1)
    jobs.get_by_role("link", name=f"#{got.job}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("ui-ds-reader")
    assert page.url.endswith(f"#/jobs/{got.job}")


def test_the_job_page_lists_its_datasets_linking_to_that_version(
        open_page: Open, datasets_daemon: Datasets) -> None:
    got = datasets_daemon
    page = open_page(on=got.dash, hash=f"#/jobs/{got.job}")
    spec = page.locator("[aria-labelledby=h-spec] dl")
    row = spec.locator("dt:text-is('Datasets') + dd")
    expect(row).to_have_text(got.v2["ref"])
    assert got.v2["ref"] == f"{OWNER}/{CORPUS}:v2"
    link = row.get_by_role("link", name=got.v2["ref"])
    expect(link).to_have_attribute("href", f"#/datasets/{OWNER}/{CORPUS}?version=v2")
    link.click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"{OWNER}/{CORPUS}")
    expect(page.get_by_label("Version")).to_have_value("v2")
    expect(page.locator("table.dataset-jobs tbody tr")).to_have_text(f"#{got.job}completed")

    # a job that names no dataset shows no such row
    other = got.dash.submit(command=["true"], name="ui-ds-none", gpus=0)
    page.goto(got.dash.url + f"#/jobs/{other['id']}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("ui-ds-none")
    expect(page.locator("[aria-labelledby=h-spec] dt:text-is('Datasets')")).to_have_count(0)


def test_a_long_list_of_files_is_cut_with_the_rest_counted(
        open_page: Open, datasets_daemon: Datasets) -> None:
    page = open_page(on=datasets_daemon.dash, hash=f"#/datasets/{OWNER}/{MANY}")
    expect(page.locator("table.dataset-files tbody tr")).to_have_count(500)
    expect(page.locator(".dataset-more")).to_have_text(f"and {MANY_FILES - 500} more")
    expect(page.locator("table.dataset-files tbody tr").first.locator(".c-path")).to_have_text(
        "part-000.txt")
    expect(page.locator("dl.dataset-facts dt:text-is('Description') + dd")).to_have_text(
        DESCRIPTION)
    expect(page.locator("dl.dataset-facts dt:text-is('Access') + dd")).to_have_text("shared")
    expect(page.get_by_text("No job has read this version.")).to_be_visible()


def test_a_dataset_not_there_is_said_as_the_api_says_it(
        open_page: Open, datasets_daemon: Datasets, seen: Any) -> None:
    dash = datasets_daemon.dash
    missing: list[str] = []
    page = open_page(on=dash, hash="#/datasets")
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.goto(dash.url + f"#/datasets/{OWNER}/ui-ds-nope")
    with dash.api() as c:
        r = c.get("/v1/datasets/ui-ds-nope", params={"owner": OWNER})
    assert r.status_code == 404
    expect(page.locator(".error-box[role=alert]")).to_have_text(r.json()["detail"])
    expect(page.locator("table.dataset-files")).to_have_count(0)
    page.goto(dash.url + f"#/datasets/{OWNER}/{CORPUS}?version=v9")
    expect(page.locator(".error-box[role=alert]")).to_contain_text("v9")
    # the browser logs each 404 the API answered; those, and only those, were expected
    assert missing and all("/v1/datasets/" in url for url in missing), missing
    for _ in range(100):
        if sum("status of 404" in e for e in seen.errors) >= len(missing):
            break
        page.wait_for_timeout(50)
    page.close()
    seen.errors[:] = [e for e in seen.errors if "status of 404" not in e]


def test_the_pages_fit_a_phone(open_page: Open, datasets_daemon: Datasets) -> None:
    dash = datasets_daemon.dash
    page = open_page(on=dash, hash="#/datasets", width=375, height=800)
    for where in ("#/datasets", f"#/datasets/{OWNER}/{CORPUS}", f"#/datasets/{OWNER}/{MANY}"):
        page.goto(dash.url + where)
        expect(page.locator(".live")).to_contain_text("live")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 375, f"{where} is {width}px wide at a 375px viewport"


def test_with_no_dataset_the_page_says_how_to_add_one(
        open_page: Open, tmp_path: Path,
        new_dashboard: Callable[[Path], contextlib.AbstractContextManager[Any]]) -> None:
    with new_dashboard(tmp_path / "home") as dash:
        page = open_page(on=dash, hash="#/datasets")
        empty = page.locator("p.empty")
        expect(empty).to_be_visible()
        expect(empty).to_contain_text("No datasets yet. Add one with rota dataset add NAME PATH")
        expect(empty.locator("code").first).to_have_text("rota dataset add NAME PATH")
        expect(page.locator("table.datasets")).to_be_hidden()
        expect(page.locator(".live")).to_contain_text("live")
