"""`rota eval submit` end to end through a real daemon: the model logged as an artifact of
a run in a real MLflow store is fetched by the model-fetch job (no GPU), lm-evaluation-harness
evaluates it in the evaluation job that ran after it, and the results are in `rota eval
results` and in the job's MLflow run in Rota's own store (nothing downloaded: a tiny Llama
built here, a task on local JSON lines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_testing import config_text, require_real_harness

from hf_testing import OFFLINE, attempts_log, finished
from rota_testing import DaemonProcess

require_real_harness()

import mlflow  # noqa: E402
from test_eval_real import lm_eval_harness, logged_model  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_model_from_mlflow_is_fetched_by_its_own_job_then_evaluated(
        daemon_factory: type[DaemonProcess], tiny: Path, task_dir: Path,
        tmp_path: Path) -> None:
    d = daemon_factory(extra_env=OFFLINE).start()
    store = f"sqlite:///{tmp_path / 'models.db'}"
    run_id = logged_model(store, tiny, tmp_path / "artifacts")
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(config_text(
        name="tiny-mc", harness=lm_eval_harness(task_dir), compute={"gpus": 0},
        model={"mlflow": {"tracking_uri": store, "run_id": run_id, "artifact_path": "model"}}))
    work = tmp_path / "work"
    r = d.cli("eval", "submit", str(cfg), "--work-dir", str(work), "--json")
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    fetch, evaluate = answer["fetch"]["jobs"][0]["id"], answer["evaluate"]["jobs"][0]["id"]

    fetched = finished(d, fetch, timeout=300)
    done = finished(d, evaluate, timeout=300)
    assert fetched["spec"]["gpus"] == 0 and done["spec"]["after"] == [fetch]
    assert done["started_at"] >= fetched["ended_at"]
    assert f"fetching runs:/{run_id}/model into" in attempts_log(d, fetch)
    assert "fetching" not in attempts_log(d, evaluate)  # the folder was filled already
    assert any(work.joinpath("model").rglob("config.json"))

    results = json.loads(d.cli("eval", "results", "--name", "tiny-mc", "--json").stdout)
    [run] = results["runs"]
    assert run["id"] == evaluate and run["model"] == f"runs:/{run_id}/model"
    assert 0.0 <= run["metrics"]["tiny_mc/acc"] <= 1.0

    # the evaluation's MLflow run is the job's own, in Rota's store
    rota_store = mlflow.MlflowClient(tracking_uri=f"sqlite:///{d.home / 'mlflow.db'}")
    experiment = rota_store.get_experiment_by_name("evals")
    assert experiment is not None
    [mlrun] = rota_store.search_runs([experiment.experiment_id])
    assert mlrun.data.metrics["tiny_mc/acc"] == run["metrics"]["tiny_mc/acc"]
    assert mlrun.data.params["model.mlflow.run_id"] == run_id
    assert mlrun.data.tags["rota.job_id"] == str(evaluate)
    # artifacts under eval/: the config, the results, the raw output and the job's own log
    shown = {a.path for a in rota_store.list_artifacts(mlrun.info.run_id, "eval")}
    assert shown >= {"eval/config.yaml", "eval/rota-eval.json", "eval/raw",
                     f"eval/{evaluate}.log"}, shown
    log = Path(rota_store.download_artifacts(mlrun.info.run_id, f"eval/{evaluate}.log",
                                             str(tmp_path / "got")))
    assert "rota-eval: running " in log.read_text()
