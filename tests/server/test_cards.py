"""A job's card: its facts shown in Markdown and in HTML (every value escaped there), its
loss curve drawn as an SVG polyline of at most CURVE_POINTS points, the dataset versions it
read (from a real store) and the git commit it ran (from a real repository)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota.core.spec import JobSpec
from rota.server.storage import cards
from rota.server.storage.cards import (
    CURVE_POINTS,
    CardFacts,
    curve_metric,
    curve_svg,
    html_page,
    markdown,
)
from rota.store.repo import Store


def facts(**more: object) -> CardFacts:
    base: dict[str, object] = dict(
        job={"id": 7, "name": "<script>alert(1)</script>", "user": "alice",
             "project": "vision", "state": "completed", "created_at": 0.0,
             "ended_at": 10.0, "end_reason": None},
        spec={"command": ["python", "train.py", "--lr", "1e-4 & rm -rf"], "gpus": 0.5,
              "cwd": "/work", "env": {"SEED": "1", "TOKEN": "s3cr3t"},
              "secret_env": ["TOKEN"], "tags": ["a", "b"]},
        attempts=2, gpu_hours=1.25, cost=3.5,
        metrics={"acc": [(1, 0.5), (2, 0.75)],
                 "loss": [(i, 1.0 / (i + 1)) for i in range(1000)]},
        checkpoint="/work/ckpt/step-1000", outputs=[
            {"path": "out/model.bin", "size": 1024, "sha256": "ab" * 32}])
    base.update(more)
    return CardFacts(**base)  # type: ignore[arg-type]


def test_the_markdown_card_tells_command_cost_metrics_and_outputs() -> None:
    text = markdown(facts())
    assert "| Command | `python train.py --lr '1e-4 & rm -rf'` |" in text
    assert "| Cost | 3.50 |" in text and "| GPU-hours | 1.250 |" in text
    assert "| Attempts | 2 |" in text
    assert "| loss | 0.001 | 0.001 | 1 | 1000 |" in text
    assert "| acc | 0.75 | 0.5 | 0.75 | 2 |" in text
    assert "![loss by step](loss.svg)" in text
    assert "| out/model.bin | 1024 | `abababababababab` |" in text
    assert "TOKEN=***" in text and "s3cr3t" not in text  # a secret's value never shown
    assert "| Cost | - |" in markdown(facts(cost=None))
    # at Rota's shipped prices (rota.toml declares no tiers) the cost says so
    assert "| Cost (default prices) | 3.50 |" in markdown(facts(default_prices=True))
    assert "No metrics were read" in markdown(facts(metrics={}))


def test_the_html_card_escapes_every_value() -> None:
    page = html_page(facts())
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "1e-4 &amp; rm -rf" in page
    assert "<svg" in page and "s3cr3t" not in page


def test_the_curve_is_the_loss_thinned_to_its_points() -> None:
    f = facts()
    assert curve_metric(f.metrics) == "loss"
    assert curve_metric({"acc": [(1, 0.1)]}) == "acc"
    svg = curve_svg("loss", f.metrics["loss"])
    points = re.search(r'points="([^"]+)"', svg)
    assert points is not None and len(points.group(1).split()) == CURVE_POINTS
    assert "loss: 1 to 0.001" in svg and "step 0 to 999" in svg
    one = curve_svg("x", [(None, 2.0)])  # a single sample, no step: drawn, not divided by 0
    assert 'points="36.0,204.0"' in one



@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'rota.db'}")
    yield s
    s.close()


def a_version(store: Store, owner: str, name: str, digest: str, files: int, size: int) -> int:
    row, _ = store.add_dataset_version(
        owner=owner, name=name, digest=digest, key=f"datasets/{owner}/{name}/{digest}",
        store_url="file:///s", shared=False, files=files, size=size, source="upload",
        description=None, by=owner, now=1.0)
    return int(row.id)


def a_job(store: Store, **spec: Any) -> int:
    [row] = store.add_jobs([JobSpec(command=["python", "train.py"], **spec)], user="alice",
                           source="cli", now=2.0)
    return int(row.id)


def test_the_card_lists_the_dataset_versions_the_job_read(store: Store) -> None:
    a_version(store, "alice", "text-mini", "a1" * 32, 3, 1024)
    a_version(store, "alice", "text-mini", "b2" * 32, 4, 3 << 20)  # v2
    gone = a_version(store, "bob", "images", "c3" * 32, 9, 99)
    store.remove_dataset_versions([gone], now=3.0)
    job = a_job(store, datasets=["alice/text-mini:v2", "bob/images:v1"])
    f = cards.facts(store, job, now=5.0)
    assert f.datasets == [
        {"ref": "alice/text-mini:v2", "digest": "b2" * 32, "files": 4, "bytes": 3 << 20,
         "note": None},
        {"ref": "bob/images:v1", "digest": None, "files": None, "bytes": None,
         "note": "removed"}]
    text = markdown(f)
    data = text[text.index("## Data"):text.index("## Saved outputs")]
    assert "| dataset | files | size | sha256 |" in data
    assert "| alice/text-mini:v2 | 4 | 3M | `b2b2b2b2b2b2b2b2` |" in data
    assert "| bob/images:v1 | - | - | removed |" in data
    page = html_page(f)
    assert "<h2>Data</h2>" in page and "<code>b2b2b2b2b2b2b2b2</code>" in page
    assert "<td>bob/images:v1</td><td>-</td><td>-</td><td>removed</td>" in page
    plain = cards.facts(store, a_job(store), now=5.0)
    assert plain.datasets == [] and "It read no registered datasets." in markdown(plain)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.email=t@e", "-c", "user.name=t",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository on branch main, one commit, a remote with a token, a tracked file
    changed since."""
    w = tmp_path / "work"
    w.mkdir()
    git(w, "init", "-q", "-b", "main")
    (w / "train.py").write_text("print(1)\n")
    git(w, "add", "train.py")
    git(w, "commit", "-qm", "first")
    git(w, "remote", "add", "origin", "https://someone:s3cr3t@example.com/lab/repo.git")
    (w / "train.py").write_text("print(2)\n")
    return w


def test_without_a_recorded_state_the_git_commit_is_read_when_the_card_is_made(
        store: Store, repo: Path) -> None:
    f = cards.facts(store, a_job(store, cwd=str(repo)), now=5.0)
    assert f.git is None  # facts reads the store only: no git run on the loop
    made = cards.with_git(f, None)
    head = git(repo, "rev-parse", "HEAD")
    assert made.git == {"commit": head, "dirty": True, "branch": "main",
                        "remote": "https://example.com/lab/repo.git", "source": "card"}
    text = markdown(made)
    section = text[text.index("## Git"):text.index("## Data")]
    assert f"| Commit | `{head}` |" in section and "| Branch | main |" in section
    assert "| Uncommitted changes | yes |" in section
    assert "| Remote | https://example.com/lab/repo.git |" in section
    assert "Read when this card was made" in section and "s3cr3t" not in text
    page = html_page(made)
    assert f"<tr><th>Commit</th><td>{head}</td></tr>" in page and "s3cr3t" not in page
    outside = cards.with_git(cards.facts(store, a_job(store, cwd=str(repo.parent)), now=5.0),
                             None)
    assert outside.git is None
    assert "No git commit known: its working directory is not a git repository" in \
        markdown(outside)


def test_the_git_state_recorded_at_submit_wins_over_the_working_directory_now(
        store: Store, repo: Path) -> None:
    at_submit = git(repo, "rev-parse", "HEAD")
    job = a_job(store, cwd=str(repo), mlflow=True)
    store.set_tracking(job, {"mlflow": {"run_id": "r1", "git": {
        "commit": at_submit, "dirty": False, "branch": "main", "remote": None}}})
    git(repo, "commit", "-qam", "second")  # the tree moved on after the job ran
    made = cards.with_git(cards.facts(store, job, now=5.0), None)
    assert made.git is not None and made.git["commit"] == at_submit
    assert made.git["source"] == "submit"
    text = markdown(made)
    assert f"| Commit | `{at_submit}` |" in text and "| Uncommitted changes | no |" in text
    assert "Recorded at submit" in text and git(repo, "rev-parse", "HEAD") not in text


def test_a_card_without_listed_outputs_says_where_they_are_saved() -> None:
    text = markdown(facts(outputs=[], spec={"command": ["x"], "outputs": ["out", "eval"]}))
    assert "its output folders (out, eval) are saved" in text and "`rota artifacts 7`" in text
    assert "None saved" in markdown(facts(outputs=[], spec={"command": ["x"]}))
