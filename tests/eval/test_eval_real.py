"""The harnesses for real: lm-evaluation-harness on a tiny Llama built here and a
multiple-choice task on local JSON lines (nothing downloaded), the model fetched from a
real MLflow store and the results logged back to it; the held-out template on the shipped
sample, its results in Rota's own MLflow run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_testing import config_text, require_real_harness, run_eval

require_real_harness()

import mlflow  # noqa: E402

from rota.templates import instruct  # noqa: E402

pytestmark = pytest.mark.slow


def lm_eval_harness(task_dir: Path, *tasks: str) -> dict[str, object]:
    return {"kind": "lm-eval", "tasks": list(tasks or ["tiny_mc"]), "task_dir": str(task_dir),
            "limits": {"batch_size": 2, "dtype": "float32"}, "args": {"device": "cpu"}}


def logged_model(store: str, tiny: Path, artifacts: Path) -> str:
    """The tiny model as the artifact ``model`` of a run in a real MLflow store."""
    client = mlflow.MlflowClient(tracking_uri=store)
    exp = client.create_experiment("training", artifact_location=str(artifacts))
    run_id = client.create_run(exp).info.run_id
    client.log_artifacts(run_id, str(tiny), "model")
    client.set_terminated(run_id)
    return str(run_id)


def test_lm_eval_on_a_model_from_mlflow_with_results_in_mlflow(
        tiny: Path, task_dir: Path, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = logged_model(store, tiny, tmp_path / "artifacts")
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(config_text(
        name="tiny-mc", harness=lm_eval_harness(task_dir),
        model={"mlflow": {"tracking_uri": store, "run_id": run_id, "artifact_path": "model"}}))
    ran = run_eval(tmp_path, "--config", str(cfg),
                   env={"ROTA_EVAL_GIT_COMMIT": "c" * 40, "ROTA_EVAL_GIT_DIRTY": "false",
                        "ROTA_JOB_ID": "42", "ROTA_POOL": "gpu-a"})
    assert ran.code == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert f"fetching runs:/{run_id}/model into" in ran.stdout
    assert set(ran.metrics) == {"tiny_mc/acc", "tiny_mc/acc_stderr"}
    assert 0 <= ran.metrics["tiny_mc/acc"] <= 1
    record = json.loads((tmp_path / "eval-output" / "rota-eval.json").read_text())
    assert record["metrics"] == ran.metrics and record["model"] == f"runs:/{run_id}/model"
    assert (tmp_path / "eval-output" / "model" / "model" / "config.json").is_file()

    client = mlflow.MlflowClient(tracking_uri=store)
    evals = client.get_experiment_by_name("evals")
    assert evals is not None
    [run] = client.search_runs([evals.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "tiny-mc"
    assert run.data.metrics == ran.metrics
    p, t = run.data.params, run.data.tags
    assert (p["harness.limits.batch_size"], p["harness.tasks"], p["model.mlflow.run_id"]) \
        == ("2", "tiny_mc", run_id)
    assert (t["creator"], t["lifecycle"], t["datasets"]) == ("ana", "candidate", "tiny")
    assert (t["rota.eval.git_commit"], t["rota.eval.git_dirty"]) == ("c" * 40, "false")
    assert (t["rota.job_id"], t["rota.eval.pool"], t["rota.eval.harness"]) == \
        ("42", "gpu-a", "lm-eval")
    assert t["rota.eval.gpu_type"]  # "cpu" here, the GPU's name where there is one
    art = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="eval",
                                              tracking_uri=store, dst_path=str(tmp_path / "a"))
    assert Path(art, "config.yaml").read_text() == cfg.read_text()
    assert json.loads(Path(art, "rota-eval.json").read_text())["metrics"] == ran.metrics
    assert list(Path(art, "raw").glob("*/results_*.json"))  # lm-eval's own output


def test_an_unknown_task_fails_with_lm_evals_reason(tiny: Path, task_dir: Path,
                                                    tmp_path: Path) -> None:
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(config_text(model={"uri": str(tiny)},
                               harness=lm_eval_harness(task_dir, "tiny_mc", "no_such_task")))
    ran = run_eval(tmp_path, "--config", str(cfg))
    assert ran.code == 1
    assert "lm_eval exited with status 1" in ran.failure
    assert "Tasks not found: no_such_task" in ran.failure


def test_heldout_reports_into_rotas_own_run_from_the_fetched_folder(
        tiny: Path, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = logged_model(store, tiny, tmp_path / "artifacts")
    client = mlflow.MlflowClient(tracking_uri=store)
    exp = client.create_experiment("rota", artifact_location=str(tmp_path / "rota-artifacts"))
    rota_run = client.create_run(exp).info.run_id  # the daemon's
    text = config_text(
        model={"mlflow": {"tracking_uri": store, "run_id": run_id, "artifact_path": "model"}},
        harness={"kind": "heldout", "tasks": [instruct.shipped("heldout.jsonl")],
                 "limits": {"batch_size": 4, "max_length": 256}, "args": {"device": "cpu"}})
    env = {"ROTA_EVAL_CONFIG": text, "ROTA_MODEL_DIR": str(tmp_path / "shared" / "model")}
    assert run_eval(tmp_path, "--fetch-only", env=env).code == 0  # the CPU job before
    (tmp_path / "mlflow.db").rename(tmp_path / "moved.db")  # the model is fetched: no refetch
    store = f"sqlite:///{tmp_path / 'moved.db'}"
    ran = run_eval(tmp_path, env={**env, "MLFLOW_RUN_ID": rota_run,
                                  "MLFLOW_TRACKING_URI": store})
    assert ran.code == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "fetching" not in ran.stdout
    assert set(ran.metrics) == {"heldout/eval_loss", "heldout/perplexity", "heldout/eval_tokens",
                                "heldout/examples", "heldout/left_out"}
    assert ran.metrics["heldout/perplexity"] > 1 and ran.metrics["heldout/eval_tokens"] > 0
    run = mlflow.MlflowClient(tracking_uri=store).get_run(rota_run)
    assert run.data.metrics == ran.metrics  # the template logged nothing of its own there
    assert run.info.status == "RUNNING"  # Rota's run: Rota closes it
    assert run.data.params["harness.kind"] == "heldout"
