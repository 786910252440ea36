"""An evaluation config as Rota jobs: one job where the pool fetches the model (Kubernetes),
a fetch job on no GPU and the evaluation after it elsewhere; every spec valid."""

from __future__ import annotations

import textwrap

import pytest

from rota.core.spec import parse_spec
from rota.eval.config import load_text
from rota.eval.jobs import CONFIG_PATH, Source, eval_jobs

CONFIG = textwrap.dedent("""\
    version: 1
    name: qwen-arc
    model:
      mlflow: {tracking_uri: "http://mlflow:5000", run_id: 0a1b2c, artifact_path: model}
    harness: {kind: lm-eval, tasks: [arc_easy], limits: {batch_size: 4}}
    compute: {gpus: 1, gpu_mem: 20G, memory: 32G, time_limit: 2h}
    tracking:
      experiment: evals
      tags: {creator: ana, lifecycle: candidate}
    """)


def jobs(text: str = CONFIG, engine: str = "local"):  # type: ignore[no-untyped-def]
    src = Source(text=text, git_commit="f" * 40, git_dirty=False)
    return eval_jobs(load_text(text), src, pool_engine=engine, python="/venv/bin/python",
                     work_dir="/shared/evals/qwen-arc")


def test_elsewhere_a_fetch_job_on_no_gpu_fills_the_folder_the_evaluation_reads() -> None:
    got = jobs()
    assert got.fetch is not None
    fetch, evaluate = parse_spec(got.fetch), parse_spec(got.evaluate)
    assert fetch.command == ["/venv/bin/python", "-m", "rota.eval.run", "--fetch-only"]
    assert fetch.gpus == 0 and evaluate.gpus == 1 and evaluate.gpu_mem == 20 * 2**30
    assert fetch.env["ROTA_MODEL_DIR"] == evaluate.env["ROTA_MODEL_DIR"] \
        == "/shared/evals/qwen-arc/model"
    assert evaluate.env["ROTA_EVAL_CONFIG"] == CONFIG  # the file as written
    assert evaluate.env["ROTA_MODEL_TRACKING_URI"] == "http://mlflow:5000"
    assert evaluate.env["ROTA_EVAL_MODEL"] == "runs:/0a1b2c/model"
    assert evaluate.env["ROTA_EVAL_GIT_COMMIT"] == "f" * 40
    assert evaluate.memory is None  # this machine limits no plain process
    assert (evaluate.mlflow, evaluate.mlflow_experiment) == (True, "evals")
    assert evaluate.time_limit == 7200 and "eval:qwen-arc" in evaluate.tags


def test_on_kubernetes_one_job_mounts_the_config_and_its_pod_fetches_the_model() -> None:
    got = jobs(engine="kubernetes")
    assert got.fetch is None
    spec = parse_spec(got.evaluate)
    assert spec.command[-2:] == ["--config", CONFIG_PATH]
    assert spec.files == {CONFIG_PATH: CONFIG} and "ROTA_EVAL_CONFIG" not in spec.env
    assert spec.model == "runs:/0a1b2c/model" and spec.memory == 32 * 2**30


@pytest.mark.parametrize("uri", ["/models/qwen", "Qwen/Qwen2.5-0.5B"])
def test_a_folder_or_a_hub_name_needs_no_fetch(uri: str) -> None:
    text = CONFIG.replace(
        'mlflow: {tracking_uri: "http://mlflow:5000", run_id: 0a1b2c, artifact_path: model}',
        f"uri: {uri}")
    got = jobs(text)
    assert got.fetch is None and "ROTA_MODEL_DIR" not in got.evaluate["env"]
    assert parse_spec(got.evaluate).env["ROTA_EVAL_MODEL"] == uri


def test_the_model_server_variable_is_the_one_a_pod_fetches_with() -> None:
    from rota.backends.kubernetes.pod import MODEL_TRACKING_ENV
    from rota.eval import jobs as eval_jobs_module

    assert eval_jobs_module.MODEL_TRACKING_ENV == MODEL_TRACKING_ENV
