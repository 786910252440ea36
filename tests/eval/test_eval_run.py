"""python -m rota.eval.run with stand-in harness programs (fast, no torch): failure is
failure, results are reported once, the model is fetched once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from eval_testing import HELM_GROUPS, config_text, fake_program, require, run_eval

from rota.eval.config import load_text

NO_RESULTS = "sys.exit(0)  # ran, wrote nothing\n"
CRASH = "raise RuntimeError('CUDA out of memory (stand-in)')\n"


def fake_lm_eval(where: Path, body: str) -> dict[str, str]:
    """An ``lm_eval`` package that shadows the real one for ``python -m lm_eval``."""
    pkg = where / "fakes" / "lm_eval"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys\n" + body)
    kept = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join([str(where / "fakes"), *kept])}  # this Rota too


def fake_helm(where: Path, groups: Path | None) -> dict[str, str]:
    """helm-run that writes nothing and helm-summarize that copies GROUPS (when given) into
    OUT/runs/<suite>/groups, as the real one writes it."""
    bin_dir = where / "bin"
    fake_program(bin_dir, "helm-run", "print('helm-run', sys.argv[1:])\n")
    fake_program(bin_dir, "helm-summarize", f"""
        a = sys.argv
        suite, out = a[a.index('--suite') + 1], a[a.index('--output-path') + 1]
        if {str(groups)!r} != 'None':
            shutil.copytree({str(groups)!r}, os.path.join(out, 'runs', suite, 'groups'))
        """)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def write_config(tmp_path: Path, **parts: object) -> Path:
    path = tmp_path / "eval.yaml"
    path.write_text(config_text(**parts))
    return path


def test_a_harness_that_exits_0_without_results_fails(tmp_path: Path, model: Path) -> None:
    cfg = write_config(tmp_path, model={"uri": str(model)})
    stale = tmp_path / "eval-output" / "raw" / "old" / "results_2026-01-01.json"
    stale.parent.mkdir(parents=True)  # an earlier attempt's results must not count
    shutil.copy(next(Path(__file__).parent.glob("data/lm_eval/*/results_*.json")), stale)
    ran = run_eval(tmp_path, "--config", str(cfg), env=fake_lm_eval(tmp_path, NO_RESULTS))
    assert ran.code == 1
    assert "lm-eval wrote no results file" in ran.failure
    assert not any(s.startswith("{") for s in ran.stdout.splitlines())  # no metrics line
    assert not (tmp_path / "eval-output" / "rota-eval.json").exists()


def test_a_harness_that_fails_fails_with_its_reason(tmp_path: Path, model: Path) -> None:
    cfg = write_config(tmp_path, model={"uri": str(model)})
    ran = run_eval(tmp_path, "--config", str(cfg), env=fake_lm_eval(tmp_path, CRASH))
    assert ran.code == 1
    assert ran.failure == ("rota-eval: FAILED: lm_eval exited with status 1: RuntimeError: "
                           "CUDA out of memory (stand-in)")
    assert "Traceback" in ran.stdout  # the harness's own output is in the job's log


def test_helm_summary_tables_become_the_job_metrics(tmp_path: Path, model: Path) -> None:
    cfg = write_config(tmp_path, model={"uri": str(model)},
                       harness={"kind": "helm", "tasks": ["mmlu:subject=philosophy"]})
    ran = run_eval(tmp_path, "--config", str(cfg), "--out", str(tmp_path / "o"),
                   env=fake_helm(tmp_path, HELM_GROUPS))
    assert ran.code == 0, ran.stderr[-3000:]
    assert ran.metrics["subject_philosophy/em"] == pytest.approx(1 / 9)
    assert "helm-run ['--run-entries', 'mmlu:subject=philosophy,model=huggingface/" \
           "tiny-model'" in ran.stdout  # streamed into the log
    assert "results not sent to MLflow" in ran.stdout  # no server named anywhere
    record = json.loads((tmp_path / "o" / "rota-eval.json").read_text())
    assert record["metrics"] == ran.metrics
    assert (record["config"], record["harness"], record["tasks"]) == \
        ("tiny-eval", "helm", ["mmlu:subject=philosophy"])
    assert record["model"] == str(model) and record["started"] <= record["ended"]


def test_empty_helm_tables_are_no_metrics_and_a_failure(tmp_path: Path, model: Path) -> None:
    empty = tmp_path / "empty-groups"
    empty.mkdir()
    for path in HELM_GROUPS.glob("*.json"):
        tables = json.loads(path.read_text())
        for table in tables:
            table["rows"] = []
        (empty / path.name).write_text(json.dumps(tables))
    cfg = write_config(tmp_path, model={"uri": str(model)},
                       harness={"kind": "helm", "tasks": ["mmlu:subject=philosophy"]})
    ran = run_eval(tmp_path, "--config", str(cfg), env=fake_helm(tmp_path, empty))
    assert ran.code == 1 and "helm produced no metrics" in ran.failure
    nothing = run_eval(tmp_path, "--config", str(cfg), env=fake_helm(tmp_path / "b", None))
    assert nothing.code == 1 and "HELM wrote no summary tables" in nothing.failure


def test_a_harness_that_is_not_installed_says_so(tmp_path: Path, model: Path) -> None:
    if shutil.which("helm-run"):
        pytest.skip("crfm-helm is installed here")
    cfg = write_config(tmp_path, model={"uri": str(model)},
                       harness={"kind": "helm", "tasks": ["boolq"]})
    ran = run_eval(tmp_path, "--config", str(cfg))
    assert ran.code == 1 and "cannot run helm-run" in ran.failure
    assert "is helm-run installed here?" in ran.failure


def test_a_bad_or_missing_config_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(config_text(harness={"kind": "lm-eval", "tasks": []}))
    ran = run_eval(tmp_path, "--config", str(bad))
    assert ran.code == 2 and "harness: name at least one task" in ran.failure
    none = run_eval(tmp_path)
    assert none.code == 2 and "set ROTA_EVAL_CONFIG" in none.failure
    gone = run_eval(tmp_path, env={"ROTA_EVAL_CONFIG": config_text()})
    assert gone.code == 1 and "no folder /models/none" in gone.failure


def test_fetch_only_fetches_once_into_the_model_folder(tmp_path: Path, model: Path) -> None:
    mlflow = require("mlflow")
    (model / "weights.bin").write_bytes(b"\0" * 1024)
    uri = f"sqlite:///{tmp_path / 'models.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("models", artifact_location=str(tmp_path / "artifacts"))
    run_id = client.create_run(exp).info.run_id
    client.log_artifacts(run_id, str(model), "model")
    text = config_text(model={"mlflow": {"tracking_uri": uri, "run_id": run_id,
                                         "artifact_path": "model"}})
    env = {"ROTA_EVAL_CONFIG": text, "ROTA_MODEL_DIR": str(tmp_path / "shared" / "model")}
    ran = run_eval(tmp_path, "--fetch-only", env=env)
    assert ran.code == 0, ran.stderr[-3000:]
    fetched = tmp_path / "shared" / "model" / "model"  # an artifact folder keeps its name
    assert (fetched / "weights.bin").read_bytes() == b"\0" * 1024
    assert f"model ready: {fetched}" in ran.stdout
    assert not list((tmp_path / "shared").glob(".*part*"))  # no half-fetched leftovers
    shutil.rmtree(tmp_path / "artifacts")  # a second fetch would fail now: none happens
    again = run_eval(tmp_path, "--fetch-only", env=env)
    assert again.code == 0 and "fetching" not in again.stdout, again.stderr[-3000:]


def test_a_model_that_cannot_be_fetched_fails(tmp_path: Path) -> None:
    require("mlflow")
    uri = f"sqlite:///{tmp_path / 'models.db'}"
    text = config_text(model={"mlflow": {"tracking_uri": uri, "run_id": "0123abcd",
                                         "artifact_path": "model"}})
    ran = run_eval(tmp_path, "--fetch-only", env={"ROTA_EVAL_CONFIG": text})
    assert ran.code == 1
    assert "cannot fetch runs:/0123abcd/model from MLflow" in ran.failure
    assert "trying again" not in ran.stdout  # a run that does not exist stays missing
    assert not (tmp_path / "eval-output" / "model").exists()


def test_only_a_fetch_that_can_change_is_tried_again() -> None:
    """A network error or a server's passing trouble is tried twice more, after waits; a
    missing run fails at once; the fetch job has no retries of its own (each waited)."""
    from rota.eval.fetch import RETRY_WAITS_S, FetchUnavailable, tried
    from rota.eval.harnesses.base import EvalFailed

    def failing(errors: list[EvalFailed]):  # type: ignore[no-untyped-def]
        def fetch() -> None:
            calls.append(1)
            if errors:
                raise errors.pop(0)
        return fetch

    calls: list[int] = []
    waits: list[float] = []
    tried(failing([FetchUnavailable("down"), FetchUnavailable("down")]), sleep=waits.append)
    assert (len(calls), waits) == (3, list(RETRY_WAITS_S))
    calls, waits = [], []
    with pytest.raises(FetchUnavailable):
        tried(failing([FetchUnavailable("down")] * 3), sleep=waits.append)
    assert len(calls) == 3
    calls, waits = [], []
    with pytest.raises(EvalFailed, match="not found"):
        tried(failing([EvalFailed("Run with id=0a1b2c not found")]), sleep=waits.append)
    assert (len(calls), waits) == (1, [])
    assert "retries" not in jobs_fetch_spec()


def jobs_fetch_spec() -> dict[str, object]:
    from rota.eval.jobs import Source, eval_jobs

    text = config_text(model={"uri": "runs:/0a1b2c/model"})
    got = eval_jobs(load_text(text), Source(text), pool_engine="local", python="python",
                    work_dir="/w").fetch
    assert got is not None
    return got


def test_an_unreachable_mlflow_server_is_tried_again(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    require("mlflow")
    from rota.eval import fetch
    from rota.eval.config import load_text as load

    monkeypatch.setattr(fetch, "RETRY_WAITS_S", (0.0,))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    cfg = load(config_text(model={"mlflow": {"tracking_uri": "http://127.0.0.1:9",
                                             "run_id": "0a1b2c", "artifact_path": "model"}}))
    with pytest.raises(fetch.FetchUnavailable, match="cannot fetch runs:/0a1b2c/model"):
        fetch.resolve(cfg, tmp_path, {})


def test_params_are_the_config_flattened_and_tags_name_the_files_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not shutil.which("git"):
        pytest.skip("no git here")
    from rota.eval.config import load_text
    from rota.eval.run import flat_params, run_tags

    for name in ("ROTA_EVAL_GIT_COMMIT", "ROTA_EVAL_GIT_DIRTY", "ROTA_JOB_ID", "ROTA_POOL",
                 "ROTA_IMAGE"):
        monkeypatch.delenv(name, raising=False)
    path = write_config(tmp_path, compute={"pool": "gpu-a", "image": "ghcr.io/x/eval:1"})
    cfg = load_text(path.read_text())
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "eval.yaml"], ["commit", "-qm", "c"]):
        subprocess.run([*git, *args], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    tags = run_tags(cfg, str(path))
    assert (tags["rota.eval.git_commit"], tags["rota.eval.git_dirty"]) == (head, "false")
    assert (tags["creator"], tags["datasets"], tags["rota.eval.pool"]) == ("ana", "tiny", "gpu-a")
    assert tags["rota.eval.image"] == "ghcr.io/x/eval:1" and "rota.job_id" not in tags
    monkeypatch.setenv("ROTA_IMAGE", "ghcr.io/x/pool-default:2")  # the image it ran in
    assert run_tags(cfg, str(path))["rota.eval.image"] == "ghcr.io/x/pool-default:2"
    monkeypatch.delenv("ROTA_IMAGE")
    path.write_text(path.read_text() + "# changed\n")
    assert run_tags(cfg, str(path))["rota.eval.git_dirty"] == "true"
    monkeypatch.setenv("ROTA_EVAL_GIT_COMMIT", "e" * 40)  # the CLI's word, for a config in env
    assert run_tags(cfg, None)["rota.eval.git_commit"] == "e" * 40
    params = flat_params(cfg)
    assert params["harness.limits.batch_size"] == "8" and params["harness.tasks"] == "tiny_mc"
    assert params["tracking.tags.datasets"] == "tiny" and params["compute.pool"] == "gpu-a"


def test_tracking_wandb_logs_the_metrics_to_a_wandb_run(tmp_path: Path, model: Path) -> None:
    """W&B in offline mode (its own format on disk, nothing sent): the run's records hold
    every metric and the config's fields."""
    require("wandb")
    text = config_text(model={"uri": str(model)},
                       harness={"kind": "helm", "tasks": ["mmlu:subject=philosophy"]})
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(text.replace("  experiment: evals\n",
                                "  experiment: evals\n  wandb: true\n  wandb_project: p\n"))
    env = {**fake_helm(tmp_path, HELM_GROUPS), "WANDB_MODE": "offline",
           "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}
    ran = run_eval(tmp_path, "--config", str(cfg), "--out", str(tmp_path / "o"), env=env)
    assert ran.code == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    [run_dir] = (tmp_path / "wandb").glob("offline-run-*")
    [records] = run_dir.glob("run-*.wandb")  # W&B's own record file (protobuf)
    data = records.read_bytes()
    for metric in ran.metrics:  # every metric logged, and the config's fields
        assert metric.encode() in data, metric
    assert b"harness.tasks" in data and b"mmlu:subject=philosophy" in data


LM_EVAL_WRITES = """\
import json, os
a = sys.argv
print("hf (pretrained=m), gen_kwargs: (None), limit: 2.0, num_fewshot: None, batch_size: 8")
out = os.path.join(a[a.index("--output_path") + 1], "m")
os.makedirs(out)
with open(os.path.join(out, "results_2026-01-01T00-00-00.json"), "w") as f:
    json.dump({"results": {"tiny_mc": {"acc,none": 0.75, "acc_stderr,none": 0.25}}}, f)
"""


def test_tracking_run_name_names_rotas_run(tmp_path: Path, model: Path) -> None:
    """Rota names the job's run after the job (eval-NAME); the config's run_name wins."""
    mlflow = require("mlflow")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=store)
    exp = client.create_experiment("evals", artifact_location=str(tmp_path / "artifacts"))
    rota_run = client.create_run(exp, run_name="eval-tiny-eval").info.run_id  # the daemon's
    text = config_text(model={"uri": str(model)}, tracking={
        "experiment": "evals", "run_name": "tiny-nightly", "tags": {"creator": "ana"}})
    env = {**fake_lm_eval(tmp_path, LM_EVAL_WRITES), "ROTA_EVAL_CONFIG": text,
           "MLFLOW_RUN_ID": rota_run, "MLFLOW_TRACKING_URI": store}
    ran = run_eval(tmp_path, env=env)
    assert ran.code == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    run = client.get_run(rota_run)
    assert run.info.run_name == "tiny-nightly"
    assert run.data.metrics == {"tiny_mc/acc": 0.75, "tiny_mc/acc_stderr": 0.25}
