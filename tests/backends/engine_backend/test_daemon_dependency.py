"""`--after` on a Slurm pool through the whole daemon: a job whose parent is in flight on the
same pool is handed to Slurm at once with `--dependency=afterok:ID`, Slurm starts it right
after the parent, and when Slurm drops it because the parent did not complete (a failure, or
a retry: a new Slurm job) it goes back to Rota's queue without a failure counted. Against
the private Slurm of tests/backends/slurm."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.baselines.slurm import PrivateSlurm

from rota_testing import DaemonProcess, wait_until

from .daemon_slurm import daemon_over, job_view, wait_end

# hpc2: the same cluster as another pool, whose jobs Rota holds a child of hpc for
TOML = """
[pools.hpc]
engine = "slurm"
shared_workspaces = true
slurm_conf = "{conf}"
max_in_flight = 8

[pools.hpc2]
engine = "slurm"
shared_workspaces = true
slurm_conf = "{conf}"
max_in_flight = 8
"""
#: the job's clock at the moment, as a line of its own (the gap is read from the logs)
STAMP = "echo {word} $(date +%s.%N)"


@pytest.fixture(scope="module")
def daemon(slurm: PrivateSlurm, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[DaemonProcess]:
    with daemon_over(slurm, tmp_path_factory.mktemp("dependency"), TOML) as d:
        yield d


def _handed(d: DaemonProcess, job_id: int) -> str:
    """Its Slurm id, once Slurm has it."""
    found: list[str] = []

    def known() -> bool:
        engine = job_view(d, job_id).get("engine") or {}
        if engine.get("id"):
            found.append(str(engine["id"]))
        return bool(found)
    wait_until(known, 30, every=0.1, what=f"job {job_id} handed to Slurm")
    return found[-1]


def _stamp(d: DaemonProcess, job_id: int, word: str) -> list[float]:
    lines = d.cli("logs", str(job_id)).stdout.splitlines()
    return [float(line.split()[1]) for line in lines if line.startswith(f"{word} ")]


def _gap(d: DaemonProcess, parent: int, child: int) -> float:
    [end] = _stamp(d, parent, "END")[-1:]
    [start] = _stamp(d, child, "START")
    return start - end


def _sleeper(seconds: float) -> list[str]:
    return ["--", "sh", "-c", f"sleep {seconds}; {STAMP.format(word='END')}"]


def _gated(gate: Path) -> list[str]:
    """A parent that runs until ``gate`` exists (at most 5 minutes): the test decides when
    it ends, however slow the machine (a fixed sleep ended before a loaded CI's checks)."""
    wait = f"i=0; while [ ! -e {gate} ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i+1)); done"
    return ["--", "sh", "-c", f"{wait}; {STAMP.format(word='END')}"]


def _chain(d: DaemonProcess, cwd: Path, parent: list[str], pool: str = "hpc",
           ) -> tuple[int, str, int]:
    """A parent on ``pool`` (its Slurm id once handed over), then a child on hpc after it
    that stamps its start."""
    parent_job = d.submit("--pool", pool, "--gpus", "0", *parent, cwd=cwd)
    slurm_id = _handed(d, parent_job)
    child = d.submit("--pool", "hpc", "--gpus", "0", "--after", str(parent_job), "--", "sh",
                     "-c", STAMP.format(word="START"), cwd=cwd)
    return parent_job, slurm_id, child


def test_a_child_waits_in_slurm_for_its_running_parent_and_starts_right_after_it(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    gate = tmp_path / "parent-may-end"
    parent, parent_id, child = _chain(daemon, tmp_path, _gated(gate))
    child_id = _handed(daemon, child)
    assert job_view(daemon, parent)["state"] in ("starting", "running")  # still in flight
    wait_until(lambda: "Dependency" in daemon.cli("why", str(child)).stdout, 30, every=0.2,
               what="Slurm's reason for holding the child")
    why = daemon.cli("why", str(child)).stdout
    assert f"handed to slurm:hpc as job {child_id}" in why, why
    assert f"Dependency (it starts once Slurm job {parent_id} has completed)" in why, why
    assert job_view(daemon, child)["state"] == "starting"
    rendered = daemon.cli("render", str(child), "--pool", "hpc").stdout  # its next attempt
    assert f"--dependency=afterok:{parent_id}" in rendered, rendered
    gate.touch()
    done = wait_end(daemon, child)
    assert (done["state"], done["exit_code"]) == ("completed", 0), done
    assert wait_end(daemon, parent)["state"] == "completed"
    gap = _gap(daemon, parent, child)
    print(f"\nparent's end to child's start, Slurm holding the child: {gap:.2f}s")
    assert 0 < gap < 30


def test_a_parent_on_another_pool_is_waited_for_by_rota_as_before(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    parent, _, child = _chain(daemon, tmp_path, _sleeper(4), pool="hpc2")
    wait_until(lambda: f"waits for job {parent}" in daemon.cli("why", str(child)).stdout, 30,
               what="Rota holding the child")
    assert job_view(daemon, child)["state"] == "pending"
    done = wait_end(daemon, child)
    assert (done["state"], done["exit_code"]) == ("completed", 0), done
    gap = _gap(daemon, parent, child)
    print(f"\nparent's end to child's start, Rota holding the child: {gap:.2f}s")
    assert gap > 0


def test_a_failed_parent_leaves_the_child_unstarted_and_without_a_failure(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    parent, _, child = _chain(daemon, tmp_path, ["--", "sh", "-c", "sleep 3; exit 3"])
    _handed(daemon, child)
    assert wait_end(daemon, parent)["state"] == "failed"
    done = wait_end(daemon, child)
    why = daemon.cli("why", str(child)).stdout
    # a failure counted would have failed it (no retries): it is cancelled as it never can
    assert done["state"] == "cancelled" and "can never start" in why, (done, why)
    [attempt] = done["attempts_detail"]
    assert attempt["outcome"] == "not_started", attempt
    assert "DependencyNeverSatisfied" in attempt["reason"], attempt
    assert _stamp(daemon, child, "START") == []  # it never ran


def test_a_retried_parent_gets_its_child_handed_again_with_the_new_id(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    script = ('sleep 2; if [ "$ROTA_ATTEMPT" = 1 ]; then exit 3; fi; '
              + STAMP.format(word="END"))
    parent, _, child = _chain(daemon, tmp_path, ["--retries", "1", "--retry-backoff", "1s",
                                                 "--", "sh", "-c", script])
    _handed(daemon, child)
    done = wait_end(daemon, child, timeout=90)
    assert (done["state"], done["exit_code"]) == ("completed", 0), done  # no retries: none failed
    outcomes = [a["outcome"] for a in done["attempts_detail"]]
    assert outcomes[0] == "not_started" and outcomes[-1] == "completed", done
    retried = wait_end(daemon, parent)
    assert (retried["state"], len(retried["attempts_detail"])) == ("completed", 2), retried
    assert retried["attempts_detail"][0]["exit_code"] == 3, retried
    assert _gap(daemon, parent, child) > 0  # after the second attempt, not the first


def test_a_child_held_by_slurm_across_a_daemon_sigkill_ends_right(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    parent, _, child = _chain(daemon, tmp_path, _sleeper(5))
    _handed(daemon, child)
    daemon.kill()
    daemon.start()
    done = wait_end(daemon, child)
    assert (done["state"], done["exit_code"]) == ("completed", 0), done
    assert [a["outcome"] for a in done["attempts_detail"]] == ["completed"], done
    assert wait_end(daemon, parent)["state"] == "completed"
    assert len(_stamp(daemon, child, "START")) == 1
    assert _gap(daemon, parent, child) > 0
