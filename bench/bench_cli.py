"""The `rota` command as a person's shell runs it, side by side with Python, tsp and Slurm.

    python bench/bench_cli.py [--runs 50] [--jobs 2000] [--loop 200] [--slurm]
                              [--json bench/out/cli.json]

A fresh ROTA_HOME and daemon (`python -m rota server --simulate 8x80G`), then:

(a) latency: each command run ``--runs`` times as a subprocess of the installed console
    script (`.venv/bin/rota`), wall p50/p99, beside `python -c pass` measured in the same
    loop (interleaved, so a busy spell hits every command alike); ratios to Python;
(b) a YAML file of ``--jobs`` trivial jobs (`true`, 0.25 GPU: 32 at once), from the start
    of the one `rota submit -f` call to the last job's end (the daemon's ended_at), beside
    task-spooler running the same number of `true` (one `tsp` call per job, 32 slots:
    bench/baselines/tsp.py) in the same run;
(c) a shell loop of ``--loop`` single `rota submit --gpus 0.25 -- true` calls, until the
    last job ends, beside tsp's loop (one `tsp true` per job) and, with --slurm, a private
    Slurm's (one `sbatch` per job, bench/baselines/slurm.py, tuned).

Machine load is printed with the figures; the daemon is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from rota.client import RawClient  # noqa: E402

ROTA = str(Path(sys.executable).with_name("rota"))
TARGET_P50_MS, TARGET_P99_MS = 100.0, 150.0


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))]


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def start_daemon(home: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ROTA_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "rota", "server", "--simulate", "8x80G"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with RawClient(home / "rota.sock") as c:
                c.health()
            return proc
        except Exception:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the daemon did not start")


def latency(env: dict[str, str], runs: int, job: int) -> dict[str, dict[str, float]]:
    cmds = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "rota submit --hold": [ROTA, "submit", "--hold", "--gpus", "0.25", "--", "true"],
        "rota queue": [ROTA, "queue"],
        "rota show": [ROTA, "show", str(job)],
        "rota why": [ROTA, "why", str(job)],
        "rota --help": [ROTA, "--help"],
        "rota submit --help": [ROTA, "submit", "--help"],
    }
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(runs):
        for name, argv in cmds.items():
            t = time.perf_counter()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True)
            times[name].append((time.perf_counter() - t) * 1000)
    base = statistics.median(times["python -c pass"])
    return {k: {"p50_ms": pct(v, 50), "p99_ms": pct(v, 99), "x_python": pct(v, 50) / base}
            for k, v in times.items()}


def _wait_all_ended(home: Path, ids: set[int], timeout: float) -> float:
    """The last ended_at (daemon clock) once every job in ``ids`` has ended."""
    deadline = time.monotonic() + timeout
    with RawClient(home / "rota.sock") as c:
        while time.monotonic() < deadline:
            done = c.jobs(states=["completed", "failed", "cancelled", "timeout"],
                          limit=len(ids) + 1000)
            ended = {j["id"]: j for j in done if j["id"] in ids}
            if len(ended) == len(ids):
                bad = [j for j in ended.values() if j["state"] != "completed"]
                if bad:
                    raise RuntimeError(f"{len(bad)} jobs did not complete")
                return max(j["ended_at"] for j in ended.values())
            time.sleep(0.1)
    raise RuntimeError("timed out waiting for the jobs")


def rota_yaml(home: Path, env: dict[str, str], n: int) -> dict[str, float]:
    path = home / "jobs.yaml"
    path.write_text("".join(f"- command: [\"true\"]\n  gpus: 0.25\n  name: y{i}\n"
                            for i in range(n)))
    t0_wall = time.time()
    out = subprocess.run([ROTA, "submit", "-f", str(path), "--json"], env=env,
                         capture_output=True, text=True, check=True)
    cli_s = time.time() - t0_wall
    ids = {j["id"] for j in json.loads(out.stdout)["jobs"]}
    last = _wait_all_ended(home, ids, 120 + n)
    seconds = last - t0_wall
    return {"jobs": n, "seconds": seconds, "jobs_per_s": n / seconds, "cli_call_s": cli_s}


def rota_loop(home: Path, env: dict[str, str], n: int) -> dict[str, float]:
    script = (f'for i in $(seq {n}); do "{ROTA}" submit --gpus 0.25 --json -- true '
              f'>> "{home}/loop.jsonl" || exit 1; done')
    (home / "loop.jsonl").unlink(missing_ok=True)
    t0 = time.time()
    subprocess.run(["sh", "-c", script], env=env, check=True)
    loop_s = time.time() - t0
    text = (home / "loop.jsonl").read_text()
    ids = {j["id"] for doc in _json_docs(text) for j in doc["jobs"]}
    last = _wait_all_ended(home, ids, 120 + n)
    return {"jobs": n, "seconds": last - t0, "jobs_per_s": n / (last - t0), "loop_s": loop_s}


def _json_docs(text: str) -> list[Any]:
    dec, docs, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        doc, i = dec.raw_decode(text, i)
        docs.append(doc)
    return docs


def tsp(n: int) -> dict[str, Any]:
    from bench.baselines.tsp import run_tsp_baseline

    r = run_tsp_baseline(n, slots=32)
    return {"jobs": n, "seconds": r["seconds"], "jobs_per_s": r["jobs_per_s"]}


def slurm(n: int) -> dict[str, Any]:
    from bench.baselines.slurm import run_slurm_baseline

    r = run_slurm_baseline(n, tuned=True, mode="individual")
    return {"jobs": n, "seconds": r["seconds"], "jobs_per_s": r["jobs_per_s"],
            "gpu_model": r.get("gpu_model")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--loop", type=int, default=200)
    ap.add_argument("--slurm", action="store_true", help="also a private Slurm's sbatch loop")
    ap.add_argument("--skip-baselines", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    res: dict[str, Any] = {"load_before": loadavg(), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="rota-bench-cli-") as tmp:
        home = Path(tmp)
        env = {**os.environ, "ROTA_HOME": str(home), "COLUMNS": "120"}
        proc = start_daemon(home)
        try:
            with RawClient(home / "rota.sock") as c:
                job = c.submit([{"command": ["true"], "hold": True, "gpus": 0.25,
                                 "cwd": tmp}])[0]["id"]
            res["latency"] = latency(env, a.runs, job)
            for name, d in res["latency"].items():
                print(f"{name:22s} p50 {d['p50_ms']:6.1f} ms  p99 {d['p99_ms']:6.1f} ms  "
                      f"x{d['x_python']:.1f} python", flush=True)
            with RawClient(home / "rota.sock") as c:  # the held ones would stay queued
                for j in c.jobs(states=["held"], limit=10000):
                    c.cancel(j["id"])
            res["yaml"] = rota_yaml(home, env, a.jobs)
            print(f"rota submit -f ({a.jobs} YAML jobs): {res['yaml']['seconds']:.2f} s, "
                  f"{res['yaml']['jobs_per_s']:.0f} jobs/s (the CLI call "
                  f"{res['yaml']['cli_call_s']:.2f} s)", flush=True)
            res["loop"] = rota_loop(home, env, a.loop)
            print(f"rota submit x{a.loop} shell loop: {res['loop']['seconds']:.2f} s, "
                  f"{res['loop']['jobs_per_s']:.0f} jobs/s", flush=True)
        finally:
            with RawClient(home / "rota.sock") as c:
                c.shutdown()
            proc.wait(timeout=30)
    if not a.skip_baselines:
        res["tsp_jobs"] = tsp(a.jobs)
        res["tsp_loop"] = tsp(a.loop)
        print(f"tsp ({a.jobs} jobs, one call each): {res['tsp_jobs']['seconds']:.2f} s, "
              f"{res['tsp_jobs']['jobs_per_s']:.0f} jobs/s -> rota YAML x"
              f"{res['yaml']['jobs_per_s'] / res['tsp_jobs']['jobs_per_s']:.2f}")
        print(f"tsp x{a.loop} loop: {res['tsp_loop']['seconds']:.2f} s -> rota loop x"
              f"{res['loop']['jobs_per_s'] / res['tsp_loop']['jobs_per_s']:.2f}")
        if a.slurm:
            res["sbatch_loop"] = slurm(a.loop)
            print(f"sbatch x{a.loop} (tuned Slurm): {res['sbatch_loop']['seconds']:.2f} s -> "
                  f"rota loop x{res['loop']['jobs_per_s'] / res['sbatch_loop']['jobs_per_s']:.2f}")
    res["load_after"] = loadavg()
    print(f"load average before {res['load_before']}, after {res['load_after']}")
    lat = res["latency"]
    hot = ["rota submit --hold", "rota queue", "rota show", "rota why"]
    ok = all(lat[k]["p50_ms"] <= TARGET_P50_MS and lat[k]["p99_ms"] <= TARGET_P99_MS
             for k in hot)
    print(f"target p50 <= {TARGET_P50_MS:.0f} ms, p99 <= {TARGET_P99_MS:.0f} ms for "
          f"submit/queue/show/why: {'met' if ok else 'MISSED'}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
