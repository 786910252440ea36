"""A daemon holding a very long pending queue: restart, memory, `rota queue`, a pass.

    python bench/bench_scale.py [--sizes 200000,1000000] [--json bench/out/scale.json]

For each size N a fresh ROTA_HOME gets a store of N pending jobs, written straight into the
jobs table with one multi-row INSERT per 20,000 jobs through SQLAlchemy Core (the store's
own table and migrations; no 'submitted' event rows, which nothing at start-up reads): that
takes seconds, where N submits through the API would take minutes. The jobs are a mix of
whole-GPU and half-GPU `sleep 600`, priorities 0-3, ~2% with a retry backoff in the past.

Then, on a simulated 8x80G machine:

1. the daemon starts on that store: its first pass starts 8 jobs and the machine is full;
2. it is stopped (its jobs keep running, as after a crash or an upgrade) and started again:
   the restart re-adopts the 8 running jobs and takes up the N pending ones.

For each start: seconds from the process's start to the first answered `GET /v1/health`
and to the first answered submit (a held job, so the queue's figures do not move), its
resident memory then (RSS) and its peak (VmHWM); after the restart, also the RSS after
passes, the wall time of `rota queue` (the real CLI, median of 3) and the daemon's own
pass durations (`GET /v1/stats`: every pass, the snapshot included, p50 and max) over
passes forced by submits. Then, in process, a pass over N jobs that can never start (forced
in), with and without the daemon's queue setting them aside.

With ROTA_TEST_PG_URL set, the same runs go against that PostgreSQL database too (its jobs
tables are emptied first: use a scratch database).
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

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from bench.bench_e2e import loadavg, rota_argv, stop_daemon  # noqa: E402
from rota.client import RawClient as Client  # noqa: E402
from rota.config import Settings, load_settings  # noqa: E402
from rota.core.spec import JobSpec  # noqa: E402
from rota.store.repo import Store  # noqa: E402

SIMULATE = "8x80G"
SIZES = (200_000, 1_000_000)
CHUNK = 20_000
PASSES = 5  # passes forced after the restart, for the pass figures
TARGETS = {"answer_s": 5.0, "rss_mb": 500.0, "queue_cli_s": 1.0, "pass_s": 1.0}
MB = 1 << 20


# --- the store -----------------------------------------------------------------------------
def fill(url: str, n: int, vacuum: bool = False) -> float:
    """N pending jobs written straight into the store's jobs table; seconds it took.
    ``vacuum``: then VACUUM ANALYZE it on PostgreSQL, as autovacuum does some time after a
    bulk insert (until then an index-only scan still reads every row's heap page)."""
    from sqlalchemy import delete, insert

    from rota.store.tables import AttemptRow, EventRow, JobRow

    t0 = time.monotonic()
    store = Store.open(url)  # creates the schema through the migrations, as the daemon does
    specs = {g: JobSpec(command=["sleep", "600"], gpus=g).model_dump(mode="json")
             for g in (1.0, 0.5)}
    now = time.time()
    jobs = JobRow.__table__
    try:
        with store.engine.begin() as c:  # a scratch PostgreSQL database may hold a last run
            for t in (EventRow.__table__, AttemptRow.__table__, jobs):
                c.execute(delete(t))
        for start in range(0, n, CHUNK):
            rows = []
            for k in range(start, min(n, start + CHUNK)):
                gpus = 0.5 if k % 4 == 3 else 1.0
                rows.append({
                    "name": f"scale-{k}", "user": "bench", "state": "pending",
                    "spec": specs[gpus], "priority": k % 4, "gpus": gpus, "gpu_mem": None,
                    "content_hash": f"{k:064x}", "source": "bench",
                    # each its own submit time (a queue submitted job by job, the most
                    # memory): a sweep's jobs, submitted at once, share theirs
                    "created_at": now - (n - k) * 1e-3,
                    "updated_at": now, "attempts": 0, "failures": 0, "tags": "",
                    "not_before": now - 60 if k % 50 == 7 else None})
            with store.engine.begin() as c:
                c.execute(insert(jobs), rows)
        if vacuum and store.engine.dialect.name == "postgresql":
            from sqlalchemy import text

            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                c.execute(text("VACUUM ANALYZE jobs"))
    finally:
        store.close()
    return time.monotonic() - t0


# --- the daemon ----------------------------------------------------------------------------
def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def start(settings: Settings, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """Start the daemon; time its first answers, and its memory then."""
    log_path = settings.home / "daemon.log"
    t0 = time.monotonic()
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([*rota_argv(), "server", "--simulate", SIMULATE], env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    client = Client(settings.socket_path, timeout=120.0)
    got: dict[str, Any] = {"pid": proc.pid}
    try:
        while "health_s" not in got:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the daemon exited ({proc.returncode}):\n{tail}")
            if time.monotonic() - t0 > 600:
                raise RuntimeError(f"no answer within 600 s; see {log_path}")
            try:
                health = client.health()
            except Exception:
                time.sleep(0.02)
                continue
            got["health_s"] = time.monotonic() - t0
            got["pending"], got["running"] = health["pending"], health["running"]
        client.submit([{"command": ["true"], "hold": True, "name": "probe"}])
        got["submit_s"] = time.monotonic() - t0
        got["rss_mb"] = psutil.Process(proc.pid).memory_info().rss / MB
        got["peak_rss_mb"] = _peak_rss(proc.pid) / MB
    finally:
        client.close()
    return proc.pid, got


def shutdown(settings: Settings, pid: int) -> None:
    """Stop the daemon through the API and wait for it to end."""
    client = Client(settings.socket_path, timeout=120.0)
    try:
        client.shutdown()
    finally:
        client.close()
    proc = psutil.Process(pid)
    proc.wait(timeout=120)  # reaps it too: it is our child


def passes(settings: Settings, count: int) -> dict[str, Any]:
    """Force passes (each submit kicks one) and read the daemon's pass durations."""
    client = Client(settings.socket_path, timeout=120.0)
    try:
        seen = client.stats()["passes"]
        for _ in range(count):
            client.submit([{"command": ["true"], "gpus": 1}])  # waits: the machine is full
            deadline = time.monotonic() + 60
            while client.stats()["passes"] <= seen and time.monotonic() < deadline:
                time.sleep(0.01)
            seen = client.stats()["passes"]
        return client.stats()
    finally:
        client.close()


def queue_cli(env: dict[str, str], runs: int = 3) -> dict[str, Any]:
    walls = []
    lines = ""
    for _ in range(runs):
        t0 = time.monotonic()
        done = subprocess.run([*rota_argv(), "queue"], env={**env, "COLUMNS": "160"},
                              capture_output=True, text=True, timeout=300)
        walls.append(time.monotonic() - t0)
        if done.returncode != 0:
            raise RuntimeError(f"rota queue failed: {done.stderr.strip()}")
        lines = done.stdout
    out = lines.splitlines()
    return {"wall_s": statistics.median(walls), "walls_s": walls, "lines": len(out),
            "last_line": out[-1] if out else ""}


def one_size(n: int, db: str | None, log: Any, vacuum: bool = False) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="rota-scale-"))
    env = {**os.environ, "ROTA_HOME": str(home)}
    if db:
        env["ROTA_DATABASE_URL"] = db
    else:
        env.pop("ROTA_DATABASE_URL", None)
    settings = load_settings(home=home, simulate=SIMULATE, database_url=db)
    r: dict[str, Any] = {"n": n, "db": ("pg+vacuum" if vacuum else "postgresql") if db
                         else "sqlite"}
    pid = 0
    try:
        r["fill_s"] = fill(settings.db_url, n, vacuum)
        log(f"N={n} {r['db']}: store filled in {r['fill_s']:.1f} s")
        home.chmod(0o700)
        pid, r["first_start"] = start(settings, env)
        log(f"  first start: {r['first_start']}")
        shutdown(settings, pid)  # its jobs and the local runner keep running
        pid, r["restart"] = start(settings, env)
        log(f"  restart: {r['restart']}")
        r["stats"] = passes(settings, PASSES)
        r["rss_after_passes_mb"] = psutil.Process(pid).memory_info().rss / MB
        r["peak_rss_mb"] = _peak_rss(pid) / MB
        log(f"  passes: {r['stats']}; RSS {r['rss_after_passes_mb']:.0f} MB")
        r["queue_cli"] = queue_cli(env)
        log(f"  rota queue: {r['queue_cli']}")
    finally:
        if pid:
            r["stop"] = stop_daemon(Client(settings.socket_path, timeout=120.0), pid, home, log)
        shutil.rmtree(home, ignore_errors=True)
    r["verdicts"] = verdicts(r)
    return r


def never_pass(n: int) -> dict[str, float]:
    """In process, on the same 8x80G machine: a pass over N forced jobs that can never
    start (16 whole GPUs each) behind 4 that can (so 4 GPUs stay free and the pass cannot
    stop early), as the daemon's queue hands them to the scheduler (set aside:
    rota.server.jobs.queue), against the same pass given them all."""
    from rota.core.schedule import schedule
    from rota.core.snapshot import GpuView, PendingJob, Policy, Snapshot
    from rota.server.jobs.queue import PendingQueue

    gpus = [GpuView(index=i, memory_total=80 << 30) for i in range(8)]
    jobs = [PendingJob(i, 0, i, 1000 if i <= 4 else 16_000) for i in range(1, n + 5)]
    t0 = time.perf_counter()
    schedule(Snapshot(gpus=gpus, pending=jobs, presorted=True), Policy(), 0.0)
    whole = time.perf_counter() - t0
    q = PendingQueue()
    q.load(list(jobs))
    t0 = time.perf_counter()
    q.fit_to({g.index: g.memory_total for g in gpus})
    sort_out = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = schedule(Snapshot(gpus=gpus, pending=q.ordered(), presorted=True, by_id=q.index()),
                    Policy(), 0.0)
    aside = time.perf_counter() - t0
    assert len(plan.starts) == 4 and len(q.aside()) == n
    return {"pass_all_ms": 1000 * whole, "set_aside_once_ms": 1000 * sort_out,
            "pass_aside_ms": 1000 * aside}


def verdicts(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    s = r["restart"]
    got = {"answer_s": max(s["health_s"], s["submit_s"]),
           "rss_mb": max(s["rss_mb"], r["rss_after_passes_mb"]),
           "queue_cli_s": r["queue_cli"]["wall_s"],
           "pass_s": (r["stats"]["pass_max_ms"] or 0) / 1000}
    return {k: {"value": v, "target": TARGETS[k], "ratio": v / TARGETS[k],
                "ok": v <= TARGETS[k]} for k, v in got.items()}


def table(results: list[dict[str, Any]]) -> str:
    head = (f"{'db':<10} {'N':>9} {'health s':>9} {'submit s':>9} {'RSS MB':>7} "
            f"{'peak MB':>8} {'RSS after':>9} {'queue s':>8} {'pass p50':>9} {'pass max':>9}")
    lines = [head, "-" * len(head)]
    for r in results:
        s, st = r["restart"], r["stats"]
        lines.append(
            f"{r['db']:<10} {r['n']:>9,} {s['health_s']:>9.2f} {s['submit_s']:>9.2f} "
            f"{s['rss_mb']:>7.0f} {r['peak_rss_mb']:>8.0f} {r['rss_after_passes_mb']:>9.0f} "
            f"{r['queue_cli']['wall_s']:>8.2f} {st['pass_p50_ms']:>7.1f}ms "
            f"{st['pass_max_ms']:>7.1f}ms")
    lines.append("(after a restart; targets: answers <= 5 s, RSS <= 500 MB, `rota queue` <= 1 s, "
                 "a pass <= 1 s)")
    for r in results:
        ratios = ", ".join(f"{k} {v['value']:.2f}/{v['target']:g} = {v['ratio']:.2f}"
                           f"{'' if v['ok'] else ' MISS'}" for k, v in r["verdicts"].items())
        lines.append(f"{r['db']} N={r['n']:,}: {ratios}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--sizes", default=",".join(map(str, SIZES)),
                   help="pending queue lengths, comma-separated")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--no-sqlite", action="store_true", help="only PostgreSQL")
    p.add_argument("--vacuum", action="store_true",
                   help="VACUUM ANALYZE the PostgreSQL jobs table once filled")
    args = p.parse_args(argv)
    dbs: list[str | None] = [] if args.no_sqlite else [None]
    if os.environ.get("ROTA_TEST_PG_URL"):
        dbs.append(os.environ["ROTA_TEST_PG_URL"])
    print(f"load average before: {loadavg()}")
    results = [one_size(int(n), db, print, args.vacuum) for db in dbs
               for n in args.sizes.split(",")]
    print(table(results))
    for n in args.sizes.split(","):
        never = never_pass(int(n))
        print(f"{int(n):,} never-runnable jobs (in process): a pass over them all "
              f"{never['pass_all_ms']:.1f} ms; set aside once {never['set_aside_once_ms']:.1f}"
              f" ms, then a pass {never['pass_aside_ms']:.2f} ms")
        results.append({"n": int(n), "never_runnable": never, "verdicts": {}})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if all(v["ok"] for r in results for v in r["verdicts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
