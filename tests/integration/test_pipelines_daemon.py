"""`rota pipeline` against a real daemon, for what needs no model: a Gradients config.yaml
added as it is (its disabled tasks paused), the schedule kept across a SIGKILL, a refused
or failed round backed off (doubling, never again at once), run-now, pause and resume,
`rota why pipeline:NAME`, rm. The rounds that train, merge and evaluate a real model are in
tests/pipeline/test_pipeline_rounds.py."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota_testing import DaemonProcess, kill_job_processes, pg_database, wait_until

LOCAL = textwrap.dedent("""\
    version: 1
    name: nodata
    model_repo: ./models/base
    datasets:
      - {name: ./missing/qa.jsonl, field_instruction: q, field_output: a}
    samples_per_training: 100
    train: {where: local, gpus: 0, steps: 2}
    merge: {gpus: 0}
    evaluate: {gpus: 0}
    on_failure: {backoff: 1h, max_backoff: 3h}
    """)


@pytest.fixture(params=["sqlite", "postgres"])
def daemon(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DaemonProcess]:
    """A daemon on SQLite, or on PostgreSQL when ROTA_TEST_PG_URL is set."""
    if request.param == "sqlite":
        yield from _daemon(tmp_path, [])
    else:
        for url in pg_database():
            yield from _daemon(tmp_path, ["--database-url", url])


def _daemon(tmp_path: Path, args: list[str]) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path / "home", simulate="2x24G", args=args).start()
    try:
        yield d
    finally:
        d.stop()
        kill_job_processes(tmp_path)


def cli_json(d: DaemonProcess, *args: str) -> Any:
    r = d.cli(*args, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def pipeline(d: DaemonProcess, name: str) -> dict[str, Any]:
    return dict(cli_json(d, "pipeline", "show", name))


def test_a_gradients_file_is_added_as_it_is_and_its_refused_round_backs_off(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    text = (Path(__file__).parents[1] / "pipeline/data/gradients-config.yaml").read_text()

    f = tmp_path / "config.yaml"
    f.write_text(text)
    r = daemon.cli("pipeline", "validate", str(f))
    assert r.returncode == 0, r.stderr
    assert "llama_chat: ok (gradients form, Chat, 1 dataset, trains gradients; not enabled: "\
           "added paused)" in r.stdout
    added = cli_json(daemon, "pipeline", "add", str(f))["pipelines"]
    assert [(p["name"], p["state"]) for p in added] == [
        ("qwen_instruct", "waiting"), ("llama_chat", "paused"), ("fixed_sets", "waiting"),
        ("someday", "paused")]
    # no S3 or Gradients secret is stored: the first round is refused at its first job,
    # and the next try waits the back-off, not a minute
    wait_until(lambda: pipeline(daemon, "qwen_instruct")["pipeline"]["failures"] == 1,
               what="the first round refused")
    got = pipeline(daemon, "qwen_instruct")
    p, [rd] = got["pipeline"], got["rounds"]
    assert rd["state"] == "failed" and rd["reason"].startswith("prep: refused: secrets: ")
    assert "S3_BUCKET_NAME" in rd["reason"] and "rota secret set" in rd["reason"]
    assert p["next_at"] - rd["ended_at"] == pytest.approx(1800)  # Gradients-form default
    assert "backing off after 1 failed round in a row: 30min" in p["why"]
    why = daemon.cli("why", "pipeline:qwen_instruct")
    assert why.stdout.startswith("pipeline qwen_instruct: round 2 at "), why.stdout
    # a paused task never began a round
    assert pipeline(daemon, "llama_chat")["pipeline"]["rounds"] == 0
    # adding the file again adds nothing (all or none), naming the first taken name
    again = daemon.cli("pipeline", "add", str(f))
    assert again.returncode == 1 and "a pipeline named 'qwen_instruct' exists" in again.stderr
    # the schedule survives a SIGKILL: no round at restart, the same time
    before = pipeline(daemon, "qwen_instruct")["pipeline"]
    daemon.kill()
    daemon.start()
    after = pipeline(daemon, "qwen_instruct")
    assert after["pipeline"]["next_at"] == before["next_at"]
    assert after["pipeline"]["rounds"] == 1 and len(after["rounds"]) == 1


def test_a_failed_round_backs_off_doubling_and_run_now_pause_resume_rm(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(LOCAL)
    [p] = cli_json(daemon, "pipeline", "add", str(f))["pipelines"]
    assert p["base_model"] == str(tmp_path / "models/base")  # read from the file's folder
    wait_until(lambda: pipeline(daemon, "nodata")["pipeline"]["failures"] == 1,
               timeout=60, what="round 1 failed")
    got = pipeline(daemon, "nodata")
    [rd] = got["rounds"]
    job = rd["jobs"]["prep"]
    assert rd["reason"].startswith(f"prep: job {job} failed"), rd["reason"]
    assert got["pipeline"]["next_at"] - rd["ended_at"] == pytest.approx(3600)
    with daemon.client() as c:
        spec = c.job(job)["spec"]
    assert spec["tags"] == ["pipeline", "pipeline:nodata", "round:nodata:1"]
    assert spec["cwd"] == str(tmp_path / "home/pipelines/nodata/round-1")
    # run-now: the second round at once; its failure doubles the wait
    now = cli_json(daemon, "pipeline", "run-now", "nodata")
    assert now["why"].endswith("asked for now (run-now)")
    wait_until(lambda: pipeline(daemon, "nodata")["pipeline"]["failures"] == 2,
               timeout=60, what="round 2 failed")
    got = pipeline(daemon, "nodata")
    assert got["pipeline"]["next_at"] - got["rounds"][0]["ended_at"] == pytest.approx(7200)
    assert [r["number"] for r in got["rounds"]] == [2, 1]
    # pause: no round even when due; resume: the overdue one begins
    paused = cli_json(daemon, "pipeline", "pause", "nodata", "--reason", "data refresh")
    assert (paused["state"], paused["why"]) == ("paused", "paused: data refresh")
    cli_json(daemon, "pipeline", "run-now", "nodata")  # run-now un-pauses: it asks for one
    wait_until(lambda: pipeline(daemon, "nodata")["pipeline"]["rounds"] == 3, timeout=30)
    history = daemon.cli("pipeline", "history", "nodata")
    assert history.returncode == 0 and "round 3:" in history.stdout, history.stdout
    gone = cli_json(daemon, "pipeline", "rm", "nodata")
    assert gone["removed"] is True
    r = daemon.cli("pipeline", "show", "nodata")
    assert r.returncode == 1 and "no pipeline 'nodata'" in r.stderr


def test_an_evaluation_config_of_its_own_is_checked_when_added(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(LOCAL.replace("evaluate: {gpus: 0}", "evaluate: {config: ./eval.yaml}"))
    r = daemon.cli("pipeline", "add", str(f))
    assert r.returncode == 2 and f"{tmp_path / 'eval.yaml'}: cannot read it" in r.stderr
    (tmp_path / "eval.yaml").write_text("version: 1\nname: e\nmodel: {uri: /m}\n"
                                        "harness: {kind: lm-eval, tasks: []}\n")
    r = daemon.cli("pipeline", "add", str(f))
    assert r.returncode == 2 and "eval.yaml:4: harness: name at least one task" in r.stderr
    with daemon.client() as c:
        assert c.pipelines()["pipelines"] == []  # nothing added
