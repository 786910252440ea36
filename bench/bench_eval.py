"""What Rota adds to an evaluation harness run, beside running the harness by hand.

    python bench/bench_eval.py [--samples 5] [--json FILE]

The harness is lm-evaluation-harness's command line (``python -m lm_eval run ...``) played
by a stand-in that does no evaluating: it copies a real lm-eval results file (tests/eval/
data) where lm-eval writes it, so what is measured is what each path adds around the
harness, not the model's forward passes. Paths, taking turns, ``--samples`` times each:

(a) by hand: the stand-in with the argv rota.eval.run gives it;
(b) the runner alone: ``python -m rota.eval.run --config FILE`` (fetch skipped: a local
    folder; no MLflow server named, so no MLflow run);
(c) ``rota eval submit FILE`` on a running daemon (this machine's pool, no GPU), from the
    call to the job's end as the daemon records it (ended_at); the evaluation job asks for
    an MLflow run (rota.eval.jobs), which the daemon makes in its SQLite store;
(d) ``rota submit --template eval-lm-harness`` the same way.

Overhead = the path's seconds - (a)'s, as the median and the worst of the samples.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "src"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from bench.bench_cli import ROTA, _wait_all_ended, cli_env, loadavg, start_daemon  # noqa: E402
from rota.client import RawClient  # noqa: E402

#: per path: (call to the job's start, its start to its end), seconds
SPLITS: dict[str, list[tuple[float, float]]] = {}
RESULTS = next((ROOT / "tests" / "eval" / "data" / "lm_eval").glob("*/results_*.json"))
TASK = next(iter(json.loads(RESULTS.read_text())["results"]))
#: lm_eval's command line, played: the results file where lm-eval would write it
STAND_IN = f"""\
import os, shutil, sys
out = sys.argv[sys.argv.index("--output_path") + 1]
os.makedirs(os.path.join(out, "model"), exist_ok=True)
shutil.copy({str(RESULTS)!r}, os.path.join(out, "model", "results_2026-01-01T00-00-00.json"))
print("stand-in lm_eval: results written", flush=True)
"""
CONFIG = """\
version: 1
name: bench-eval
model: {{uri: {model}}}
harness: {{kind: lm-eval, tasks: [{task}], limits: {{batch_size: 1}}}}
compute: {{gpus: 0}}
tracking: {{experiment: bench, tags: {{creator: bench, lifecycle: experimental}}}}
"""


def setup(work: Path) -> tuple[Path, dict[str, str]]:
    """The stand-in lm_eval package, a model folder and the config; the env that finds
    the stand-in first."""
    pkg = work / "fakes" / "lm_eval"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(STAND_IN)
    model = work / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    config = work / "eval.yaml"
    config.write_text(CONFIG.format(model=model, task=TASK))
    env = {**os.environ, "PYTHONPATH": str(work / "fakes"), "HF_HUB_OFFLINE": "1"}
    for var in [k for k in env if k.startswith(("MLFLOW_", "ROTA_"))]:
        del env[var]
    return config, env


def by_hand(work: Path, env: dict[str, str], i: int) -> float:
    out = work / f"hand-{i}"
    argv = [sys.executable, "-m", "lm_eval", "run", "--model", "hf", "--model_args",
            f"pretrained={work / 'model'},dtype=auto", "--tasks", TASK, "--batch_size", "1",
            "--output_path", str(out)]
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def runner(work: Path, config: Path, env: dict[str, str], i: int) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rota.eval.run", "--config", str(config), "--out",
                    str(work / f"runner-{i}")], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def through_rota(home: Path, env: dict[str, str], argv: list[str]) -> float:
    """From the call to the job's end (the daemon's ended_at: same machine, same clock)."""
    t = time.time()
    r = subprocess.run([ROTA, *argv, "--json"], env=env, check=True, capture_output=True,
                       text=True)
    got = json.loads(r.stdout)
    answers = [got] if "jobs" in got else [a for a in (got["fetch"], got["evaluate"]) if a]
    ids = {j["id"] for a in answers for j in a["jobs"]}
    end = _wait_all_ended(home, ids, timeout=120)
    with RawClient(home / "rota.sock") as c:
        job = c.job(max(ids))  # the evaluation (after its fetch job, if any)
    started = float(job["started_at"] or end)
    SPLITS.setdefault(argv[0], []).append((started - t, end - started))
    return end - t


def summary(values: list[float], base: float) -> dict[str, Any]:
    return {"median_s": statistics.median(values), "max_s": max(values),
            "overhead_median_ms": (statistics.median(values) - base) * 1000,
            "overhead_max_ms": (max(values) - base) * 1000, "samples": values}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rota-bench-eval-"))
    config, env = setup(work)
    home = work / "home"
    home.mkdir()
    env_cli = {**cli_env(home), "PYTHONPATH": env["PYTHONPATH"], "HF_HUB_OFFLINE": "1"}
    daemon = start_daemon(home, env=env_cli)
    times: dict[str, list[float]] = {"a by hand": [], "b runner": [], "c rota eval submit": [],
                                     "d rota submit --template": []}
    template = ["submit", "--template", "eval-lm-harness", "--set", f"model={work / 'model'}",
                "--set", f"tasks={TASK}", "--set", "gpus=0", "--set", "name=bench-template",
                "--set", f"out={work / 'template-out'}"]
    try:
        for i in range(a.samples):
            times["a by hand"].append(by_hand(work, env, i))
            times["b runner"].append(runner(work, config, env, i))
            times["c rota eval submit"].append(
                through_rota(home, env_cli, ["eval", "submit", str(config), "--work-dir",
                                             str(work / f"cli-{i}")]))
            times["d rota submit --template"].append(through_rota(home, env_cli, template))
    finally:
        daemon.terminate()
        daemon.wait(30)
    base = statistics.median(times["a by hand"])
    res = {"load": loadavg(), "samples": a.samples,
           "paths": {k: summary(v, base) for k, v in times.items()}}
    for name, s in res["paths"].items():
        print(f"{name:28} median {s['median_s']:.3f}s  max {s['max_s']:.3f}s  "
              f"overhead median {s['overhead_median_ms']:+.0f} ms  "
              f"max {s['overhead_max_ms']:+.0f} ms")
    for first, splits in SPLITS.items():
        wait = statistics.median(w for w, _ in splits)
        run = statistics.median(r for _, r in splits)
        print(f"  rota {first}: call to start {wait:.3f}s, start to end {run:.3f}s (medians)")
    res["splits"] = SPLITS
    print(f"load average after: {loadavg()}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
