"""An evaluation config as Rota jobs: one job where the pool fetches the model (Kubernetes),
a fetch job on no GPU and the evaluation after it elsewhere; every spec valid. On
Kubernetes the harness's local files travel in the job's files (a ConfigMap) and the pod's
config names them where they are mounted; what a ConfigMap cannot carry is refused."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from eval_testing import write_task

from rota.backends.kubernetes.pod import SCRATCH
from rota.core.spec import FILES_MAX, parse_spec
from rota.errors import InvalidSpec
from rota.eval.config import load_text
from rota.eval.jobs import CONFIG_PATH, OUT_ENV, POD_FILES, POD_OUT, Source, eval_jobs
from rota.eval.submission import make_plan

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


# --- Kubernetes: the harness's local files travel in the ConfigMap --------------------------
def k8s_plan(text: str, config_dir: Path):  # type: ignore[no-untyped-def]
    return make_plan(load_text(text), Source(text), pool="k8s", engine="kubernetes",
                     work_dir="/unused", config_dir=str(config_dir))


def with_harness(harness: str) -> str:
    return CONFIG.replace("harness: {kind: lm-eval, tasks: [arc_easy], limits: {batch_size: 4}}",
                          harness)


def test_on_kubernetes_the_task_dir_is_mounted_and_the_pods_config_names_it(
        tmp_path: Path) -> None:
    """A relative task_dir (from the config's folder) goes whole into the job's files; the
    task YAML's absolute data path and the config's task_dir name the pod's paths; the
    runner writes in the pod's scratch volume."""
    tasks = write_task(tmp_path / "tasks")
    (tasks / "__pycache__").mkdir()
    (tasks / "__pycache__" / "x.pyc").write_bytes(b"\0binary")  # left out, as hidden files
    (tasks / ".hidden").write_text("x")
    (tasks / "sub").mkdir()
    (tasks / "sub" / "more.yaml").write_text(f"see: {tasks}/tiny_mc.jsonl and {tasks}2/x\n")
    text = with_harness("harness: {kind: lm-eval, tasks: [tiny_mc], task_dir: tasks}")
    spec = parse_spec(k8s_plan(text, tmp_path).jobs.evaluate)
    d = f"{POD_FILES}/task_dir"
    assert set(spec.files) == {CONFIG_PATH, f"{d}/tiny_mc.yaml", f"{d}/tiny_mc.jsonl",
                               f"{d}/sub/more.yaml"}
    assert spec.files[f"{d}/tiny_mc.jsonl"] == (tasks / "tiny_mc.jsonl").read_text()
    assert f"test: {d}/tiny_mc.jsonl\n" in spec.files[f"{d}/tiny_mc.yaml"]
    assert spec.files[f"{d}/sub/more.yaml"] == f"see: {d}/tiny_mc.jsonl and {tasks}2/x\n"
    pod_config = load_text(spec.files[CONFIG_PATH])
    assert pod_config.harness.task_dir == d
    assert pod_config.model_dump(exclude={"harness"}) == \
        load_text(text).model_dump(exclude={"harness"})
    assert spec.env[OUT_ENV] == POD_OUT and POD_OUT.startswith(SCRATCH + "/")
    assert spec.command[-2:] == ["--config", CONFIG_PATH]


def test_on_kubernetes_heldout_data_files_are_mounted_each(tmp_path: Path) -> None:
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text('{"text": "hello"}\n')
    text = with_harness(f"harness: {{kind: heldout, tasks: [{tmp_path}/a.jsonl, b.jsonl]}}")
    spec = parse_spec(k8s_plan(text, tmp_path).jobs.evaluate)
    mounted = [f"{POD_FILES}/tasks/0/a.jsonl", f"{POD_FILES}/tasks/1/b.jsonl"]
    assert load_text(spec.files[CONFIG_PATH]).harness.tasks == mounted
    assert all(spec.files[m] == '{"text": "hello"}\n' for m in mounted)


def test_without_harness_files_the_config_travels_as_written(tmp_path: Path) -> None:
    spec = parse_spec(k8s_plan(CONFIG, tmp_path).jobs.evaluate)
    assert spec.files == {CONFIG_PATH: CONFIG} and spec.env[OUT_ENV] == POD_OUT


@pytest.mark.parametrize(("setup", "harness", "problem"), [
    (None, "{kind: lm-eval, tasks: [t], task_dir: nowhere}",
     "harness.task_dir: no folder {d}/nowhere here, and a Kubernetes pod gets the harness's "
     "files from this machine"),
    (None, "{kind: heldout, tasks: [gone.jsonl]}", "harness.tasks.0: no file {d}/gone.jsonl "
                                                   "here"),
    ("binary", "{kind: lm-eval, tasks: [t], task_dir: tasks}",
     "harness.task_dir: {d}/tasks/w.bin is not a text file (a ConfigMap carries text)"),
    ("large", "{kind: lm-eval, tasks: [t], task_dir: tasks}",
     "harness.task_dir: {d}/tasks/big.jsonl is larger than a ConfigMap holds"),
    ("many", "{kind: lm-eval, tasks: [t], task_dir: tasks}",
     "the harness's files and the config come to 1,"),
])
def test_what_a_pod_cannot_get_is_refused_with_a_sentence(
        tmp_path: Path, setup: str | None, harness: str, problem: str) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    if setup == "binary":
        (tasks / "w.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    elif setup == "large":
        (tasks / "big.jsonl").write_text("x" * (FILES_MAX + 1))
    elif setup == "many":
        for i in range(3):
            (tasks / f"part{i}.jsonl").write_text("x" * (FILES_MAX // 3))
    with pytest.raises(InvalidSpec) as got:
        k8s_plan(with_harness(f"harness: {harness}"), tmp_path)
    assert str(got.value).startswith(problem.format(d=tmp_path)), got.value


def test_a_pod_job_with_harness_files_needs_them_gathered() -> None:
    text = with_harness("harness: {kind: lm-eval, tasks: [t], task_dir: /tasks}")
    with pytest.raises(ValueError, match="pod_files"):
        jobs(text, engine="kubernetes")
    assert "files" not in jobs(text).evaluate  # elsewhere the path is read where it is


def test_an_adapter_to_fetch_on_a_local_base_gets_a_fetch_job() -> None:
    """The base needs nothing; the adapter (S3 here) is fetched by the fetch job into the
    folder the evaluation reads (ROTA_ADAPTER_DIR)."""
    text = CONFIG.replace(
        'mlflow: {tracking_uri: "http://mlflow:5000", run_id: 0a1b2c, artifact_path: model}',
        "uri: /models/qwen\n  adapter: {uri: s3://bucket/adapters/a1}")
    got = jobs(text)
    assert got.fetch is not None
    fetch, evaluate = parse_spec(got.fetch), parse_spec(got.evaluate)
    assert fetch.command[-1] == "--fetch-only" and fetch.gpus == 0
    assert fetch.env["ROTA_ADAPTER_DIR"] == evaluate.env["ROTA_ADAPTER_DIR"] \
        == "/shared/evals/qwen-arc/adapter"
    assert "ROTA_MODEL_DIR" not in evaluate.env  # the base is read where it is
    pod = parse_spec(jobs(text, engine="kubernetes").evaluate)
    assert pod.model is None  # the runner fetches the adapter into the scratch volume


def test_the_gpu_type_goes_to_the_evaluation_not_to_the_fetch_job() -> None:
    got = jobs(CONFIG.replace("compute: {gpus: 1,", "compute: {gpus: 1, gpu_type: A100,"))
    assert got.fetch is not None and "gpu_type" not in got.fetch
    assert parse_spec(got.evaluate).gpu_type == "A100"
    with pytest.raises(InvalidSpec, match="compute: gpu_type 'A100' names a kind of GPU but "
                                          "gpus is 0"):
        load_text(CONFIG.replace("compute: {gpus: 1,", "compute: {gpus: 0, gpu_type: A100,"))
    with pytest.raises(InvalidSpec, match=r"compute\.gpu_type: String should match pattern"):
        load_text(CONFIG.replace("compute: {gpus: 1,", "compute: {gpus: 1, gpu_type: a b,"))


# --- relative paths, a local model on Kubernetes, no tracking -------------------------------
NEWCOMER = textwrap.dedent("""\
    version: 1
    name: tiny
    model: {uri: ./tiny-llama}
    harness: {kind: lm-eval, tasks: [tiny_mc], task_dir: tasks}
    """)


def local_plan(text: str, config_dir: Path, engine: str = "local"):  # type: ignore[no-untyped-def]
    return make_plan(load_text(text), Source(text), pool="p", engine=engine,
                     work_dir=str(config_dir / ".rota-eval" / "tiny-1"),
                     config_dir=str(config_dir))


def test_relative_paths_are_the_config_folders_on_every_pool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobs run in .rota-eval/NAME-TIME: the model and task folders written relative to
    the config are made absolute, and the runner, reading the config as written, gets the
    same paths from the folder the job names."""
    from rota.eval.run import load_config

    (tmp_path / "tiny-llama").mkdir()
    write_task(tmp_path / "tasks")
    for engine in ("local", "slurm"):
        spec = parse_spec(local_plan(NEWCOMER, tmp_path, engine).jobs.evaluate)
        assert spec.env["ROTA_EVAL_MODEL"] == f"{tmp_path}/tiny-llama"
        assert spec.env["ROTA_EVAL_CONFIG_DIR"] == str(tmp_path)
    monkeypatch.chdir(tmp_path.parent)
    for k, v in spec.env.items():
        monkeypatch.setenv(k, v)
    cfg, text, _ = load_config("")
    assert (cfg.model.uri, cfg.harness.task_dir) == (f"{tmp_path}/tiny-llama",
                                                     f"{tmp_path}/tasks")
    assert text == NEWCOMER


def test_a_local_model_folder_is_refused_on_kubernetes(tmp_path: Path) -> None:
    (tmp_path / "tiny-llama").mkdir()
    write_task(tmp_path / "tasks")
    with pytest.raises(InvalidSpec) as got:
        local_plan(NEWCOMER, tmp_path, "kubernetes")
    assert str(got.value).startswith("model.uri: ./tiny-llama is a folder on this machine, "
                                     "which a Kubernetes pod cannot read")


def test_without_tracking_no_mlflow_run_is_asked_for() -> None:
    """Whatever the daemon's default (--mlflow), an evaluation without tracking gets no run:
    nothing waits for one, and no MLflow is needed where the daemon runs."""
    spec = parse_spec(eval_jobs(load_text(NEWCOMER), Source(NEWCOMER), pool_engine="local",
                                python="python", work_dir="/w").evaluate)
    assert spec.mlflow is False and spec.mlflow_experiment is None
    assert spec.log_metrics == "json"  # the runner's JSON line; not the harness's console
