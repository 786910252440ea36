"""The program an evaluation job runs: fetch the model, run the harness, fail when it must,
report the metrics.

    python -m rota.eval.run [--config PATH] [--out DIR] [--fetch-only]

The config is the file at ``--config``, else the YAML in ``ROTA_EVAL_CONFIG``. The model and
adapter are fetched as rota.eval.fetch says (``--fetch-only`` stops there: a CPU job before
the GPU one). The harness's programs run one after the other, their output streamed to
this program's stdout (the job's log), into ``OUT/raw`` (emptied first: an earlier
attempt's results never count). OUT is ``--out``, else ``ROTA_EVAL_OUT``, else
``./eval-output``.

Failure is failure: a harness that exits non-zero, a task with no results, a missing or
empty results file, or no metrics at all ends this program with status 1 and one line,
``rota-eval: FAILED: <why>``, on stderr (rota.job.fail_reason: Rota records the reason with
the job's end, ``rota why``). Nothing is reported as a success without metrics.

On success: one JSON line of every metric on stdout (Rota records it as the job's metrics),
``OUT/rota-eval.json`` (config name, model, harness, tasks, metrics, started, ended), then
the trackers. MLflow: Rota's own run of the job when ``MLFLOW_RUN_ID`` is set (Rota opened
it and closes it), else a new run in ``tracking.experiment`` at the model's MLflow server
or ``MLFLOW_TRACKING_URI``; params are the config's fields flattened
(``harness.limits.batch_size``); tags are ``tracking.tags`` and ``rota.eval.*``: the config
file's git commit and dirty flag (from ``ROTA_EVAL_GIT_COMMIT``/``ROTA_EVAL_GIT_DIRTY`` when
set, else git), image (``ROTA_IMAGE``: the job's or the pool's default, which the daemon
sets for a job in an image; else ``compute.image``), GPU type (NVML; ``cpu`` without a
GPU), pool (``ROTA_POOL``) and
``rota.job_id`` (``ROTA_JOB_ID``); artifacts under ``eval/``: the config, the harness's raw
output, rota-eval.json and the job's log (``ROTA_LOG_PATH``, when readable). W&B when
``tracking.wandb`` (skipped, with a line, where wandb is not installed).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rota import job
from rota.errors import InvalidSpec, RotaError
from rota.eval import fetch, harnesses
from rota.eval.config import EvalConfig, Tracking, load_text
from rota.eval.harnesses.base import EvalFailed, Metrics, Target
from rota.eval.jobs import CONFIG_DIR_ENV, CONFIG_ENV, OUT_ENV
from rota.eval.paths import resolve
from rota.ml import mlflow_bridge
from rota.ml.gitinfo import git_info
from rota.ml.mlflow_bridge import MAX_PARAM, MAX_TAG, metric_key

RESULTS = "rota-eval.json"
_TAIL_BYTES = 64 * 1024
_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rota.eval.run",
                                description="Run one evaluation config (see rota.eval).")
    p.add_argument("--config", default="", help=f"the config file (default: ${CONFIG_ENV})")
    p.add_argument("--out", default="", help=f"output folder (default: ${OUT_ENV} or "
                                              "./eval-output)")
    p.add_argument("--fetch-only", action="store_true", help="only fetch the model")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg, text, where = load_config(args.config)
        out = Path(args.out or os.environ.get(OUT_ENV) or "eval-output").absolute()
        fetched = fetch.resolve(cfg, out, os.environ)
        if args.fetch_only:
            print(f"rota-eval: model ready: {fetched.model}"
                  + (f" (adapter {fetched.adapter})" if fetched.adapter else ""), flush=True)
            return 0
        record = evaluate(cfg, fetched, out)
        print(json.dumps(record["metrics"]), flush=True)
        results = out / RESULTS
        results.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        report(cfg, record, text=text, where=where, out=out)
    except (RotaError, OSError) as e:  # OSError: an output folder that cannot be written
        job.fail_reason(str(e), program="eval")  # the job's end names it (rota why)
        return 2 if isinstance(e, InvalidSpec) else 1
    return 0


def load_config(path: str) -> tuple[EvalConfig, str, str | None]:
    """The config (its relative paths read from its folder: the file's, else
    ``ROTA_EVAL_CONFIG_DIR``), its text as written, and its file (None when it came from
    the env)."""
    if not path:
        text = os.environ.get(CONFIG_ENV, "")
        if not text.strip():
            raise InvalidSpec(f"no config: give --config PATH or set {CONFIG_ENV}")
        return resolve(load_text(text, where=CONFIG_ENV), os.environ.get(CONFIG_DIR_ENV)), \
            text, None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidSpec(f"{path}: cannot read it: {e}") from None
    return resolve(load_text(text, where=path), os.path.dirname(os.path.abspath(path))), \
        text, path


def evaluate(cfg: EvalConfig, fetched: fetch.Fetched, out: Path) -> dict[str, Any]:
    """Run the harness's steps and read its metrics; raises EvalFailed."""
    harness = harnesses.get(cfg.harness.kind)
    raw = out / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    started = _now()
    for argv in harness.steps(cfg, Target(fetched.model, fetched.adapter, raw)):
        run_step(argv)
    metrics: Metrics = harness.parse(cfg, raw)
    if not metrics:
        raise EvalFailed(f"{cfg.harness.kind} produced no metrics (its output is in {raw})")
    return {"config": cfg.name, "model": cfg.model.display,
            "adapter": cfg.model.adapter.display if cfg.model.adapter else None,
            "harness": cfg.harness.kind, "tasks": list(cfg.harness.tasks),
            "metrics": metrics, "started": started, "ended": _now(), "raw": str(raw)}


def run_step(argv: list[str]) -> None:
    """Run one program, its output streamed to ours; raises EvalFailed unless it exits 0."""
    head = argv[:4]  # python [-u] -m MODULE: name the module
    name = argv[head.index("-m") + 1] if "-m" in head[:-1] else os.path.basename(argv[0])
    print(f"rota-eval: running {shlex.join(argv)}", flush=True)
    # the runner reports the results to the job's MLflow run: a harness must not (heldout
    # would log unprefixed metrics into it)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_RUN_ID"}
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)
    except OSError as e:
        raise EvalFailed(f"cannot run {argv[0]}: {e.strerror or e} (is {name} installed "
                         "here?)") from None
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        tail = _stream(proc)
        code = proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code != 0:
        raise EvalFailed(f"{name} exited with status {code}: {reason(tail)}")


def _stream(proc: subprocess.Popen[bytes]) -> bytes:
    """Copy the child's output to our stdout as it comes; return its last 64 KiB."""
    pipe = proc.stdout
    assert isinstance(pipe, io.BufferedReader)
    tail: deque[bytes] = deque()
    size = 0
    sys.stdout.flush()
    for chunk in iter(lambda: pipe.read1(65536), b""):  # what is there, without waiting
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        tail.append(chunk)
        size += len(chunk)
        while size - len(tail[0]) >= _TAIL_BYTES:
            size -= len(tail.popleft())
    return b"".join(tail)


def reason(tail: bytes) -> str:
    """The line of a failed program's output that says why: its last exception line
    (``ValueError: Tasks not found: x``), else its last line."""
    lines = [s.strip() for s in re.split(r"[\r\n]+", tail.decode(errors="replace"))]
    lines = [s for s in lines if s]
    for line in reversed(lines):
        m = _ERROR_LINE.match(line)
        if m:
            return m.group(1)[:1000]
    return lines[-1][:1000] if lines else "it printed nothing"


# --- trackers ---------------------------------------------------------------------------

def report(cfg: EvalConfig, record: dict[str, Any], *, text: str, where: str | None,
           out: Path) -> None:
    """The results to MLflow and, when asked, W&B; raises EvalFailed when one refuses.
    Without ``tracking`` neither: the JSON line is the job's metrics."""
    if cfg.tracking is None:
        print("rota-eval: no tracking in the config: the results are the job's metrics "
              f"(rota eval results) and {out / RESULTS}", flush=True)
        return
    params = flat_params(cfg)
    to_mlflow(cfg, record, params=params, tags=run_tags(cfg, where), text=text, out=out)
    if cfg.tracking.wandb:
        to_wandb(cfg, record["metrics"], params)


def flat_params(cfg: EvalConfig) -> dict[str, str]:
    """The config's fields as ``harness.limits.batch_size`` -> ``"8"`` (lists joined by
    commas), what runs are compared by."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list):
            flat[prefix] = ",".join(map(str, value))
        elif value is not None:
            flat[prefix] = str(value)

    walk("", cfg.model_dump(mode="json", exclude_none=True))
    return {metric_key(k): v[:MAX_PARAM] for k, v in flat.items()}


def run_tags(cfg: EvalConfig, where: str | None) -> dict[str, str]:
    t = cfg.tracking or Tracking()
    tags = {metric_key(k): (",".join(map(str, v)) if isinstance(v, list) else str(v))[:MAX_TAG]
            for k, v in t.tags.model_dump(mode="json", exclude_none=True).items()}
    commit, dirty = config_git(where)
    found = {"rota.eval.name": cfg.name, "rota.eval.model": cfg.model.display,
             "rota.eval.harness": cfg.harness.kind, "rota.eval.gpu_type": gpu_type(),
             "rota.eval.git_commit": commit, "rota.eval.git_dirty": dirty,
             "rota.eval.image": os.environ.get("ROTA_IMAGE") or cfg.compute.image,
             "rota.eval.pool": os.environ.get("ROTA_POOL") or cfg.compute.pool,
             "rota.job_id": os.environ.get("ROTA_JOB_ID"),
             "mlflow.note.content": t.description}
    tags.update({k: v[:MAX_TAG] for k, v in found.items() if v})
    return tags


def config_git(where: str | None) -> tuple[str | None, str | None]:
    """The config file's git commit and dirty flag: as the CLI passed them (a config in the
    environment), else read from the file's repository."""
    commit = os.environ.get("ROTA_EVAL_GIT_COMMIT")
    if commit or where is None:
        return commit, os.environ.get("ROTA_EVAL_GIT_DIRTY")
    info = git_info(os.path.dirname(os.path.abspath(where)))
    if info is None:
        return None, None
    return info.commit, "true" if info.dirty else "false"


def gpu_type() -> str:
    """The name of the first GPU this job sees (NVML), or ``cpu``."""
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception:  # no driver, no library: no GPU here
        return "cpu"
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        if visible in ("", "-1") or nv.nvmlDeviceGetCount() == 0:
            return "cpu"
        index = int(visible) if visible.isdigit() else 0
        name = nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(index))
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return "cpu"
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()


def to_mlflow(cfg: EvalConfig, record: dict[str, Any], *, params: dict[str, str],
              tags: dict[str, str], text: str, out: Path) -> None:
    rota_run = os.environ.get("MLFLOW_RUN_ID")
    uri = os.environ.get("MLFLOW_TRACKING_URI") if rota_run else \
        (cfg.model.mlflow.tracking_uri if cfg.model.mlflow else None) \
        or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        print("rota-eval: no MLflow server (MLFLOW_TRACKING_URI, model.mlflow.tracking_uri):"
              " results not sent to MLflow", flush=True)
        return
    if not mlflow_bridge.available():
        if rota_run:  # the daemon mirrors the JSON line's metrics into its run
            print("rota-eval: mlflow is not installed here: Rota's run gets the metrics "
                  "only", flush=True)
            return
        raise EvalFailed("MLflow tracking needs mlflow here: pip install 'rota[trackers]'")
    try:
        run_id = _mlflow_log(cfg, record, uri, rota_run, params, tags, text, out)
    except Exception as e:  # TrackerError, MlflowException, an unreachable server
        raise EvalFailed(f"the results are in {out / RESULTS} but MLflow ({uri}) refused "
                         f"them: {type(e).__name__}: {e}") from None
    print(f"rota-eval: results logged to MLflow run {run_id}", flush=True)


def _mlflow_log(cfg: EvalConfig, record: dict[str, Any], uri: str, rota_run: str | None,
                params: dict[str, str], tags: dict[str, str], text: str, out: Path) -> str:
    from mlflow.entities import Param, RunTag

    t = cfg.tracking or Tracking()
    bridge = mlflow_bridge.MlflowBridge(uri)
    client = bridge.client
    run_id = rota_run or client.create_run(
        bridge.experiment(t.experiment), run_name=t.run_name or cfg.name,
        start_time=_ms(record["started"])).info.run_id
    if rota_run and t.run_name:  # Rota named its run after the job: the config's name wins
        tags = {**tags, "mlflow.runName": t.run_name}
    items = [Param(k, v) for k, v in params.items()]
    for i in range(0, len(items), 100):  # MLflow takes at most 100 params a call
        client.log_batch(run_id, params=items[i:i + 100])
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    bridge.log_metrics(run_id, [{"name": k, "value": v, "ts": _ms(record["ended"]) / 1000,
                                 "step": 0} for k, v in record["metrics"].items()])
    client.log_text(run_id, text, "eval/config.yaml")
    client.log_artifacts(run_id, record["raw"], "eval/raw")
    client.log_artifact(run_id, str(out / RESULTS), "eval")
    log = os.environ.get("ROTA_LOG_PATH")
    if log and os.access(log, os.R_OK):
        client.log_artifact(run_id, log, "eval")
    if not rota_run:  # ours to close; Rota closes its own
        client.set_terminated(run_id, "FINISHED", end_time=_ms(record["ended"]))
    return str(run_id)


def to_wandb(cfg: EvalConfig, metrics: Metrics, params: dict[str, str]) -> None:
    try:
        import wandb
    except ImportError:
        print("rota-eval: tracking.wandb is set but wandb is not installed here: W&B "
              "skipped", flush=True)
        return
    t = cfg.tracking or Tracking()
    try:  # WANDB_RUN_ID/WANDB_PROJECT from Rota (a --wandb job) take precedence
        run = wandb.init(project=os.environ.get("WANDB_PROJECT") or t.wandb_project
                         or t.experiment, name=os.environ.get("WANDB_NAME") or t.run_name
                         or cfg.name, config=params, job_type="eval")
        run.log(metrics)
        run.summary.update(metrics)
        run.finish()
    except Exception as e:
        raise EvalFailed(f"W&B refused the results: {type(e).__name__}: {e}") from None


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


if __name__ == "__main__":
    sys.exit(main())
