"""The Slurm engine's job arrays and Slurm's own ends against the private Slurm: a 3-task
array (each task's exit code and log, a stop of one task leaving the others, found again
by the group's key, read from the completion log once the controller forgot it), and a
job whose node goes down ending as taken back (NODE_FAIL)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from rota.backends.engine import EngineJob, EngineState, EngineStatus
from rota.backends.slurm import SlurmEngine, parse
from rota_testing import wait_until

from .conftest import PrivateSlurm

_ids = iter(range(5000, 100000))


def points(*argvs: tuple[str, ...], **kw: Any) -> list[EngineJob]:
    out = []
    for argv in argvs:
        job_id = next(_ids)
        out.append(EngineJob(job_id=job_id, attempt=1, name=f"p{job_id}", argv=argv,
                             env={"ROTA_JOB_ID": str(job_id), "ROTA_ATTEMPT": "1"}, **kw))
    return out


def wait_state(engine: SlurmEngine, eid: str, state: EngineState,
               timeout: float = 30) -> EngineStatus:
    got: EngineStatus = wait_until(
        lambda: (st := engine.poll([eid])[eid]).state is state and st, timeout, every=0.1,
        what=f"slurm job {eid} to be {state}")
    return got


def squeue(slurm: PrivateSlurm, *args: str) -> str:
    return subprocess.run(["squeue", "-h", "-t", "all", "-r", *args], env=slurm.env,
                          capture_output=True, text=True, check=True, timeout=30).stdout


def test_an_array_runs_each_task_with_its_own_exit_code_log_and_stop(
        engine: SlurmEngine, slurm: PrivateSlurm) -> None:
    jobs = points(("sh", "-c", 'echo "zero $ROTA_JOB_ID"'),
                  ("sh", "-c", "echo one; sleep 4; exit 3"),
                  ("sh", "-c", "echo two; exec sleep 60"))
    key = f"{jobs[0].key}-array"
    ids = engine.submit_array(jobs, key)
    array = ids[0].split("_")[0]
    assert ids == [f"{array}_{i}" for i in range(3)]
    assert engine.find_array(key, 3) == ids  # one sbatch, found again by the group's key
    running = wait_state(engine, ids[2], EngineState.RUNNING)
    assert running.started_at and running.nodes
    assert wait_until(lambda: engine.read_log(ids[2], 0), 10, what="its log") == b"two\n"
    engine.stop(ids[2], "SIGTERM", 0)  # one task stopped: the others go on
    stopped = wait_state(engine, ids[2], EngineState.ENDED)
    assert stopped.exit_code is None and not stopped.preempted, stopped
    assert engine.poll([ids[1]])[ids[1]].state is EngineState.RUNNING
    first, second = (wait_state(engine, eid, EngineState.ENDED) for eid in ids[:2])
    assert (first.exit_code, first.reason) == (0, "COMPLETED")
    assert second.exit_code == 3 and (second.reason or "").startswith("FAILED")
    assert engine.read_log(ids[0], 0) == f"zero {jobs[0].job_id}\n".encode()
    assert engine.read_log(ids[1], 0) == b"one\n"
    # once the controller forgets the tasks (MinJobAge=2), the completion log knows them
    wait_until(lambda: not squeue(slurm, f"--name={key}", "-o", "%i").strip(), 30,
               every=0.3, what="the controller to purge the array")
    ended = engine.poll(ids)
    assert [ended[i].exit_code for i in ids] == [0, 3, None]
    assert [ended[i].state for i in ids] == [EngineState.ENDED] * 3
    assert engine.find_array(key, 3) == ids


def test_stopping_one_queued_task_leaves_the_others(engine: SlurmEngine) -> None:
    jobs = points(("sleep", "30"), ("sleep", "30"), gpus=2, nodes=1)
    blocker = engine.submit(points(("sleep", "30"), gpus=2, nodes=1)[0])
    other = engine.submit(points(("sleep", "30"), gpus=2, nodes=1)[0])
    wait_state(engine, blocker, EngineState.RUNNING)
    wait_state(engine, other, EngineState.RUNNING)  # every GPU of both nodes is taken
    ids = engine.submit_array(jobs, f"{jobs[0].key}-array")
    assert all(st.state is EngineState.QUEUED for st in engine.poll(ids).values())
    engine.stop(ids[0], "SIGTERM", 5)  # queued: cancelled at once, alone
    # a task cancelled before it had a job of its own leaves no record at all in Slurm
    wait_state(engine, ids[0], EngineState.LOST)
    assert engine.poll([ids[1]])[ids[1]].state is EngineState.QUEUED
    engine.stop(ids[1], "SIGKILL", 0)
    wait_state(engine, ids[1], EngineState.LOST)
    for eid in (blocker, other):
        engine.stop(eid, "SIGKILL", 0)
        wait_state(engine, eid, EngineState.ENDED)


@pytest.fixture
def second_node(slurm: PrivateSlurm) -> Iterator[str]:
    """The second node, up again after the test (it is marked down in it)."""
    node = slurm.node_names[1]
    yield node
    # refused when not down (ReturnToService=2 brings a node back once its slurmd registers)
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=slurm.env,
                   capture_output=True, check=False, timeout=30)
    wait_until(lambda: "idle" in subprocess.run(
        ["sinfo", "-h", "-N", "-n", node, "-o", "%T"], env=slurm.env, capture_output=True,
        text=True, check=False).stdout, 30, every=0.3, what=f"{node} idle again")


def test_a_job_whose_node_goes_down_is_taken_back_not_requeued_by_slurm(
        engine: SlurmEngine, slurm: PrivateSlurm, second_node: str) -> None:
    job = points(("sleep", "60"))[0]
    engine.pool = engine.pool.model_copy(update={"sbatch_args": [f"--nodelist={second_node}"]})
    try:
        eid = engine.submit(job)
    finally:
        engine.pool = engine.pool.model_copy(update={"sbatch_args": []})
    wait_state(engine, eid, EngineState.RUNNING)
    subprocess.run(["scontrol", "update", f"nodename={second_node}", "state=down",
                    "reason=rota-test"], env=slurm.env, check=True, timeout=30)
    st = wait_state(engine, eid, EngineState.ENDED)
    assert st.preempted and st.reason is not None and st.reason.startswith("NODE_FAIL")
    assert st.exit_code is None  # never a success
    assert {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"} <= parse.TAKEN_BACK_STATES
