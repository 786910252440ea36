"""The Slurm engine against a real, private Slurm (22.05 here): two slurmd on this host.

The time-limit job is submitted first (module fixture) and checked last: Slurm checks time
limits every 30 s, so its warning signal comes within about half a minute.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota.backends.engine import EngineJob, EngineState, EngineStatus
from rota.backends.slurm import SlurmEngine
from rota.errors import BackendError
from rota.pools import SlurmPool
from rota_testing import unix_accounts, wait_until

from .conftest import SECRETS, PrivateSlurm

PY = sys.executable
_ids = iter(range(1000, 100000))

#: A job that traps the stop signal, says so in a marker file and exits 0.
TRAP = """
import pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1])
def stop(sig, frame):
    marker.write_text(f"got {sig}")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def a_job(argv: tuple[str, ...], **kw: Any) -> EngineJob:
    job_id = next(_ids)
    return EngineJob(job_id=job_id, attempt=1, name=f"t{job_id}", argv=argv, **kw)


def wait_ended(engine: SlurmEngine, eid: str, timeout: float = 30) -> EngineStatus:
    def ended() -> EngineStatus | None:
        st = engine.poll([eid])[eid]
        return st if st.state is EngineState.ENDED else None
    got: EngineStatus = wait_until(ended, timeout, every=0.1, what=f"slurm job {eid} to end")
    return got


def wait_running(engine: SlurmEngine, eid: str, timeout: float = 20) -> EngineStatus:
    got: EngineStatus = wait_until(
        lambda: (st := engine.poll([eid])[eid]).state is EngineState.RUNNING and st,
        timeout, every=0.1, what=f"slurm job {eid} to run")
    return got


def slurm_cmd(slurm: PrivateSlurm, *argv: str) -> str:
    return subprocess.run(argv, env=slurm.env, capture_output=True, text=True, check=True,
                          timeout=30).stdout


@pytest.fixture(scope="module")
def time_limit_job(engine: SlurmEngine, tmp_path_factory: pytest.TempPathFactory
                   ) -> tuple[str, Path, float]:
    """A 1-minute job with a 55 s grace: its stop signal comes at Slurm's next time check."""
    marker = tmp_path_factory.mktemp("tl") / "marker"
    job = a_job((PY, "-c", TRAP, str(marker)), time_limit=60, grace=55)
    return engine.submit(job), marker, time.monotonic()


@pytest.fixture(autouse=True)
def _time_limit_first(time_limit_job: tuple[str, Path, float]) -> Iterator[None]:
    yield


def test_health_reports_nodes_and_gpus(engine: SlurmEngine) -> None:
    h = engine.health()
    assert h.reachable and h.nodes == 2 and h.gpus_total == 4
    broken = SlurmEngine(SlurmPool(engine="slurm", bin_dir="/nonexistent"), "/tmp")
    down = broken.health()
    assert not down.reachable and "sinfo not found in /nonexistent" in down.message


def test_a_job_runs_ends_with_its_exit_code_and_its_log_is_read(engine: SlurmEngine) -> None:
    ok = engine.submit(a_job(("sh", "-c", "echo out; echo err >&2"), cpus=1))
    bad = engine.submit(a_job(("sh", "-c", "echo failing; exit 3"), shell=False))
    for eid, code, reason in ((ok, 0, "COMPLETED"), (bad, 3, "FAILED")):
        st = wait_ended(engine, eid)
        assert (st.exit_code, st.signal) == (code, None)
        assert st.reason is not None and st.reason.startswith(reason)
        assert st.started_at and st.ended_at and st.ended_at >= st.started_at
        assert abs(st.ended_at - time.time()) < 120 and st.nodes
    log = wait_until(lambda: engine.read_log(ok, 0), 5, what="the log")
    assert log == b"out\nerr\n"  # stdout and stderr in one file
    assert engine.read_log(ok, 4) == b"err\n" and engine.read_log(ok, 8) == b""
    assert engine.read_log("424242", 0) == b""


def test_a_job_the_cluster_cannot_run_now_waits_with_slurms_reason(engine: SlurmEngine
                                                                    ) -> None:
    holder = engine.submit(a_job(("sleep", "30"), gpus=1))
    wait_running(engine, holder)
    assert engine.health().gpus_free == 3
    waiter = engine.submit(a_job(("true",), gpus=2, nodes=2))  # every GPU of both nodes
    st = wait_until(lambda: engine.poll([waiter])[waiter].reason, 10, what="a reason")
    assert engine.poll([waiter])[waiter].state is EngineState.QUEUED
    assert st == "Resources"
    engine.stop(waiter, "SIGTERM", 5)  # still queued: cancelled at once
    engine.stop(holder, "SIGTERM", 5)
    assert (wait_ended(engine, waiter).reason or "").startswith("CANCELLED")
    assert wait_ended(engine, holder).signal is not None  # sleep dies of SIGTERM


def test_sbatch_errors_are_backend_errors_in_slurms_words(engine: SlurmEngine) -> None:
    with pytest.raises(BackendError, match="Requested node configuration is not available"):
        engine.submit(a_job(("true",), gpus=3))  # no node has 3 GPUs
    with pytest.raises(BackendError, match="cannot reserve GPU memory"):
        engine.submit(a_job(("true",), gpus=1, gpu_mem=1 << 30))


def test_stop_handshake_signal_then_the_job_exits_within_grace(engine: SlurmEngine,
                                                               tmp_path: Path) -> None:
    marker = tmp_path / "stopped"
    eid = engine.submit(a_job((PY, "-c", TRAP, str(marker))))
    wait_until(lambda: b"ready" in engine.read_log(eid, 0), 20, what="the job to be ready")
    began = time.monotonic()
    engine.stop(eid, "SIGTERM", 20)
    st = wait_ended(engine, eid)
    assert marker.read_text() == "got 15"
    assert (st.exit_code, st.reason) == (0, "COMPLETED")
    assert time.monotonic() - began < 10  # it left on the signal, not on the kill


def test_stop_kills_a_job_that_ignores_the_signal_after_grace(engine: SlurmEngine) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
               "print('ready', flush=True); time.sleep(60)"
    eid = engine.submit(a_job((PY, "-c", stubborn)))
    wait_until(lambda: b"ready" in engine.read_log(eid, 0), 20, what="the job to be ready")
    began = time.monotonic()
    engine.stop(eid, "SIGTERM", 1.0)
    assert time.monotonic() - began < 1.0  # the kill waits in a timer, not in stop()
    st = wait_ended(engine, eid)
    assert st.reason is not None and st.reason.startswith("CANCELLED")
    assert st.exit_code is None  # never reads as a success
    assert 1.0 <= time.monotonic() - began < 15  # grace, then KillWait=2 and Slurm's rounds


def test_find_by_key_after_losing_the_id_and_never_twice(engine: SlurmEngine,
                                                         slurm: PrivateSlurm) -> None:
    job = a_job(("true",))
    assert engine.find(job.key) is None
    first = engine.find(job.key) or engine.submit(job)
    again = engine.find(job.key) or engine.submit(job)  # a restarted daemon asks first
    assert again == first
    listed = slurm_cmd(slurm, "squeue", "-h", "-t", "all", f"--name={job.key}", "-o", "%i")
    assert listed.split() == [first]
    wait_ended(engine, first)
    # once the controller forgets it (MinJobAge=2), the completion log still knows it
    wait_until(lambda: not slurm_cmd(slurm, "squeue", "-h", "-t", "all", "-o", "%i",
                                     f"--name={job.key}").strip(), 30, every=0.3,
               what="the controller to purge the job")
    assert engine.find(job.key) == first
    st = engine.poll([first, "999999"])
    assert st[first].state is EngineState.ENDED and st[first].exit_code == 0
    assert st["999999"].state is EngineState.LOST


def test_secrets_reach_the_job_and_nothing_else(engine: SlurmEngine, slurm: PrivateSlurm,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    value = SECRETS["api-token"]
    calls: list[str] = []
    real = engine._run

    def spy(prog: str, args: list[str], **kw: Any) -> str:
        calls.append(repr((prog, args, kw.get("stdin"))))
        return real(prog, args, **kw)

    monkeypatch.setattr(engine, "_run", spy)
    digest = "import hashlib, os, time; print(hashlib.sha256(os.environ['TOKEN'].encode())" \
             ".hexdigest(), os.environ['PLAIN'], flush=True); time.sleep(3)"
    job = a_job((PY, "-c", digest), env={"PLAIN": "a,b c=d"}, secret_env={"TOKEN": "api-token"})
    eid = engine.submit(job)
    wait_running(engine, eid)
    shown = slurm_cmd(slurm, "scontrol", "show", "job", "-d", eid)
    stored = slurm_cmd(slurm, "scontrol", "write", "batch_script", eid, "-")
    assert "exec" in stored and eid in shown
    wait_ended(engine, eid)
    want = hashlib.sha256(value.encode()).hexdigest()
    assert engine.read_log(eid, 0).decode().split() == [want, "a,b", "c=d"]
    for text in (*calls, shown, stored, engine.render(job)):
        assert value not in text


def test_a_two_node_job_runs_a_task_on_each_node(engine: SlurmEngine) -> None:
    eid = engine.submit(a_job(("echo node=$SLURMD_NODENAME id=$SLURM_NODEID "
                               "master=$MASTER_ADDR:$MASTER_PORT nproc=$PET_NPROC_PER_NODE",),
                              shell=True, nodes=2, procs_per_node=2))
    st = wait_ended(engine, eid)
    assert st.exit_code == 0 and st.nodes == ("rotabench", "rotabench2")
    lines = sorted(engine.read_log(eid, 0).decode().split("\n")[:2])
    port = 20000 + int(eid) % 20000
    # --procs-per-node reaches torchrun on every node (a world of 2 x 2, as on Ray)
    assert lines == [f"node=rotabench id=0 master=rotabench:{port} nproc=2",
                     f"node=rotabench2 id=1 master=rotabench:{port} nproc=2"]


def test_a_two_node_stop_reaches_every_rank(engine: SlurmEngine, tmp_path: Path) -> None:
    marker = str(tmp_path / "stopped-$SLURM_NODEID")
    cmd = f'exec {PY} -c "$1" "{marker}"'
    eid = engine.submit(a_job((cmd, TRAP), shell=True, nodes=2))
    wait_until(lambda: engine.read_log(eid, 0).count(b"ready") == 2, 20, what="both ranks")
    engine.stop(eid, "SIGTERM", 20)
    st = wait_ended(engine, eid)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stopped-0", "stopped-1"]
    assert (st.exit_code, st.reason) == (0, "COMPLETED")


def test_time_limit_signal_comes_before_the_kill(engine: SlurmEngine,
                                                 time_limit_job: tuple[str, Path, float]
                                                 ) -> None:
    eid, marker, submitted = time_limit_job
    st = wait_ended(engine, eid, timeout=max(5.0, 50 - (time.monotonic() - submitted)))
    assert marker.read_text() == "got 15"
    assert (st.exit_code, st.reason) == (0, "COMPLETED")  # it left in its grace
    assert time.monotonic() - submitted < 55  # before the 1-minute limit


CAROL = "rtu-carol"
WHO = 'echo "user=$(id -un) uid=$(id -u) home=$HOME pwd=$(pwd) leak=${ROTA_DAEMON_ONLY:-none}"'


def test_a_job_run_as_its_owner_is_submitted_and_runs_as_that_account(
        engine: SlurmEngine, slurm: PrivateSlurm, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """A root daemon's job of carol: sbatch as carol, so Slurm runs it as carol, with a
    login's environment (nothing of the daemon's), in her home, its output in her folder."""
    if os.geteuid() != 0:
        pytest.skip("a job as another account needs a root daemon")
    monkeypatch.setitem(engine._env, "ROTA_DAEMON_ONLY", "leaked")
    with unix_accounts(CAROL) as uids:
        job = a_job(("sh", "-c", WHO), run_as=CAROL, env={"PLAIN": "x"})
        eid = engine.submit(job)
        st = wait_ended(engine, eid)
        assert st.exit_code == 0
        log = wait_until(lambda: engine.read_log(eid, 0), 5, what="the log").decode()
        assert log.strip() == (f"user={CAROL} uid={uids[CAROL]} home=/home/{CAROL} "
                               f"pwd=/home/{CAROL} leak=none"), log
        folder = Path(engine.work_dir, "logs", CAROL)
        assert folder.stat().st_uid == uids[CAROL] and folder.stat().st_mode & 0o777 == 0o700
        assert (folder / f"{eid}.log").stat().st_uid == uids[CAROL]
        assert engine.find(job.key) == eid  # a root daemon finds its owners' jobs too
        # carol owns her folder: a link there (or a file not hers) is never read by root
        (folder / f"{eid}.log").unlink()
        (folder / f"{eid}.log").symlink_to("/etc/shadow")
        with pytest.raises(BackendError, match="Too many levels of symbolic links"):
            engine.read_log(eid, 0)
        (folder / f"{eid}.log").unlink()
        (folder / f"{eid}.log").write_text("root's\n")
        with pytest.raises(BackendError, match="is not its owner's file; not read"):
            engine.read_log(eid, 0)
        # an output folder the account cannot reach is said before sbatch, not as a signal
        closed = tmp_path / "closed"
        closed.mkdir(mode=0o700)
        elsewhere = SlurmEngine(engine.pool, str(closed / "rota"))
        with pytest.raises(BackendError, match=re.escape(
                f"{CAROL} cannot reach this pool's output folder {closed}/rota/logs/{CAROL}: ")
                + ".* is closed to other accounts"):
            elsewhere.submit(a_job(("true",), run_as=CAROL))
        shown = slurm_cmd(slurm, "sacct", "-c", "-X", "-n", "-P", "-o", "User", "-j", eid)
        assert shown.split() == [f"{CAROL}({uids[CAROL]})"], shown  # the completion log's


def test_the_suite_leaves_no_job_behind(engine: SlurmEngine, slurm: PrivateSlurm) -> None:
    left = slurm_cmd(slurm, "squeue", "-h", "-o", "%i %T %j")
    assert left.strip() == "", left
    assert os.path.isdir(os.path.join(engine.work_dir, "logs"))


DDP = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print(f"rank {dist.get_rank()}/{dist.get_world_size()} sum {t.item():g}", flush=True)
dist.destroy_process_group()
"""


def test_torchrun_across_two_nodes_on_gloo(engine: SlurmEngine, tmp_path: Path) -> None:
    if os.environ.get("ROTA_REQUIRE_TORCH") != "1":
        pytest.importorskip("torch")
    (tmp_path / "ddp.py").write_text(DDP)
    cmd = (f'exec {PY} -m torch.distributed.run --nnodes=2 --nproc-per-node=1 '
           '--rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" '
           '--rdzv-id="$SLURM_JOB_ID" ddp.py')
    # the node names here (rotabench, rotabench2) resolve to nothing: both run on 127.0.0.1
    eid = engine.submit(a_job((cmd,), shell=True, nodes=2, cwd=str(tmp_path),
                              env={"MASTER_ADDR": "127.0.0.1"}))
    st = wait_ended(engine, eid, timeout=60)
    lines = sorted(ln for ln in engine.read_log(eid, 0).decode().splitlines()
                   if ln.startswith("rank"))
    assert lines == ["rank 0/2 sum 3", "rank 1/2 sum 3"], engine.read_log(eid, 0)[-2000:]
    assert st.exit_code == 0



def test_a_two_node_job_ends_with_its_failed_ranks_own_code(engine: SlurmEngine) -> None:
    # rank 1 exits 3; srun then kills rank 0 (143, the code Slurm records as the highest):
    # the job's code is the failed rank's, as Ray reports it
    eid = engine.submit(a_job(('if [ "$SLURM_NODEID" = 1 ]; then sleep 1; exit 3; fi; '
                               'trap "exit 143" TERM; sleep 30 & wait',),
                              shell=True, nodes=2))
    st = wait_ended(engine, eid, timeout=60)
    assert (st.exit_code, st.signal) == (3, None), st
    assert st.reason is not None and st.reason.startswith("FAILED")
