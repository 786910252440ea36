"""End-to-end figures of a real daemon on 8 simulated GPUs (8x80G).

    python bench/bench_e2e.py [--jobs 2000] [--json bench/out/e2e.json]
                              [--profile-daemon bench/out/daemon.prof] [--fair-share]

A fresh ROTA_HOME in a temporary directory, one daemon (`python -m rota server --simulate
8x80G`), then, in order:

(a) throughput: N trivial jobs (`true`, 0.25 GPU each, so 32 run at once), from the first
    submit to the last completion (the daemon's own ended_at), submitted in batches of 100
    per request, and again one job per request;
(b) submit latency: 1,000 single-job submits of held jobs through the socket API (p50/p99),
    then 50 `rota submit --hold --gpus 0.25 -- true` runs as subprocesses (that figure
    includes starting Python and importing the CLI: it is what a person at a shell waits);
(c) dispatch latency: the 8 GPUs filled with 1-GPU `sleep 0.3` jobs and 200 more queued;
    per GPU, next attempt's started_at minus the previous attempt's ended_at (both stamped
    by the daemon: from noticing an exit to committing the next start on that GPU);
(d) the idle daemon: 5 s after the work, CPU share (cpu_times delta / wall) and RSS over 20 s.

``--fair-share`` runs the daemon with ``[priority] fair_share = true``: the queue in
multifactor order, the usage summed again from the attempts whenever a job starts or ends.

The daemon is stopped at the end (API shutdown) and the run checks that no daemon, shim or
job process is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from rota.client import RawClient as Client  # noqa: E402
from rota.config import Settings, load_settings  # noqa: E402
from rota.server.serve import socket_alive, start_detached  # noqa: E402

SIMULATE = "8x80G"
ACTIVE = ["pending", "starting", "running"]
TARGETS = {"submit_api_p50_ms": 5.0, "submit_api_p99_ms": 20.0, "dispatch_p50_ms": 50.0,
           "idle_cpu_pct": 1.0, "idle_rss_mb": 150.0}

Log = Callable[[str], None]


# --- small helpers -------------------------------------------------------------------------
def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank on the sorted values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))
    return s[k]


def dist(values_ms: Sequence[float]) -> dict[str, float]:
    return {"n": len(values_ms), "p50_ms": pct(values_ms, 50), "p90_ms": pct(values_ms, 90),
            "p99_ms": pct(values_ms, 99), "max_ms": max(values_ms, default=float("nan")),
            "mean_ms": statistics.fmean(values_ms) if values_ms else float("nan")}


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def free_port_for_bench() -> int:
    """A TCP port nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rota_argv() -> list[str]:
    exe = Path(sys.executable).parent / "rota"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "rota"]


# --- the daemon ----------------------------------------------------------------------------
def start_daemon(settings: Settings, profile: Path | None, log: Log,
                 extra: Sequence[str] = ()) -> int:
    argv = ["server", "--simulate", SIMULATE, *extra]
    if profile is None:
        return start_detached(settings, argv, timeout=60.0)
    # Same command under cProfile; the profile is written when the daemon exits cleanly.
    profile.parent.mkdir(parents=True, exist_ok=True)
    with open(settings.home / "daemon.log", "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cProfile", "-o", str(profile),
                                 "-m", "rota", *argv], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited with code {proc.returncode}")
        if socket_alive(settings.socket_path) and settings.pid_path.exists():
            log(f"daemon under cProfile (pid {proc.pid}); profile -> {profile}")
            return proc.pid
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the daemon did not come up within 60 s")


def stop_daemon(client: Client, pid: int, home: Path, log: Log) -> dict[str, Any]:
    """Shut the daemon down through the API; report (and clean up) anything left running."""
    out: dict[str, Any] = {"shutdown_api": True}
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        proc = None
    try:
        client.shutdown()
    except Exception as e:  # report it and fall back to SIGTERM below
        out["shutdown_api"] = False
        out["shutdown_error"] = str(e)
    t0 = time.monotonic()
    if proc is not None:
        try:
            proc.wait(timeout=30)  # reaps it too: start_detached made it our child
        except psutil.TimeoutExpired:
            log("daemon still alive 30 s after shutdown: SIGTERM")
            out["sigterm"] = True
            proc.terminate()
            with contextlib.suppress(psutil.TimeoutExpired):
                proc.wait(timeout=10)
        except psutil.NoSuchProcess:
            pass
    out["exit_s"] = time.monotonic() - t0
    left = leftover_processes(home)
    # the local runner outlives the daemon by design (it would exit once idle): stopped
    # here, not counted as left behind
    for p in [p for p in left if "rota.backends.runner" in " ".join(p.info["cmdline"] or [])]:
        left.remove(p)
        with contextlib.suppress(psutil.Error):
            p.kill()
    out["left_processes"] = [f"{p.pid} {' '.join(p.info['cmdline'] or [])[:120]}" for p in left]
    for p in left:  # only processes whose command line names our private ROTA_HOME
        with contextlib.suppress(psutil.Error):
            p.kill()
    out["daemon_gone"] = proc is None or not proc.is_running()
    return out


def leftover_processes(home: Path) -> list[psutil.Process]:
    """Processes other than this one whose command line or environment name our ROTA_HOME."""
    mark = str(home)
    me = os.getpid()
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.pid == me:
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(mark in a for a in (p.info["cmdline"] or [])) \
                    or p.environ().get("ROTA_HOME") == mark:
                found.append(p)
        except psutil.Error:
            continue
    return found


# --- waiting -------------------------------------------------------------------------------
def wait_all(client: Client, ids: list[int], timeout: float) -> float:
    """Block until every job in ids has ended; return the time.time() we saw it."""
    deadline = time.monotonic() + timeout
    wanted = set(ids)
    client.wait(ids[-1], timeout=max(1.0, deadline - time.monotonic()))
    while True:
        active = [j["id"] for j in client.jobs(states=ACTIVE, limit=10000) if j["id"] in wanted]
        if not active:
            return time.time()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(active)} of {len(ids)} jobs still active after "
                               f"{timeout:.0f}s")
        client.wait(max(active), timeout=max(1.0, deadline - time.monotonic()))


def job_rows(client: Client, ids: list[int]) -> list[dict[str, Any]]:
    wanted = set(ids)
    return [j for j in client.jobs(limit=10000) if j["id"] in wanted]


# --- (a) throughput ------------------------------------------------------------------------
def _runner_cpu(daemon: psutil.Process) -> tuple[float, float]:
    """CPU seconds of the daemon's local runner (its keeper and the runner it forks), and
    of the jobs they reaped (0 before it starts)."""
    for p in daemon.children():
        with contextlib.suppress(psutil.Error):
            if "rota.backends.runner" in " ".join(p.cmdline()):
                times = [q.cpu_times() for q in (p, *p.children())]
                return (sum(t.user + t.system for t in times),
                        sum(t.children_user + t.children_system for t in times))
    return 0.0, 0.0


def throughput(client: Client, pid: int, n: int, per_request: int, timeout: float, log: Log
               ) -> dict[str, Any]:
    spec = {"command": ["true"], "gpus": 0.25}
    ids: list[int] = []
    daemon = psutil.Process(pid)
    c0 = daemon.cpu_times()
    r0 = _runner_cpu(daemon)
    t_first = time.time()
    t0 = time.perf_counter()
    for k in range(0, n, per_request):
        batch = [dict(spec) for _ in range(min(per_request, n - k))]
        ids += [j["id"] for j in client.submit(batch)]
    submit_s = time.perf_counter() - t0
    seen = wait_all(client, ids, timeout)
    c1 = daemon.cpu_times()
    r1 = _runner_cpu(daemon)
    rows = job_rows(client, ids)
    last_end = max(r["ended_at"] or 0.0 for r in rows)
    states: dict[str, int] = {}
    for r in rows:
        states[r["state"]] = states.get(r["state"], 0) + 1
    elapsed = last_end - t_first
    res = {"jobs": n, "per_request": per_request, "submit_s": submit_s,
           "first_submit_to_last_end_s": elapsed, "jobs_per_s": n / elapsed,
           "client_observed_s": seen - t_first, "states": states,
           "all_completed": states.get("completed", 0) == n,
           # CPU spent per job: the daemon itself, and what starts and runs the jobs (the
           # local runner and the jobs it reaps, or the shims + jobs the daemon reaped)
           "daemon_cpu_ms_per_job": 1000 * (c1.user - c0.user + c1.system - c0.system) / n,
           "children_cpu_ms_per_job": 1000 * (c1.children_user - c0.children_user
                                              + c1.children_system - c0.children_system
                                              + r1[0] - r0[0] + r1[1] - r0[1]) / n,
           "runner_cpu_ms_per_job": 1000 * (r1[0] - r0[0]) / n,
           "jobs_cpu_ms_per_job": 1000 * (r1[1] - r0[1]) / n}
    log(f"(a) {n} x `true` at 0.25 GPU, {per_request}/request: {res['jobs_per_s']:.1f} jobs/s "
        f"({elapsed:.2f} s; submitting took {submit_s:.2f} s; states {states}); CPU per job: "
        f"daemon {res['daemon_cpu_ms_per_job']:.1f} ms, runner+jobs "
        f"{res['children_cpu_ms_per_job']:.1f} ms (runner {res['runner_cpu_ms_per_job']:.2f}, "
        f"jobs {res['jobs_cpu_ms_per_job']:.2f})")
    return res


# --- (b) submit latency --------------------------------------------------------------------
HELD = {"command": ["true"], "gpus": 0.25, "hold": True}


def submit_latency_api(client: Client, samples: int, log: Log) -> dict[str, Any]:
    ids = [client.submit([dict(HELD)])[0]["id"] for _ in range(20)]  # warm-up, not counted
    health = []  # the floor: one round trip through httpx, uvicorn and FastAPI
    for _ in range(200):
        t0 = time.perf_counter()
        client.health()
        health.append((time.perf_counter() - t0) * 1000)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        ids.append(client.submit([dict(HELD)])[0]["id"])
        times.append((time.perf_counter() - t0) * 1000)
    cancel_ms = []
    for i in ids:
        t0 = time.perf_counter()
        client.cancel(i)
        cancel_ms.append((time.perf_counter() - t0) * 1000)
    res = {**dist(times), "cancel": dist(cancel_ms), "health_round_trip": dist(health)}
    log(f"(b) submit via socket API, {samples} single held jobs: p50 {res['p50_ms']:.2f} ms, "
        f"p99 {res['p99_ms']:.2f} ms, max {res['max_ms']:.1f} ms (cancel p50 "
        f"{res['cancel']['p50_ms']:.2f} ms; GET /v1/health round trip p50 "
        f"{res['health_round_trip']['p50_ms']:.2f} ms)")
    return res


_PROXY = """
import sys, rota.cli.main
from rota.client import RawClient as Client
Client(__import__('pathlib').Path(sys.argv[1])).submit(
    [{"command": ["true"], "gpus": 0.25, "hold": True}])
"""


def _time_cmd(argv: list[str], samples: int, env: dict[str, str]) -> tuple[list[float], str]:
    times = []
    err = ""
    for _ in range(samples):
        t0 = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, text=True, env=env, check=False,
                           stdin=subprocess.DEVNULL)
        times.append((time.perf_counter() - t0) * 1000)
        if p.returncode != 0:
            err = (p.stderr or p.stdout).strip()[-500:]
            break
    return times, err


def submit_latency_cli(client: Client, settings: Settings, samples: int, log: Log
                       ) -> dict[str, Any]:
    env = dict(os.environ)
    rota = rota_argv()
    has_submit = subprocess.run([*rota, "submit", "--help"], capture_output=True, env=env,
                                check=False).returncode == 0
    if has_submit:
        argv = [*rota, "submit", "--hold", "--gpus", "0.25", "--", "true"]
        how = "rota submit --hold --gpus 0.25 -- true"
    else:
        argv = [sys.executable, "-c", _PROXY, str(settings.socket_path)]
        how = ("PROXY (no `rota submit` yet): python -c 'import rota.cli.main; "
               "Client(sock).submit([held job])'")
    _time_cmd(argv, 3, env)  # warm the page cache and the .pyc files
    times, err = _time_cmd(argv, samples, env)
    startup, _ = _time_cmd([sys.executable, "-c", "pass"], 10, env)
    imports, _ = _time_cmd([sys.executable, "-c", "import rota.cli.main"], 10, env)
    helps, _ = _time_cmd([*rota, "--help"], 10, env)
    held = [j["id"] for j in client.jobs(states=["held"], limit=10000)]
    for i in held:
        client.cancel(i)
    res = {"command": how, "real_cli": has_submit, **dist(times), "error": err,
           "python_startup_p50_ms": pct(startup, 50),
           "import_rota_cli_p50_ms": pct(imports, 50), "rota_help_p50_ms": pct(helps, 50),
           "includes_python_startup": True}
    if err:
        log(f"(b) CLI submit failed: {err}")
    log(f"(b) CLI submit ({how}), {len(times)} runs: p50 {res['p50_ms']:.0f} ms, "
        f"p99 {res['p99_ms']:.0f} ms — includes Python start-up (bare `python -c pass` "
        f"{res['python_startup_p50_ms']:.0f} ms; `import rota.cli.main` "
        f"{res['import_rota_cli_p50_ms']:.0f} ms; `rota --help` {res['rota_help_p50_ms']:.0f} ms)")
    return res


# --- (c) dispatch latency ------------------------------------------------------------------
def _gaps(per_gpu: dict[int, list[tuple[float, float]]]) -> list[float]:
    out = []
    for spans in per_gpu.values():
        spans.sort()
        out += [(nxt[0] - prev[1]) * 1000 for prev, nxt in pairwise(spans)]
    return out


def dispatch_latency(client: Client, extra: int, seconds: float, timeout: float,
                     log: Log) -> dict[str, Any]:
    spec = {"command": ["sleep", f"{seconds:g}"], "gpus": 1}
    jobs = client.submit([dict(spec) for _ in range(8 + extra)])
    ids = [j["id"] for j in jobs]
    wait_all(client, ids, timeout)
    per_gpu: dict[int, list[tuple[float, float]]] = {}  # daemon's started_at / ended_at
    lifetimes = []
    for i in ids:
        for a in client.job(i)["attempts_detail"]:
            if a["started_at"] is None or a["ended_at"] is None:
                continue
            for g in a["gpus"]:
                per_gpu.setdefault(g, []).append((a["started_at"], a["ended_at"]))
            lifetimes.append(a["ended_at"] - a["started_at"])
    gaps = _gaps(per_gpu)
    over = [(t - seconds) * 1000 for t in lifetimes]
    res = {"jobs": len(ids), "sleep_s": seconds, "gpus_used": sorted(per_gpu), **dist(gaps),
           "negative_gaps": sum(1 for g in gaps if g < 0),
           "attempt_overhead": dist(over)}
    log(f"(c) dispatch, GPU freed -> next start committed ({len(gaps)} gaps on "
        f"{len(per_gpu)} GPUs): p50 {res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.2f} ms, max "
        f"{res['max_ms']:.1f} ms")
    log(f"    attempt length (start committed -> exit recorded) minus {seconds:g}s: p50 "
        f"{res['attempt_overhead']['p50_ms']:.0f} ms, p99 "
        f"{res['attempt_overhead']['p99_ms']:.0f} ms")
    return res


# --- (d) idle daemon -----------------------------------------------------------------------
def idle(pid: int, settle: float, window: float, log: Log) -> dict[str, Any]:
    proc = psutil.Process(pid)
    time.sleep(settle)
    c0 = proc.cpu_times()
    w0 = time.monotonic()
    rss = []
    while time.monotonic() - w0 < window:
        rss.append(proc.memory_info().rss)
        time.sleep(1.0)
    c1 = proc.cpu_times()
    wall = time.monotonic() - w0
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    res = {"settle_s": settle, "window_s": wall, "cpu_s": cpu, "cpu_pct": 100 * cpu / wall,
           "rss_mb": rss[-1] / 1e6, "rss_max_mb": max(rss) / 1e6,
           "threads": proc.num_threads()}
    log(f"(d) idle daemon over {wall:.1f} s: {res['cpu_pct']:.2f}% of a core, RSS "
        f"{res['rss_mb']:.0f} MB (max {res['rss_max_mb']:.0f} MB), {res['threads']} threads")
    return res


# --- main ----------------------------------------------------------------------------------
def verdicts(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    figures = {"submit_api_p50_ms": ("submit_api", "p50_ms"),
               "submit_api_p99_ms": ("submit_api", "p99_ms"),
               "dispatch_p50_ms": ("dispatch", "p50_ms"),
               "idle_cpu_pct": ("idle", "cpu_pct"), "idle_rss_mb": ("idle", "rss_mb")}
    got = {k: r[part][key] for k, (part, key) in figures.items() if part in r}
    return {k: {"value": v, "target": TARGETS[k], "ok": v <= TARGETS[k]} for k, v in got.items()}


def run(args: argparse.Namespace, log: Log = print) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="rota-bench-"))
    os.environ["ROTA_HOME"] = str(home)  # the daemon and the CLI read it
    if args.fair_share:
        (home / "rota.toml").write_text("[priority]\nfair_share = true\n")
    settings = load_settings(home=home, simulate=SIMULATE)
    result: dict[str, Any] = {"simulate": SIMULATE, "home": str(home),
                              "fair_share": args.fair_share}
    t_start = time.monotonic()
    pid = start_daemon(settings, args.profile_daemon, log)
    result["daemon_start_s"] = time.monotonic() - t_start
    log(f"daemon pid {pid} on {SIMULATE} (up in {result['daemon_start_s']:.1f} s), "
        f"ROTA_HOME={home}")
    client = Client(settings.socket_path, timeout=120.0)
    loads: dict[str, str] = result.setdefault("loadavg", {})
    try:
        if "a" in args.parts:
            loads["throughput_batch"] = loadavg()
            result["throughput_batch"] = throughput(client, pid, args.jobs, 100, args.timeout,
                                                    log)
            result["stats_after_batch"] = client.stats()
        if "a" in args.parts and not args.batch_only:
            loads["throughput_single"] = loadavg()
            result["throughput_single"] = throughput(client, pid, args.jobs, 1, args.timeout,
                                                     log)
        if "b" in args.parts:
            loads["submit_api"] = loadavg()
            result["submit_api"] = submit_latency_api(client, args.latency_samples, log)
            loads["submit_cli"] = loadavg()
            result["submit_cli"] = submit_latency_cli(client, settings, args.cli_samples, log)
        if "c" in args.parts:
            loads["dispatch"] = loadavg()
            result["dispatch"] = dispatch_latency(client, args.dispatch_extra, 0.3,
                                                  args.timeout, log)
        if "d" in args.parts:
            loads["idle"] = loadavg()
            result["idle"] = idle(pid, args.idle_settle, args.idle_window, log)
        loads["end"] = loadavg()
        log(f"load average (1/5/15 min) at the start of each part: {loads}")
        result["stats"] = client.stats()
        log(f"daemon scheduling passes: {result['stats']}")
    finally:
        result["stop"] = stop_daemon(client, pid, home, log)
        client.close()
        left = result["stop"]["left_processes"]
        log(f"daemon stopped in {result['stop']['exit_s']:.2f} s; processes left behind: "
            f"{len(left)}" + (f" (killed: {left})" if left else ""))
        if args.keep_home:
            log(f"state kept in {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    result["verdicts"] = verdicts(result)
    for k, v in result["verdicts"].items():
        log(f"target {k}: {v['value']:.2f} (<= {v['target']:g}) "
            f"{'PASS' if v['ok'] else 'MISS'}")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--jobs", type=int, default=2000, help="jobs per throughput run")
    p.add_argument("--latency-samples", type=int, default=1000)
    p.add_argument("--cli-samples", type=int, default=50)
    p.add_argument("--dispatch-extra", type=int, default=200)
    p.add_argument("--idle-settle", type=float, default=5.0)
    p.add_argument("--idle-window", type=float, default=20.0)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per workload")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--profile-daemon", type=Path, default=None,
                   help="run the daemon under cProfile and write its profile here")
    p.add_argument("--parts", default="abcd",
                   help="which parts to run (letters a-d as in the description)")
    p.add_argument("--batch-only", action="store_true",
                   help="part a: only the run submitted 100 jobs per request")
    p.add_argument("--keep-home", action="store_true", help="keep ROTA_HOME for inspection")
    p.add_argument("--fair-share", action="store_true",
                   help="the daemon with [priority] fair_share = true")
    args = p.parse_args(argv)
    result = run(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if not result["stop"]["left_processes"] else 1


if __name__ == "__main__":
    sys.exit(main())
