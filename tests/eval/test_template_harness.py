"""The eval-lm-harness template through a real daemon: lm-evaluation-harness on a tiny
Llama built here and a task on local JSON lines (nothing downloaded); the job completes,
its task metrics are in `rota eval results` and in Rota's MLflow run; a task lm-eval does
not know fails the job with lm-eval's reason, which is the job's end reason (`rota why`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_testing import require_real_harness

from hf_testing import OFFLINE, attempts_log, finished, job, submit
from rota_testing import DaemonProcess, wait_until

require_real_harness()
pytestmark = pytest.mark.slow


@pytest.fixture
def hf_daemon(daemon_factory: type[DaemonProcess]) -> DaemonProcess:
    return daemon_factory(extra_env=OFFLINE).start()


def sets(tiny: Path, task_dir: Path, out: Path, tasks: str = "tiny_mc") -> dict[str, object]:
    return {"model": tiny, "task_dir": task_dir, "tasks": tasks, "gpus": 0, "device": "cpu",
            "batch_size": 2, "dtype": "float32", "out": out, "name": "tiny-suite"}


def test_the_template_evaluates_and_its_metrics_reach_rota(
        hf_daemon: DaemonProcess, tiny: Path, task_dir: Path, tmp_path: Path) -> None:
    job_id = submit(hf_daemon, "eval-lm-harness", tmp_path, **sets(tiny, task_dir,
                                                                  tmp_path / "out"))
    done = finished(hf_daemon, job_id, timeout=300)
    assert "eval:tiny-suite" in done["spec"]["tags"]
    with hf_daemon.client() as c:
        runs = wait_until(lambda: c.eval_results(name="tiny-suite")["runs"], 30,
                          what="the evaluation's results")
    [run] = runs
    assert run["id"] == job_id and run["model"] == str(tiny) and run["harness"] == "lm-eval"
    assert 0.0 <= run["metrics"]["tiny_mc/acc"] <= 1.0, run
    result = json.loads((tmp_path / "out" / "rota-eval.json").read_text())
    assert result["metrics"]["tiny_mc/acc"] == run["metrics"]["tiny_mc/acc"]


def test_a_task_lm_eval_does_not_know_fails_the_job(
        hf_daemon: DaemonProcess, tiny: Path, task_dir: Path, tmp_path: Path) -> None:
    values = {**sets(tiny, task_dir, tmp_path / "out", tasks="no_such_task"), "retries": 0}
    job_id = submit(hf_daemon, "eval-lm-harness", tmp_path, **values)
    with pytest.raises(AssertionError):
        finished(hf_daemon, job_id, timeout=300)
    ended = job(hf_daemon, job_id)
    assert ended["state"] == "failed"
    assert "rota-eval: FAILED:" in attempts_log(hf_daemon, job_id)
    assert "no_such_task" in attempts_log(hf_daemon, job_id)
    # the runner's reason is the job's end, not a bare exit code (rota.job.fail_reason)
    assert ended["end_reason"].startswith("exit code 1: lm_eval exited with status 1: "), \
        ended["end_reason"]
    assert "no_such_task" in ended["end_reason"]
    why = hf_daemon.cli("why", str(job_id))
    assert why.returncode == 0 and "Tasks not found: no_such_task" in why.stdout, why.stdout
