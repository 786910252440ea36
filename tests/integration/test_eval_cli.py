"""`rota eval validate | submit | render | results` against a real daemon: every kind of bad
config named with its path and line; an evaluation submitted as ordinary jobs (a fetch job,
then the evaluation after it; one job for a local folder); nothing half-submitted; the
Kubernetes form validated against the real schemas; a run's metrics read back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter

from backends.kubernetes.schemas import validate
from hf_testing import finished
from rota import Client
from rota.answers import EvalResultsAnswer, RenderAnswer
from rota.errors import Conflict, InvalidSpec, NotFound
from rota.server.api.answer_schemas import pydantic_type
from rota_testing import DaemonProcess, running_daemon, wait_until, without_modules

TOML = """
[pools.k8s]
engine = "kubernetes"
workspace_claim = "team-workspaces"
namespace = "ml"
image = "python:3.11-slim"
kubeconfig = "{home}/no-kubeconfig"
"""

CONFIG = textwrap.dedent("""\
    version: 1
    name: qwen-arc
    model:
      mlflow: {tracking_uri: "http://mlflow:5000", run_id: 0a1b2c, artifact_path: model}
    harness: {kind: lm-eval, tasks: [arc_easy], limits: {batch_size: 4}}
    compute: {gpus: 1, gpu_mem: 20G, time_limit: 2h}
    tracking:
      experiment: evals
      tags: {creator: ana, lifecycle: candidate}
    """)
MLFLOW_MODEL = 'mlflow: {tracking_uri: "http://mlflow:5000", run_id: 0a1b2c, artifact_path: model}'


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    home = tmp_path_factory.mktemp("eval")
    with running_daemon(home, TOML.format(home=home)) as d:
        yield d


def write(folder: Path, text: str, name: str = "eval.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


# --- validate ------------------------------------------------------------------------------
def test_rota_eval_lists_its_commands(daemon: DaemonProcess, tmp_path: Path) -> None:
    r = daemon.cli("eval", "--help")
    assert r.returncode == 0, r.stderr
    assert all(cmd in r.stdout for cmd in ("validate", "submit", "render", "results"))


def test_a_valid_config_is_summed_up_in_one_line(daemon: DaemonProcess, tmp_path: Path) -> None:
    f = write(tmp_path, CONFIG)
    r = daemon.cli("eval", "validate", str(f))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{f}: valid — qwen-arc, lm-eval, 1 task(s), model runs:/0a1b2c/model\n"
    got = json.loads(daemon.cli("eval", "validate", str(f), "--json").stdout)
    assert got["valid"] and got["tasks"] == ["arc_easy"]


BAD = textwrap.dedent("""\
    version: 1
    name: qwen arc
    model:
      mlflow: {tracking_uri: "http://mlflow:5000", run_id: 0a1b2c, artifact_path: model}
      uri: /models/qwen
    harness:
      kind: lm-eval
      tasks: [arc_easy, two words]
      limits: {batch_size: eight}
    compute:
      gpus: -1
      gpu: 2
      memory: 12 apples
      time_limit: soon
    """)


def test_every_bad_field_is_named_with_its_path_and_line(daemon: DaemonProcess,
                                                         tmp_path: Path) -> None:
    """Missing fields, a wrong type, both model sources, an unknown field, a bad name, a
    bad list item, a GPU count out of range and unreadable units (memory, time limit): all
    of them at once, each on its own line with its full path."""
    f = write(tmp_path, BAD)
    r = daemon.cli("eval", "validate", str(f))
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert set(lines) == {
        f"{f}:2: name: String should match pattern '^[A-Za-z0-9][A-Za-z0-9_.-]{{0,99}}$'",
        f"{f}:4: model: give exactly one of mlflow (a run's artifact) and uri",
        f"{f}:8: harness.tasks.1: 'two words' has a space in it: write it as one word (a "
        "name or a path without spaces)",
        f"{f}:9: harness.limits.batch_size: Input should be a valid integer, unable to "
        "parse string as an integer",
        f"{f}:11: compute.gpus: Input should be greater than or equal to 0",
        f"{f}:12: compute.gpu: unknown key: did you mean gpus? the keys here are cpus, "
        "gpu_mem, gpu_type, gpus, image, memory, pool, priority, time_limit",
        f"{f}:13: compute.memory: cannot read '12 apples' as a memory size (GiB unless a "
        "unit is given: 20, 20G, 512M)",
        f"{f}:14: compute.time_limit: cannot read 'soon' as a duration (like 2h, 30m, "
        "1h30m, 90s)",
    }, r.stderr
    got = json.loads(daemon.cli("eval", "validate", str(f), "--json").stdout)
    assert not got["valid"] and {p["line"] for p in got["problems"]} == {2, 4, 8, 9, 11, 12,
                                                                          13, 14}
    assert sorted(f"{f}:{p['line']}: {p['path']}: {p['message']}"
                  for p in got["problems"]) == sorted(lines)


@pytest.mark.parametrize(("text", "problem"), [
    (CONFIG.replace("version: 1", "version: 2"),
     ":1: version: this Rota reads evaluation configs of version 1, not 2"),
    (CONFIG.replace("tasks: [arc_easy]", "tasks: [arc_easy"), ":5: not valid YAML: "),
    ("- a list\n", ": an evaluation config is a mapping"),
])
def test_a_bad_version_bad_yaml_or_no_mapping_is_named(daemon: DaemonProcess, tmp_path: Path,
                                                      text: str, problem: str) -> None:
    f = write(tmp_path, text)
    r = daemon.cli("eval", "validate", str(f))
    assert r.returncode == 2 and r.stderr.startswith(f"{f}{problem}"), r.stderr


NEWCOMER = textwrap.dedent("""\
    version: 1
    name: tiny
    model: {uri: ./tiny-llama}
    harness:
      kind: lm-eval
      tasks: [tiny_mc]
      task_dir: tasks
    """)


def test_validate_reads_local_paths_from_the_configs_folder_and_checks_them(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    """Run from another folder: ./tiny-llama and tasks are the config's; missing, each is
    named at its line; there, the config is valid (no tracking needed)."""
    f = write(tmp_path, NEWCOMER)
    r = daemon.cli("eval", "validate", str(f), "--json")
    assert r.returncode == 2
    assert json.loads(r.stdout)["problems"] == [
        {"path": "model.uri", "line": 3, "message": f"no folder {tmp_path}/tiny-llama here"},
        {"path": "harness.task_dir", "line": 7, "message": f"no folder {tmp_path}/tasks here"}]
    (tmp_path / "tiny-llama").mkdir()
    (tmp_path / "tasks").mkdir()
    r = daemon.cli("eval", "validate", str(f))
    assert r.returncode == 0 and f"model {tmp_path}/tiny-llama" in r.stdout, r.stderr


def test_limits_the_harness_cannot_honour_are_named_with_the_other_problems(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    text = CONFIG.replace("harness: {kind: lm-eval, tasks: [arc_easy], limits: {batch_size: 4}}",
                          "harness:\n  kind: helm\n  tasks: [mmlu]\n  limits:\n"
                          "    batch_size: 4\n    num_fewshot: 0\n    dtype: float16\n") \
        .replace("time_limit: 2h", "time_limit: soon")
    f = write(tmp_path, text)
    r = daemon.cli("eval", "validate", str(f))
    assert r.returncode == 2 and r.stdout == ""
    assert [line.split(" (")[0] for line in r.stderr.splitlines()] == [
        f"{f}:9: harness.limits.batch_size: the helm harness does not take a batch size",
        f"{f}:11: harness.limits.dtype: the helm harness does not take a dtype",
        f"{f}:13: compute.time_limit: cannot read 'soon' as a duration",
    ], r.stderr


def test_submit_and_render_refuse_a_bad_config_before_asking_for_anything(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    f = write(tmp_path, BAD)
    before = len(daemon.client().jobs(limit=1000))
    for args in (["submit", str(f)], ["render", str(f), "--pool", "k8s"]):
        r = daemon.cli("eval", *args)
        assert r.returncode == 2 and "compute.gpu: unknown key" in r.stderr, r.stderr
    assert len(daemon.client().jobs(limit=1000)) == before


# --- submit --------------------------------------------------------------------------------
def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_a_model_to_fetch_becomes_a_fetch_job_then_the_evaluation_after_it(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    f = write(repo, CONFIG)
    _git(repo, "init", "-q")
    _git(repo, "add", "eval.yaml")
    _git(repo, "commit", "-qm", "config")
    commit = _git(repo, "rev-parse", "HEAD")
    work = tmp_path / "work"
    r = daemon.cli("eval", "submit", str(f), "--hold", "--work-dir", str(work), "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    fetch_id, eval_id = got["fetch"]["jobs"][0]["id"], got["evaluate"]["jobs"][0]["id"]
    c = daemon.client()
    fetch, evaluate = c.job(fetch_id), c.job(eval_id)
    assert fetch["state"] == evaluate["state"] == "held"
    fs, es = fetch["spec"], evaluate["spec"]
    assert es["after"] == [fetch_id] and fs["after"] == []
    assert fs["command"] == [sys.executable, "-m", "rota.eval.run", "--fetch-only"]
    assert es["command"] == [sys.executable, "-m", "rota.eval.run"]
    assert (fs["gpus"], es["gpus"]) == (0, 1) and es["gpu_mem"] == 20 * 2**30
    assert fs["cwd"] == es["cwd"] == str(work) and work.is_dir()
    assert fs["env"]["ROTA_MODEL_DIR"] == es["env"]["ROTA_MODEL_DIR"] == str(work / "model")
    assert es["env"]["ROTA_EVAL_CONFIG"] == CONFIG
    assert es["env"]["ROTA_EVAL_GIT_COMMIT"] == commit
    assert es["env"]["ROTA_EVAL_GIT_DIRTY"] == "false"
    assert es["mlflow"] and es["mlflow_experiment"] == "evals"
    assert set(es["tags"]) == {"eval", "eval:qwen-arc"}  # what `rota eval results` reads
    assert set(fs["tags"]) == {"eval-fetch", "eval-fetch:qwen-arc"}
    human = daemon.cli("eval", "submit", str(f), "--hold", "--work-dir", str(work))
    assert re.fullmatch(r"submitted evaluation qwen-arc: job (\d+) fetches the model, job "
                        r"\d+ evaluates it after \1 \(held\)\npool local; work dir .+\n",
                        human.stdout), human.stdout


def test_a_local_folder_is_one_job_and_a_changed_config_is_marked_dirty(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    write(repo, "other\n", "README")
    _git(repo, "init", "-q")
    _git(repo, "add", "README")
    _git(repo, "commit", "-qm", "readme")
    f = write(repo, CONFIG.replace(MLFLOW_MODEL, "uri: /models/qwen"))  # untracked
    r = daemon.cli("eval", "submit", str(f), "--hold", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["fetch"] is None
    spec = daemon.client().job(got["evaluate"]["jobs"][0]["id"])["spec"]
    assert spec["after"] == [] and "ROTA_MODEL_DIR" not in spec["env"]
    assert spec["env"]["ROTA_EVAL_MODEL"] == "/models/qwen"
    assert spec["env"]["ROTA_EVAL_GIT_DIRTY"] == "true"
    work = Path(got["work_dir"])  # the default: ./.rota-eval/NAME-UTCTIME, made
    assert work.parent == tmp_path / ".rota-eval" and work.is_dir()
    assert re.fullmatch(r"qwen-arc-\d{8}T\d{6}", work.name) and spec["cwd"] == str(work)


def test_a_refused_evaluation_leaves_no_fetch_job_behind(daemon: DaemonProcess,
                                                         tmp_path: Path) -> None:
    f = write(tmp_path, CONFIG.replace("gpus: 1,", "gpus: 8,"))  # the machine has 4
    r = daemon.cli("eval", "submit", str(f))
    assert r.returncode == 2, r.stdout
    m = re.search(r"the model-fetch job (\d+) was cancelled", r.stderr)
    assert m and r.stderr.startswith("error: the evaluation job (eval-qwen-arc): needs 8 "), \
        r.stderr
    # a fetch job the loop had begun to start when it was cancelled ends cancelled once
    # its launch is undone
    wait_until(lambda: daemon.client().job(int(m[1]))["state"] == "cancelled",
               what="the fetch job to end cancelled")


def test_an_unknown_pool_is_named(daemon: DaemonProcess, tmp_path: Path) -> None:
    f = write(tmp_path, CONFIG)
    for cmd in ("submit", "render"):
        r = daemon.cli("eval", cmd, str(f), "--pool", "nope")
        assert r.returncode == 1
        assert "no pool 'nope'; the pools are: k8s, local" in r.stderr, r.stderr


# --- render --------------------------------------------------------------------------------
def k8s_manifests(daemon: DaemonProcess, f: Path) -> list[dict[str, Any]]:
    """`rota eval render FILE --pool k8s`, each manifest checked against its schema."""
    r = daemon.cli("eval", "render", str(f), "--pool", "k8s")
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    for doc in docs:
        validate(doc)
    return docs


def test_render_for_kubernetes_is_valid_manifests_and_submits_nothing(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    f = write(tmp_path, CONFIG)
    before = len(daemon.client().jobs(limit=1000))
    r = daemon.cli("eval", "render", str(f), "--pool", "k8s")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# the evaluation job eval-qwen-arc (not submitted: shown as "
                               "job 0), pool k8s (kubernetes)\n")
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    for doc in docs:
        validate(doc)
    files, job = docs
    assert files["kind"] == "ConfigMap" and list(files["data"].values()) == [CONFIG]
    assert job["kind"] == "Job" and job["spec"]["ttlSecondsAfterFinished"] > 0
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    [fetch] = pod["initContainers"]
    assert "runs:/0a1b2c/model" in fetch["command"]
    [main] = pod["containers"]
    assert main["command"] + main["args"] == ["python", "-m", "rota.eval.run", "--config",
                                              "/etc/rota/eval/config.yaml"]
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert mounts["/etc/rota/eval/config.yaml"]["readOnly"]
    assert {v["name"] for v in pod["volumes"]} >= {"scratch", "model", "files"}
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["affinity"]["nodeAffinity"]  # nodes with the GPU memory asked for
    # the config names no image: the pool's, which the run tags as rota.eval.image
    assert main["image"] == "python:3.11-slim"
    assert {"name": "ROTA_IMAGE", "value": "python:3.11-slim"} in main["env"]
    assert len(daemon.client().jobs(limit=1000)) == before
    shown = json.loads(daemon.cli("eval", "render", str(f), "--pool", "k8s", "--json").stdout)
    [only] = shown["jobs"]
    assert only["id"] is None and only["role"] == "evaluate" and only["engine"] == "kubernetes"


def test_render_for_kubernetes_mounts_the_harness_files_and_writes_in_scratch(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    """A task_dir on this machine: its files in the ConfigMap, each mounted read-only where
    the pod's config says; the runner's output in the scratch volume; valid manifests."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "tiny_mc.jsonl").write_text('{"question": "2 + 3 =", "answer": 0}\n')
    (tmp_path / "tasks" / "tiny_mc.yaml").write_text(
        f"task: tiny_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {tmp_path}/tasks/tiny_mc.jsonl\n")
    f = write(tmp_path, CONFIG.replace("tasks: [arc_easy]", "tasks: [tiny_mc], task_dir: tasks"))
    docs = k8s_manifests(daemon, f)
    files, job = docs
    pod = job["spec"]["template"]["spec"]
    [main] = pod["containers"]
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    texts = {mounts[p]["mountPath"]: files["data"][mounts[p]["subPath"]]
             for p in mounts if mounts[p]["name"] == "files"}
    d = "/etc/rota/eval/files/task_dir"
    assert set(texts) == {"/etc/rota/eval/config.yaml", f"{d}/tiny_mc.yaml",
                          f"{d}/tiny_mc.jsonl"}
    assert all(mounts[p]["readOnly"] for p in texts)
    assert yaml.safe_load(texts["/etc/rota/eval/config.yaml"])["harness"]["task_dir"] == d
    assert f"test: {d}/tiny_mc.jsonl" in texts[f"{d}/tiny_mc.yaml"]
    assert texts[f"{d}/tiny_mc.jsonl"] == (tmp_path / "tasks" / "tiny_mc.jsonl").read_text()
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["ROTA_EVAL_OUT"] == "/scratch/eval" and mounts["/scratch"]["name"] == "scratch"
    (tmp_path / "tasks" / "w.bin").write_bytes(b"\0\1")
    r = daemon.cli("eval", "render", str(f), "--pool", "k8s")
    assert r.returncode != 0 and f"harness.task_dir: {tmp_path}/tasks/w.bin is not a text " \
        "file" in r.stderr, r.stderr


def test_render_for_kubernetes_selects_nodes_of_the_gpu_type(daemon: DaemonProcess,
                                                             tmp_path: Path) -> None:
    f = write(tmp_path, CONFIG.replace("compute: {gpus: 1,", "compute: {gpus: 1, gpu_type: A100,"))
    docs = k8s_manifests(daemon, f)
    pod = docs[-1]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "A100"}  # the pool's label


def test_render_on_this_machine_shows_both_jobs(daemon: DaemonProcess,
                                                tmp_path: Path) -> None:
    f = write(tmp_path, CONFIG)
    r = daemon.cli("eval", "render", str(f), "--pool", "local", "--json")
    assert r.returncode == 0, r.stderr
    jobs = json.loads(r.stdout)["jobs"]
    assert [j["role"] for j in jobs] == ["fetch", "evaluate"]
    assert jobs[0]["text"].rstrip().endswith("-m rota.eval.run --fetch-only")
    assert not (tmp_path / ".rota-eval").exists()  # a render makes no folder


def test_the_render_endpoint_refuses_what_the_pool_cannot_take(daemon: DaemonProcess) -> None:
    """404 an unknown pool, 409 what the pool refuses, 422 a bad spec; the answer is a
    RenderAnswer with no id."""
    c = daemon.client()
    spec = {"command": ["python", "-c", "print(1)"], "gpus": 1}
    answer = c.render_spec(spec, "k8s")
    TypeAdapter(pydantic_type(RenderAnswer)).validate_python(answer, strict=True)
    assert answer["id"] is None and "kind: Job" in answer["text"]
    with pytest.raises(NotFound, match="no pool 'nope'"):
        c.render_spec(spec, "nope")
    with pytest.raises(Conflict, match=r"pool k8s: .*whole GPUs"):
        c.render_spec({**spec, "gpus": 0.5}, "k8s")
    with pytest.raises(InvalidSpec, match="gpus"):
        c.render_spec({**spec, "gpus": -1}, "k8s")


# --- results -------------------------------------------------------------------------------
METRICS = {"arc_easy/acc": 0.5, "arc_easy/acc_norm": 0.25, "hellaswag/acc": 0.75}


def _fake_run(c: Any, name: str, model: str, metrics: dict[str, float]) -> int:
    """A job shaped like an evaluation (its tags and environment) that prints its metrics
    as one JSON line, as rota.eval.run does."""
    line = json.dumps(metrics)
    spec = {"command": [sys.executable, "-c", f"print({line!r})"], "gpus": 0,
            "name": f"eval-{name}", "tags": ["eval", f"eval:{name}"],
            "env": {"ROTA_EVAL_NAME": name, "ROTA_EVAL_MODEL": model,
                    "ROTA_EVAL_HARNESS": "lm-eval"}}
    job = int(c.submit([spec])[0]["id"])
    assert c.wait(job, timeout=60)["state"] == "completed"
    return job


def test_results_show_each_runs_metrics_newest_first(daemon: DaemonProcess) -> None:
    c = daemon.client()
    old = _fake_run(c, "suite", "runs:/aaa/model", {"arc_easy/acc": 0.1})
    new = _fake_run(c, "suite", "/models/tiny", METRICS)
    wait_until(lambda: c.eval_results(name="suite")["runs"][0]["metrics"] == METRICS,
               what="the metrics stored")
    got = c.eval_results(name="suite")
    TypeAdapter(pydantic_type(EvalResultsAnswer)).validate_python(got, strict=True)
    assert [r["id"] for r in got["runs"]] == [new, old]
    run = got["runs"][0]
    assert (run["name"], run["model"], run["harness"], run["state"]) == \
        ("suite", "/models/tiny", "lm-eval", "completed")
    r = daemon.cli("eval", "results", "--task", "arc_easy", "--model", "/models/tiny", "--json")
    assert r.returncode == 0, r.stderr
    [only] = json.loads(r.stdout)["runs"]
    assert only["id"] == new and only["metrics"] == {"arc_easy/acc": 0.5,
                                                     "arc_easy/acc_norm": 0.25}
    none = json.loads(daemon.cli("eval", "results", "--task", "mmlu", "--json").stdout)
    assert none["runs"] == []
    with Client(daemon.socket) as sdk:  # the SDK's typed runs
        [typed] = sdk.eval_results(name="suite", task="hellaswag")
    assert typed.id == new and typed.metrics == {"hellaswag/acc": 0.75}


def test_results_fit_80_columns_as_a_row_per_run_or_a_row_per_metric(
        daemon: DaemonProcess) -> None:
    c = daemon.client()
    _fake_run(c, "wide", "/models/tiny", METRICS)
    wait_until(lambda: c.eval_results(name="wide")["runs"][0]["metrics"], what="metrics")

    def shown(*args: str) -> list[str]:
        r = subprocess.run([sys.executable, "-m", "rota", "eval", "results", "--name", "wide",
                            *args], env={**daemon.env, "COLUMNS": "80"}, capture_output=True,
                           text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert all(len(line) <= 80 for line in lines), r.stdout
        return lines

    few = shown("--task", "arc_easy")  # two metrics: a column each, named without arc_easy/
    assert few[0].split()[-2:] == ["acc", "acc_norm"] and few[2].split()[-2:] == ["0.5", "0.25"]
    many = shown()  # three long names: too wide for columns, so a row each
    assert many[0].split() == ["job", "run", "metric", "value"]
    rows = {line.split()[-2]: line.split()[-1] for line in many[2:] if len(line.split()) >= 2}
    assert rows["hellaswag/acc"] == "0.75" and rows["arc_easy/acc"] == "0.5"


# --- a newcomer's machine: no MLflow, no Kubernetes client ----------------------------------
#: lm-eval as it behaves: its console (settings and a results table, which are no results)
#: and its results file
FAKE_LM_EVAL = """\
import json, os, sys
a = sys.argv
print("hf (pretrained=m), gen_kwargs: (None), limit: 2.0, num_fewshot: None, batch_size: 8")
print("|tiny_mc|1|none|0|acc|0.75|\u00b1 |0.25|")
out = os.path.join(a[a.index("--output_path") + 1], "m")
os.makedirs(out)
with open(os.path.join(out, "results_2026-01-01T00-00-00.json"), "w") as f:
    json.dump({"results": {"tiny_mc": {"acc,none": 0.75, "acc_stderr,none": 0.25}}}, f)
"""


def test_without_mlflow_or_the_kubernetes_client_a_local_evaluation_runs(
        tmp_path: Path) -> None:
    """A Kubernetes pool declared, the kubernetes and mlflow packages missing where the
    daemon runs: the pool is shown unhealthy with the sentence that fixes it, and an
    evaluation without tracking (its model ./tiny-llama beside the config, submitted from
    another folder) renders, runs on this machine with no MLflow run, and its results
    reach `rota eval results` (pool local) and the job."""
    fakes = tmp_path / "fakes" / "lm_eval"
    fakes.mkdir(parents=True)
    (fakes / "__init__.py").write_text("")
    (fakes / "__main__.py").write_text(FAKE_LM_EVAL)
    env = without_modules(tmp_path / "missing", "kubernetes", "mlflow")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "fakes"), env["PYTHONPATH"]])
    home, configs, elsewhere = tmp_path / "home", tmp_path / "configs", tmp_path / "elsewhere"
    for folder in (home, configs / "tiny-llama", elsewhere):
        folder.mkdir(parents=True)
    (configs / "tiny-llama" / "config.json").write_text("{}")
    f = write(configs, NEWCOMER.replace("      task_dir: tasks\n", "") + "compute: {gpus: 0}\n")
    with running_daemon(home, TOML.format(home=home), env) as d:
        r = d.cli("pools", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        k8s = next(p for p in json.loads(r.stdout)["pools"] if p["name"] == "k8s")
        assert not k8s["health"]["reachable"]
        assert "pip install 'rota[kubernetes]'" in k8s["health"]["message"]
        assert d.cli("pools").returncode == 0

        r = d.cli("eval", "render", str(f), "--pool", "local", cwd=elsewhere)
        assert r.returncode == 0 and f"ROTA_EVAL_CONFIG_DIR={configs}" in r.stdout, r.stderr
        r = d.cli("eval", "submit", str(f), "--json", cwd=elsewhere)
        assert r.returncode == 0, r.stderr
        job_id = json.loads(r.stdout)["evaluate"]["jobs"][0]["id"]
        done = finished(d, job_id, timeout=120)
        assert "tracking" not in done and done["spec"]["mlflow"] is False
        results = json.loads(d.cli("eval", "results", "--json").stdout)
        [run] = results["runs"]
        assert (run["pool"], run["model"]) == ("local", f"{configs}/tiny-llama")
        assert run["metrics"] == {"tiny_mc/acc": 0.75, "tiny_mc/acc_stderr": 0.25}
        with d.client() as c:
            shown = set(c.request("GET", f"/v1/jobs/{job_id}/metrics")["series"])
        # the harness's console (limit, batch_size, its table) is no metric: log_metrics json
        assert shown == {"tiny_mc/acc", "tiny_mc/acc_stderr"}


def test_a_local_model_folder_is_refused_for_a_kubernetes_pool(daemon: DaemonProcess,
                                                                tmp_path: Path) -> None:
    """A pod cannot read this machine's folders: validate (the pool read from this home's
    rota.toml), render and submit refuse it by its field; nothing is submitted."""
    (tmp_path / "tiny-llama").mkdir()
    f = write(tmp_path, CONFIG.replace(MLFLOW_MODEL, "uri: ./tiny-llama")
              .replace("time_limit: 2h}", "time_limit: 2h, pool: k8s}"))
    why = "model.uri: ./tiny-llama is a folder on this machine, which a Kubernetes pod " \
          "cannot read"
    r = daemon.cli("eval", "validate", str(f))
    assert r.returncode == 2 and r.stderr.startswith(f"{f}:4: {why}"), r.stderr
    before = len(daemon.client().jobs(limit=1000))
    for args in (["submit", str(f)], ["render", str(f), "--pool", "k8s"]):
        r = daemon.cli("eval", *args)
        assert r.returncode == 2 and why in r.stderr, r.stderr
    assert len(daemon.client().jobs(limit=1000)) == before
    assert daemon.cli("eval", "submit", str(f), "--pool", "local", "--hold").returncode == 0
