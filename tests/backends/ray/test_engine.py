"""The Ray engine against a real local Ray cluster (2.60 here): a head and a second node.

Logical GPUs only (``--num-gpus``): Ray hands out CUDA_VISIBLE_DEVICES without a device.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from rota.backends.engine import EngineJob, EngineState, EngineStatus
from rota.backends.ray import RayEngine
from rota.pools import RayPool
from rota_testing import wait_until

from .conftest import GPU_TYPE, HEAD, SECRETS, WORKER, LocalRay, free_ports, wait_state

PY = sys.executable
_ids = itertools.count(int(time.time()) % 100000 * 10)

#: Traps the stop signal, says so in a marker file after ``sys.argv[2]`` seconds, exits 0.
TRAP = """
import os, pathlib, signal, sys, time
marker, delay = pathlib.Path(sys.argv[1]), float(sys.argv[2])
def stop(sig, frame):
    time.sleep(delay)
    marker.write_text(f"got {sig} rank {os.environ.get('RANK', '-')}")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def a_job(argv: tuple[str, ...], **kw: Any) -> EngineJob:
    job_id = next(_ids)
    return EngineJob(job_id=job_id, attempt=1, name=f"t{job_id}", argv=argv, **kw)


def ended(engine: RayEngine, eid: str, timeout: float = 60) -> EngineStatus:
    return cast(EngineStatus, wait_state(engine, eid, "ended", timeout))


def log_of(engine: RayEngine, eid: str) -> str:
    return engine.read_log(eid, 0).decode()


def wait_line(engine: RayEngine, eid: str, line: str, timeout: float = 60) -> str:
    """Waits for ``line`` as a whole line of the job's output. Not a substring: Ray's log
    starts with "Running entrypoint ...: COMMAND", and the command holds the same text
    before the job has even started (a stop sent then finds no handler installed)."""
    got: str = wait_until(lambda: line in (log := log_of(engine, eid)).splitlines() and log,
                          timeout, every=0.2, what=f"the line {line!r} in the log of {eid}")
    return got


def test_a_job_completes_and_one_fails(engine: RayEngine) -> None:
    ok = engine.submit(a_job((PY, "-c", "print('hello from ray')")))
    bad = engine.submit(a_job((PY, "-c", "import sys; sys.exit(3)")))
    done, failed = ended(engine, ok), ended(engine, bad)
    assert (done.exit_code, done.reason, done.signal) == (0, "SUCCEEDED", None)
    assert done.started_at and done.ended_at and done.ended_at >= done.started_at
    assert done.nodes  # the driver's node
    assert "hello from ray" in log_of(engine, ok)
    assert failed.exit_code == 3
    assert failed.reason is not None and failed.reason.startswith("FAILED")
    assert "exit code 3" in failed.reason


def test_shell_text_and_cwd(engine: RayEngine, tmp_path: Path) -> None:
    job = a_job(("echo \"in $(pwd)\" 'and; $HOME' && exit 4",), shell=True, cwd=str(tmp_path))
    st = ended(engine, engine.submit(job))
    assert st.exit_code == 4
    assert f"in {tmp_path} and; $HOME" in log_of(engine, job.key)


def test_fractional_gpu_sees_rays_assignment(engine: RayEngine) -> None:
    code = "import os; print('CVD=' + os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'))"
    a, b = (engine.submit(a_job((PY, "-c", code), gpus=0.5)) for _ in range(2))
    for eid in (a, b):
        assert ended(engine, eid).exit_code == 0
        line = next(ln for ln in log_of(engine, eid).splitlines() if ln.startswith("CVD="))
        assert line[4:].isdigit(), line  # one logical GPU index, given by Ray


def test_gpu_type_runs_where_ray_has_it(engine: RayEngine) -> None:
    eid = engine.submit(a_job((PY, "-c", "print('typed')"), gpus=1, gpu_type=GPU_TYPE))
    assert ended(engine, eid).exit_code == 0


def test_waiting_for_gpus_shows_rays_reason(engine: RayEngine) -> None:
    too_many = engine.submit(a_job((PY, "-c", "print(1)"), gpus=HEAD["gpus"] + 8))
    no_such_type = engine.submit(a_job((PY, "-c", "print(1)"), gpus=1, gpu_type="H100"))
    time.sleep(2)  # still waiting after a while, and says why in Ray's words
    for eid in (too_many, no_such_type):
        st = engine.poll([eid])[eid]
        assert st.state is EngineState.QUEUED
        assert st.reason and "waiting for resources" in st.reason, st.reason
        assert st.started_at is None


def test_stop_handshake_with_the_jobs_grace(engine: RayEngine, tmp_path: Path) -> None:
    """The job needs 4 s after SIGTERM: more than Ray's default 3 s before its SIGKILL,
    far less than the job's grace (20 s, room for a loaded 2-core machine), which the
    engine hands to Ray."""
    marker = tmp_path / "marker"
    eid = engine.submit(a_job((PY, "-c", TRAP, str(marker), "4"), grace=20))
    wait_line(engine, eid, "ready")
    engine.stop(eid, "SIGTERM", 20)
    st = ended(engine, eid, timeout=30)
    assert marker.read_text() == "got 15 rank -"
    assert st.reason and st.reason.startswith("STOPPED")


def test_stop_after_the_grace_is_a_kill(engine: RayEngine, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    eid = engine.submit(a_job((PY, "-c", TRAP, str(marker), "30"), grace=1))
    wait_line(engine, eid, "ready")
    t0 = time.monotonic()
    engine.stop(eid, "SIGTERM", 1)
    ended(engine, eid, timeout=30)
    assert time.monotonic() - t0 < 15
    assert not marker.exists()


def test_logs_from_an_offset(engine: RayEngine) -> None:
    eid = engine.submit(a_job((PY, "-c", "for i in range(200): print(f'line {i}')")))
    ended(engine, eid)
    whole = engine.read_log(eid, 0)
    assert b"line 0\n" in whole and whole.endswith(b"line 199\n")
    cut = whole.index(b"line 100")
    assert engine.read_log(eid, cut) == whole[cut:]
    assert engine.read_log(eid, len(whole)) == b""
    assert engine.read_log("rota-no-such-job", 0) == b""


def test_find_by_key_and_never_twice(engine: RayEngine, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    job = a_job((PY, "-c", f"open({str(runs)!r}, 'a').write('ran\\n')"))
    assert engine.find(job.key) is None
    eid = engine.submit(job)
    assert eid == job.key and engine.find(job.key) == eid
    assert engine.submit(job) == eid  # Ray refuses the second: the first is followed
    ended(engine, eid)
    time.sleep(1)
    assert runs.read_text() == "ran\n"
    assert engine.poll(["rota-no-such-job"])["rota-no-such-job"].state is EngineState.LOST


def test_secrets_reach_the_job_and_nothing_else(engine: RayEngine,
                                                ray_cluster: LocalRay) -> None:
    value = SECRETS["api-token"]
    code = ("import hashlib, os; "
            "print('sha=' + hashlib.sha256(os.environ['TOKEN'].encode()).hexdigest())")
    job = a_job((PY, "-c", code), secret_env={"TOKEN": "api-token"}, env={"PLAIN": "yes"})
    eid = engine.submit(job)
    assert ended(engine, eid).exit_code == 0
    assert f"sha={hashlib.sha256(value.encode()).hexdigest()}" in log_of(engine, eid)
    for path in (f"/api/jobs/{eid}", "/api/jobs/", f"/api/jobs/{eid}/logs"):
        answer = httpx.get(ray_cluster.address + path, timeout=10).text
        assert value not in answer, path
    assert value not in engine.render(job)
    assert not os.path.exists(os.path.join(engine.work_dir, "ray-secrets", f"{eid}.json"))


def test_health(engine: RayEngine) -> None:
    h = engine.health()
    assert h.reachable, h.message
    assert h.nodes == 2
    assert h.gpus_total == HEAD["gpus"] + WORKER["gpus"]
    assert h.gpus_free is not None and 0 <= h.gpus_free <= h.gpus_total
    (port,) = free_ports(1)
    gone = RayEngine(RayPool(engine="ray", address=f"http://127.0.0.1:{port}"), "/tmp",
                     timeout=2)
    down = gone.health()
    assert not down.reachable and f"127.0.0.1:{port}" in down.message


# ---------------------------------------------------------------------------- gangs


def test_gang_of_two_nodes(engine: RayEngine) -> None:
    code = ("import os; print('node', os.environ['NODE_RANK'], 'of', os.environ['NNODES'], "
            "os.environ['MASTER_ADDR'], os.environ['PET_NPROC_PER_NODE'], "
            "os.environ.get('CUDA_VISIBLE_DEVICES'))")
    eid = engine.submit(a_job((PY, "-c", code), nodes=2, gpus=1, cpus=1))
    st = ended(engine, eid, timeout=90)
    log = log_of(engine, eid)
    assert st.exit_code == 0, log
    for rank in (0, 1):
        assert f"[rank {rank}] node {rank} of 2 " in log, log
    assert "exit codes by rank: [0, 0]" in log


ALL_REDUCE = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")  # env://: MASTER_ADDR/PORT, RANK, WORLD_SIZE
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()}/{dist.get_world_size()} sum={t.item():g}", flush=True)
    dist.destroy_process_group()
""")


def test_gang_all_reduce_over_gloo(engine: RayEngine) -> None:
    if os.environ.get("ROTA_REQUIRE_TORCH"):  # CI: a missing torch fails, never skips
        import torch  # noqa: F401
    else:
        pytest.importorskip("torch")
    eid = engine.submit(a_job((PY, "-c", ALL_REDUCE), nodes=2, cpus=1))
    st = ended(engine, eid, timeout=120)
    log = log_of(engine, eid)
    assert st.exit_code == 0, log
    assert "[rank 0] rank 0/2 sum=3" in log and "[rank 1] rank 1/2 sum=3" in log, log


def test_gang_stop_reaches_every_rank(engine: RayEngine, tmp_path: Path) -> None:
    eid = engine.submit(a_job((PY, "-c", TRAP, str(tmp_path / "m"), "0"), nodes=2,
                              grace=5, cpus=1))
    wait_until(lambda: log_of(engine, eid).count("] ready") == 2, 90, every=0.3,
               what="both ranks to be ready")
    engine.stop(eid, "SIGTERM", 5)
    ended(engine, eid, timeout=40)
    log = log_of(engine, eid)
    assert "stop signal: SIGTERM to every rank" in log, log
    assert "exit codes by rank: [0, 0]" in log, log


def test_gang_exit_is_the_worst_ranks(engine: RayEngine) -> None:
    code = ("import os, sys, time\n"
            "if os.environ['NODE_RANK'] == '1': sys.exit(3)\n"
            "time.sleep(60)")
    eid = engine.submit(a_job((PY, "-c", code), nodes=2, cpus=1, grace=2))
    st = ended(engine, eid, timeout=60)
    log = log_of(engine, eid)
    assert st.exit_code == 3, log  # rank 1's, not rank 0's SIGTERM that followed it
    assert "a rank failed: SIGTERM to every rank" in log
