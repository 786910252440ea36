"""What Rota adds on top of a cluster engine, beside the engine's own CLI in the same run.

    python bench/bench_pools.py [--jobs 100] [--ray-jobs 10] [--samples 20]
                                [--engines slurm,ray] [--poll-every 2,0.25] [--json FILE]

For each engine, one private cluster (bench/baselines: PrivateSlurm tuned, 8 fake GPUs x 4
shards = 32 slots; LocalRay, a head and a worker node), and on it, in this order:

(a) the engine alone: Slurm ``sbatch --array`` of N ``true`` and a loop of N ``sbatch``
    (PrivateSlurm.run_workload: from the first sbatch to the last completion line seen in
    the jobcomp log); Ray a loop of N ``JobSubmissionClient.submit_job("true")`` and a
    shell loop of ``ray job submit --no-wait -- true`` (to Ray's end_time of the last job).
(b) Rota, once per ``--poll-every`` value (the daemon restarted on the same ROTA_HOME, so
    job ids, hence engine keys, never repeat), its rota.toml holding the pool with
    max_in_flight 10000 (nothing waits in Rota's queue): N trivial jobs as one YAML file
    (``rota submit -f``: on Slurm one ``sbatch --array``, the jobs being the same but for
    their command; and, Slurm only, the same file with a variable of its own in each job,
    which makes each its own ``sbatch``: Rota without arrays) and as a shell loop of
    ``rota submit --pool P`` (one job a pass: one sbatch each), from the first
    call to the last end as Rota records it (its ended_at: when its poller heard of it)
    and as the engine records it (Slurm: the wall time the completion line appeared, read
    every 50 ms; Ray: its end_time).
(c) single-job latency, beside each daemon of (b): ``rota submit --pool`` and the engine's
    own submit (``sbatch`` / ``submit_job``) taking turns, one job at a time, from the
    call returning to the job's own first act (``date +%s.%N`` into a file). Rota's part
    is split at its hand-over decision (the attempt's started_at, the daemon's clock,
    committed just before the sbatch / POST); Ray's at its start_time (when the head
    accepted the job).

The poll interval is the pool's ``poll_every`` in rota.toml (default 2 s). Slurm jobs ask
``--gpus 0.25`` (``--gres=shard:1``, as the baseline's jobs), Ray jobs no GPU.
Overhead = (Rota's seconds - the engine's) / N, in ms per job.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "src"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from bench.baselines._common import tail_file, wait_for  # noqa: E402
from bench.bench_cli import ROTA, _ids, _wait_all_ended, cli_env, loadavg, pct  # noqa: E402
from bench.bench_e2e import stop_daemon  # noqa: E402
from rota.client import RawClient  # noqa: E402

STAMP = 'date +%s.%N > "$0"'  # a job's first act: its own clock, into the file named $0
Submit = Callable[[Path], dict[str, float]]  # submits a stamping job; its call's times


# --- shared pieces -----------------------------------------------------------------------
def stamp_argv(path: Path) -> list[str]:
    return ["sh", "-c", STAMP, str(path)]


def read_stamp(path: Path) -> float | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return float(text) if text else None


#: The pause before each latency submit: at least LAT_SETTLE s after the previous job's
#: stamp (its end is processed), plus a seeded random part of up to one second.
LAT_SETTLE, LAT_SPREAD = 0.3, 1.0


def latency(submits: dict[str, Submit], samples: int, folder: Path,
            on_timeout: Callable[[], str] | None = None) -> dict[str, list[dict[str, float]]]:
    """One stamping job at a time, the ways taking turns (which goes first alternates, so
    a busy spell or a warm cache favours none): each submit's call and return times, and
    the job's stamp. ``folder`` is new: a stamp from an earlier run must not be read.

    Each submit waits a seeded random pause first. Slurm 22.05 starts a batch job on its
    next scheduling pass (about once a second) or on the pass that a job's end triggers,
    never in the submit itself; submitted right after the previous job's stamp, the faster
    client (plain sbatch) would race that job's end and get its pass, the slower (rota
    submit, then the daemon's sbatch) the next regular one. With the pause, both ways
    sample the engine's own pass at random, each round with the same pause for every way."""
    folder.mkdir(parents=True)
    rng = random.Random(0)
    out: dict[str, list[dict[str, float]]] = {name: [] for name in submits}
    for i in range(samples):
        turn = list(submits.items())
        pause = LAT_SETTLE + rng.random() * LAT_SPREAD  # the same for every way this round
        for j, (name, submit) in enumerate(turn if i % 2 == 0 else turn[::-1]):
            path = folder / f"{i}-{j}"
            time.sleep(pause)
            row = submit(path)
            row["started"] = wait_for(partial(read_stamp, path), timeout=60, interval=0.01,
                                      what=f"{name}'s latency job {i} to start",
                                      on_timeout=on_timeout)
            out[name].append(row)
    return out


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[dict[str, float], str]:
    t0 = time.time()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return {"call": t0, "returned": time.time()}, proc.stdout


def ms_stats(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "p50_ms": round(pct(ms, 50), 1), "p99_ms": round(pct(ms, 99), 1)}


def lat_stats(rows: list[dict[str, float]]) -> dict[str, Any]:
    """From the call's return to the job's own start; with the parts that are known."""
    out: dict[str, Any] = {"return_to_start": ms_stats([r["started"] - r["returned"]
                                                        for r in rows]),
                           "call_to_start": ms_stats([r["started"] - r["call"] for r in rows])}
    if all("decided" in r for r in rows):
        out["return_to_decision"] = ms_stats([r["decided"] - r["returned"] for r in rows])
        out["decision_to_start"] = ms_stats([r["started"] - r["decided"] for r in rows])
    if all("accepted" in r for r in rows):
        out["accepted_to_start"] = ms_stats([r["started"] - r["accepted"] for r in rows])
    return out


def rate(n: int, seconds: float, **extra: float) -> dict[str, float]:
    return {"jobs": n, "seconds": round(seconds, 3), "jobs_per_s": round(n / seconds, 2),
            **{k: round(v, 3) for k, v in extra.items()}}


# --- the engines ---------------------------------------------------------------------------
@dataclass
class Engine:
    """One private cluster as the bench sees it."""

    name: str
    pool_toml: str  # the [pools.NAME] keys, engine and where it is
    gpus: float  # per job
    throughput: Callable[[int, Path], dict[str, Any]]  # the engine's own ways: (jobs, folder)
    last_end: Callable[[list[str]], float]  # the engine's end of the last of these keys
    #: each Rota way beside the engine's way it is compared with
    pairs: dict[str, str]
    one: tuple[str, Submit]  # the engine's own single submit (latency), by name
    settle: Callable[[], object] = lambda: None  # wait for those single jobs to end
    accepted: Callable[[str], float | None] = lambda key: None  # the engine took it (Ray)
    notes: list[str] = field(default_factory=list)


class JobcompWatch:
    """The wall time each job's completion line appears in Slurm's jobcomp log (the same
    probe as PrivateSlurm.run_workload's, so both paths end alike)."""

    def __init__(self, path: str) -> None:
        self.path, self._stop = path, threading.Event()
        self.seen: dict[str, list[float]] = {}  # by job name (an array's tasks share one)
        self._offset = os.path.getsize(path) if os.path.exists(path) else 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        buf = b""
        while not self._stop.wait(0.05):
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(self._offset)
                    chunk = fh.read()
            except FileNotFoundError:
                continue
            self._offset += len(chunk)
            *lines, buf = (buf + chunk).split(b"\n")
            now = time.time()
            for line in lines:
                m = re.search(rb"\bName=(rota-[\w.-]+)\s", line)  # KEY or KEY-array
                if m:
                    self.seen.setdefault(m.group(1).decode(), []).append(now)

    def last_end(self, keys: list[str]) -> float:
        """The last completion line of these attempts: each under its own key, or under
        the key of an array that one of them began (``KEY-array``)."""
        names = {*keys, *(f"{k}-array" for k in keys)}

        def lines() -> list[float]:
            return [t for name in names for t in self.seen.get(name, [])]
        wait_for(lambda: len(lines()) >= len(keys), timeout=30, interval=0.05,
                 what="the jobcomp lines of Rota's jobs")
        return max(lines())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def slurm_engine() -> Iterator[Engine]:
    from bench.baselines.slurm import PrivateSlurm

    with PrivateSlurm(tuned=True) as slurm:
        assert slurm.folder is not None
        watch = JobcompWatch(os.path.join(slurm.folder, "jobcomp.log"))
        toml = (f'engine = "slurm"\nslurm_conf = "{slurm.env["SLURM_CONF"]}"\n'
                "shards = true\n")
        try:
            yield Engine("slurm", toml, 0.25, partial(slurm_throughput, slurm),
                         watch.last_end, {"rota submit -f": "sbatch --array",
                                          SEPARATE: "sbatch loop",
                                          "rota submit loop": "sbatch loop"},
                         ("sbatch", partial(sbatch_one, slurm)),
                         notes=[f"{slurm.gpu_model}, {slurm.slots} slots, tuned"])
        finally:
            watch.close()


def slurm_throughput(slurm: Any, n: int, folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, label in (("array", "sbatch --array"), ("individual", "sbatch loop")):
        r = slurm.run_workload(n, mode=mode)
        out[label] = rate(n, r["seconds"], submit_s=r["submit_seconds"])
    return out


def sbatch_one(slurm: Any, path: Path) -> dict[str, float]:
    argv = ["sbatch", "--parsable", "--quiet", "--output=/dev/null",
            *slurm.job_resource_args(), "--wrap", shlex.join(stamp_argv(path))]
    return timed(argv, slurm.env, path.parent)[0]


@contextmanager
def ray_engine() -> Iterator[Engine]:
    from ray.job_submission import JobSubmissionClient

    from bench.baselines.ray import LocalRay

    cluster = LocalRay()
    try:
        cluster.start()
        client = JobSubmissionClient(cluster.address)
        ray_ended(client, [client.submit_job(entrypoint="true")], 120)  # warm: first job

        def info(key: str) -> Any:
            return client.get_job_info(key)

        def last_end(keys: list[str]) -> float:
            return max(info(k).end_time for k in keys) / 1000

        def accepted(key: str) -> float:
            return float(info(key).start_time) / 1000

        sids: list[str] = []

        def sdk(path: Path) -> dict[str, float]:
            t = time.time()
            sids.append(client.submit_job(entrypoint=shlex.join(stamp_argv(path))))
            return {"call": t, "returned": time.time(), "accepted": accepted(sids[-1])}

        yield Engine("ray", f'engine = "ray"\naddress = "{cluster.address}"\n', 0.0,
                     partial(ray_throughput, cluster, client), last_end,
                     {"rota submit -f": "JobSubmissionClient loop",
                      "rota submit loop": "ray job submit loop"},
                     ("JobSubmissionClient", sdk), lambda: ray_ended(client, sids, 120),
                     accepted, notes=["a head (4 CPUs) and a worker node (2 CPUs), local"])
    finally:
        cluster.close()


def ray_ended(client: Any, ids: list[str], timeout: float) -> float:
    """Once every job has ended (all SUCCEEDED): Ray's end_time of the last one."""
    def done() -> list[Any] | None:
        infos = [client.get_job_info(i) for i in ids]
        return infos if all(x.status.is_terminal() for x in infos) else None

    infos = wait_for(done, timeout=timeout, interval=0.2, what=f"{len(ids)} Ray jobs to end")
    bad = [x.submission_id for x in infos if x.status.value != "SUCCEEDED"]
    if bad:
        raise RuntimeError(f"ray jobs that did not succeed: {bad[:5]}")
    return max(x.end_time for x in infos) / 1000


def ray_throughput(cluster: Any, client: Any, n: int, folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    t0 = time.time()
    ids = [client.submit_job(entrypoint="true") for _ in range(n)]
    submitted = time.time() - t0
    out["JobSubmissionClient loop"] = rate(n, ray_ended(client, ids, 60 + 10 * n) - t0,
                                           submit_s=submitted)
    before = {j.submission_id for j in client.list_jobs()}
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    loop = (f'for i in $(seq {n}); do "{ray}" job submit --address {cluster.address} '
            f'--no-wait -- true > /dev/null 2>> "{folder}/ray-cli.err" || exit 1; done')
    t0 = time.time()
    if subprocess.run(["bash", "-c", loop], env=cluster.env, cwd=folder).returncode:
        raise RuntimeError("ray job submit failed: " + tail_file(f"{folder}/ray-cli.err"))
    submitted = time.time() - t0
    new = [j.submission_id for j in client.list_jobs() if j.submission_id not in before]
    out["ray job submit loop"] = rate(n, ray_ended(client, new, 60 + 10 * n) - t0,
                                      submit_s=submitted)

    return out


ENGINES = {"slurm": slurm_engine, "ray": ray_engine}


# --- Rota on top -----------------------------------------------------------------------------
POOL = "bench"


def _daemon_up(home: Path, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"the daemon exited with {proc.returncode}: "
                           + (home / "daemon.log").read_text()[-2000:])
    try:
        with RawClient(home / "rota.sock") as c:
            c.health()
    except Exception:  # not answering yet
        return False
    return True


@contextmanager
def rota_daemon(home: Path, engine: Engine, poll_every: float) -> Iterator[dict[str, str]]:
    """The daemon of ``home`` (its rota.toml has the pool), stopped after. One home serves
    every poll interval of an engine: its job ids go on rising, so no engine key
    (``rota-JOB-ATTEMPT``) is handed to the cluster twice."""
    (home / "rota.toml").write_text(f"[pools.{POOL}]\n{engine.pool_toml}"
                                    f"max_in_flight = 10000\npoll_every = {poll_every:g}\n")
    env = cli_env(home)
    with open(home / "daemon.log", "ab") as log:
        proc = subprocess.Popen([ROTA, "server", "--simulate", "8x80G"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        wait_for(lambda: _daemon_up(home, proc), timeout=60, interval=0.1,
                 what="the daemon to answer")
        yield env
    finally:
        with RawClient(home / "rota.sock") as c:
            stop_daemon(c, proc.pid, home, print)


def keys(home: Path, ids: set[int]) -> list[str]:
    """The engine keys of the jobs' first attempts (rota-INSTALL-JOB-1), as the daemon
    recorded them before the hand-over."""
    return [json.loads((home / "status" / f"{i}-1.json.engine").read_text())["key"]
            for i in sorted(ids)]


def rota_yaml(home: Path, env: dict[str, str], engine: Engine, n: int,
              separate: bool = False) -> dict[str, float]:
    """N jobs in one file; ``separate``: a variable of its own in each, so that no two go
    as one array (one engine job each)."""
    path = home / "jobs.yaml"
    path.write_text("".join(f'- command: ["true"]\n  pool: {POOL}\n  gpus: {engine.gpus:g}\n'
                            + (f'  env: {{BENCH_JOB: "{i}"}}\n' if separate else "")
                            for i in range(n)))
    t0 = time.time()
    out = subprocess.run([ROTA, "submit", "-f", str(path)], env=env, cwd=home,
                         capture_output=True, text=True, check=True)
    call_s = time.time() - t0
    return _ended(home, engine, _ids(out.stdout), n, t0, cli_call_s=call_s)


def rota_loop(home: Path, env: dict[str, str], engine: Engine, n: int) -> dict[str, float]:
    (home / "loop.txt").unlink(missing_ok=True)
    script = (f'for i in $(seq {n}); do "{ROTA}" submit --pool {POOL} --gpus {engine.gpus:g} '
              f'-- true >> "{home}/loop.txt" || exit 1; done')
    t0 = time.time()
    subprocess.run(["bash", "-c", script], env=env, cwd=home, check=True)
    loop_s = time.time() - t0
    return _ended(home, engine, _ids((home / "loop.txt").read_text()), n, t0, loop_s=loop_s)


def _ended(home: Path, engine: Engine, ids: set[int], n: int, t0: float,
           **extra: float) -> dict[str, float]:
    """From t0 to the last end as Rota records it, and as the engine does."""
    if len(ids) != n:
        raise RuntimeError(f"{len(ids)} job ids seen in rota's answers, {n} submitted")
    last = _wait_all_ended(home, ids, 120 + 10 * n)
    return rate(n, last - t0, to_engine_end_s=engine.last_end(keys(home, ids)) - t0, **extra)


def rota_latency(home: Path, env: dict[str, str], engine: Engine, samples: int,
                 folder: Path) -> dict[str, Any]:
    """`rota submit --pool` and the engine's own submit, taking turns (see latency)."""
    ids: list[int] = []

    def submit(path: Path) -> dict[str, float]:
        row, out = timed([ROTA, "submit", "--pool", POOL, "--gpus", f"{engine.gpus:g}", "--",
                          *stamp_argv(path)], env, home)
        ids.extend(_ids(out))
        return row

    def seen() -> str:
        shown = subprocess.run([ROTA, "show", str(ids[-1] if ids else 0)], env=env,
                               capture_output=True, text=True, check=False)
        return shown.stdout + tail_file(str(home / "daemon.log"))

    got = latency({"rota submit": submit, engine.one[0]: engine.one[1]}, samples, folder,
                  seen)
    rows = got["rota submit"]
    _wait_all_ended(home, set(ids), 120)
    engine.settle()
    with RawClient(home / "rota.sock") as c:
        for row, job_id in zip(rows, ids, strict=True):
            row["decided"] = float(c.job(job_id)["attempts_detail"][0]["started_at"])
            [key] = keys(home, {job_id})
            accepted = engine.accepted(key)
            if accepted is not None:
                row["accepted"] = accepted
    return {name: lat_stats(got_rows) for name, got_rows in got.items()}


#: The ways of Rota's throughput runs, by the names Engine.pairs gives them.
SEPARATE = "rota submit -f, one sbatch each"
WAYS: dict[str, Callable[[Path, dict[str, str], Engine, int], dict[str, float]]] = {
    "rota submit -f": rota_yaml, SEPARATE: partial(rota_yaml, separate=True),
    "rota submit loop": rota_loop}


def rota_part(engine: Engine, home: Path, poll_every: float, n: int, samples: int
              ) -> dict[str, Any]:
    with rota_daemon(home, engine, poll_every) as env:
        out = {way: WAYS[way](home, env, engine, n) for way in engine.pairs}
        out["latency"] = rota_latency(home, env, engine, samples,
                                      home / f"lat-{poll_every:g}")
        return out


# --- figures -----------------------------------------------------------------------------------
def overhead(rota: dict[str, float], base: dict[str, float], n: int) -> dict[str, float]:
    """Rota's seconds beside the engine's: per job, and as a ratio; also to the engine's
    record of the last end (what Rota adds before its poller hears of the end)."""
    return {"ms_per_job": round((rota["seconds"] - base["seconds"]) / n * 1000, 1),
            "ratio": round(rota["seconds"] / base["seconds"], 2),
            "ms_per_job_to_engine_end": round(
                (rota["to_engine_end_s"] - base["seconds"]) / n * 1000, 1)}


def print_engine(name: str, res: dict[str, Any], pairs: dict[str, str]) -> None:
    n = res["jobs"]
    print(f"== {name}: {n} jobs of `true` ({'; '.join(res['notes'])}); {res['seconds']:.0f} s "
          f"in all; load average before {res['load_before']}, after {res['load_after']}")
    for label, r in res["engine"].items():
        if "jobs" in r:
            print(f"  {label:38s} {r['seconds']:7.2f} s  {r['jobs_per_s']:6.1f} jobs/s  "
                  f"(submitting {r['submit_s']:.2f} s)")
    for poll, runs in res["rota"].items():
        for way, base in pairs.items():
            r, o = runs[way], res["overhead"][poll][way]
            sub = r.get("cli_call_s", r.get("loop_s", 0.0))
            print(f"  {way + f' (poll {poll} s)':38s} {r['seconds']:7.2f} s  "
                  f"{r['jobs_per_s']:6.1f} jobs/s  (submitting {sub:.2f} s; the engine's "
                  f"end {r['to_engine_end_s']:.2f} s)\n      vs {base}: x{o['ratio']:.2f}, "
                  f"{o['ms_per_job']:+.0f} ms/job ({o['ms_per_job_to_engine_end']:+.0f} to "
                  "the engine's end)")
    print(f"  latency over {res['samples']} jobs a way, one at a time, the ways taking turns, "
          "to the job's own start (p50 / p99 ms):")
    for poll, runs in res["rota"].items():
        for label, st in runs["latency"].items():
            parts = "  ".join(f"{k} {v['p50_ms']:.0f}/{v['p99_ms']:.0f}" for k, v in st.items())
            print(f"    {label + f' (poll {poll} s run)':38s} {parts}")


def run_engine(name: str, a: argparse.Namespace, polls: list[float]) -> dict[str, Any]:
    n = a.ray_jobs if name == "ray" else a.jobs
    samples = min(a.samples, n) if name == "ray" else a.samples
    res: dict[str, Any] = {"jobs": n, "samples": samples, "load_before": loadavg()}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"rota-bench-{name}-") as tmp, \
            ENGINES[name]() as engine:
        res["notes"] = engine.notes
        res["engine"] = engine.throughput(n, Path(tmp))
        home = Path(tmp, "home")
        home.mkdir()
        res["rota"] = {f"{p:g}": rota_part(engine, home, p, n, samples) for p in polls}
        pairs = engine.pairs
    res["load_after"] = loadavg()
    res["seconds"] = round(time.monotonic() - t0, 1)
    res["overhead"] = {p: {way: overhead(runs[way], res["engine"][base], n)
                           for way, base in pairs.items()}
                       for p, runs in res["rota"].items()}
    print_engine(name, res, pairs)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100, help="jobs per way (Slurm)")
    ap.add_argument("--ray-jobs", type=int, default=10,
                    help="jobs per way and latency samples at most (Ray: ~1 job/s here)")
    ap.add_argument("--samples", type=int, default=20, help="single-job latency samples")
    ap.add_argument("--engines", default="slurm,ray")
    ap.add_argument("--poll-every", default="2,0.25",
                    help="EngineBackend poll intervals, one daemon each (2: the default)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    names = [e for e in a.engines.split(",") if e]
    unknown = sorted(set(names) - set(ENGINES))
    if unknown:
        ap.error(f"unknown engine(s) {', '.join(unknown)}; known: {', '.join(ENGINES)}")
    polls = [float(p) for p in a.poll_every.split(",")]
    t0 = time.monotonic()
    res: dict[str, Any] = {"cpus": os.cpu_count(),
                           "engines": {n: run_engine(n, a, polls) for n in names}}
    res["seconds"] = round(time.monotonic() - t0, 1)
    print(f"the whole run: {res['seconds']:.0f} s")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
