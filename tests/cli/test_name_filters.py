"""Names on the command line are the names as shown (issue 38): a job given no name is
found by its command (`rota queue --name python`, `rota cancel --name python`), and a
sweep's base name picks the sweep's active jobs in `rota cancel A B C`, asking first."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.rota_testing import DaemonProcess, running_daemon

SLEEP = ["python", "-c", "import time; time.sleep(60)"]
SHOWN = "python -c import time; time.sleep(60)"  # its command as `rota queue` shows it


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """A daemon of this module's own: `--name python` and `cancel --yes` act on every
    active job that matches, and no other test's job may be among them."""
    with running_daemon(tmp_path_factory.mktemp("home")) as daemon:
        yield daemon


def _ids(d: DaemonProcess, *args: str) -> list[int]:
    r = d.cli("submit", "--json", "--hold", "--gpus", "0", *args)
    assert r.returncode == 0, r.stderr
    return [int(j["id"]) for j in json.loads(r.stdout)["jobs"]]


def _state(d: DaemonProcess, job: int) -> str:
    with d.client() as c:
        return str(c.job(job)["state"])


def test_a_job_given_no_name_is_found_by_its_command(d: DaemonProcess) -> None:
    [job] = _ids(d, "--", *SLEEP)
    [named] = _ids(d, "--name", "evaluate", "--", *SLEEP)  # shown as "evaluate"
    r = d.cli("queue", "--name", "python", "--json")
    assert r.returncode == 0, r.stderr
    assert [(j["id"], j["name"]) for j in json.loads(r.stdout)["jobs"]] == [(job, SHOWN)]
    r = d.cli("queue", "--name", "python")
    assert r.returncode == 0 and str(job) in r.stdout and "evaluate" not in r.stdout
    # one job named on the command line: the whole name as shown, not a part of it
    r = d.cli("show", "python")
    assert r.returncode == 1 and "no job is named 'python'" in r.stderr
    r = d.cli("show", SHOWN, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["id"] == job

    r = d.cli("cancel", "--name", "python", "--yes")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"cancelled job {job}"]
    assert _state(d, job) == "cancelled" and _state(d, named) == "held"
    d.cli("cancel", str(named))


def test_a_sweeps_base_name_picks_its_active_jobs(d: DaemonProcess) -> None:
    members = _ids(d, "--name", "train", "--sweep", "lr=0.1,0.01", "--", *SLEEP)
    [other] = _ids(d, "--name", "other", "--", "true")
    [unrelated] = _ids(d, "--name", "training", "--", "true")  # not `train[`: not picked
    assert len(members) == 2
    # asked first, as a filter does; a no leaves every job as it was, the id given too
    r = d.cli("cancel", str(other), "train", stdin="n\n")
    assert r.returncode == 1, r.stderr
    assert "cancel 2 active jobs of sweep 'train'?" in r.stderr
    assert "nothing cancelled" in r.stderr and "cancelled job" not in r.stdout
    assert {_state(d, j) for j in (*members, other)} == {"held"}

    r = d.cli("cancel", str(other), "train", "--yes")
    assert r.returncode == 0, r.stderr
    a, b = members
    assert (f"no job is named 'train': it is the base name of a sweep, and picks its 2 "
            f"active jobs: {a} train[lr=0.1] (held), {b} train[lr=0.01] (held)") in r.stderr
    assert r.stdout.splitlines() == [f"cancelled job {j}" for j in (other, *members)]
    assert {_state(d, j) for j in (*members, other)} == {"cancelled"}
    assert _state(d, unrelated) == "held"

    # the sweep has no active job left: the base name is no job's name, as before
    r = d.cli("cancel", "train", "--yes")
    assert r.returncode == 1
    assert "no job is named 'train' (`rota queue --all` lists jobs and their ids)" in r.stderr
    d.cli("cancel", str(unrelated))


def test_a_sweep_picked_in_json_and_by_other_actions(d: DaemonProcess) -> None:
    members = _ids(d, "--name", "grid", "--sweep", "k=1..2", "--", "true")
    # --json: the answers alone on stdout, what the name picked on stderr
    r = d.cli("release", "grid", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert [j["id"] for j in json.loads(r.stdout)] == members
    assert "the base name of a sweep" in r.stderr
    with d.client() as c:
        for j in members:
            assert c.wait(j, timeout=30)["state"] == "completed"


def test_a_name_no_job_has_fails_as_before(d: DaemonProcess) -> None:
    [job] = _ids(d, "--name", "kept", "--", "true")
    r = d.cli("cancel", str(job), "nosuch")
    assert r.returncode == 1
    assert "error: no job is named 'nosuch' (`rota queue --all` lists jobs and their ids)" \
        in r.stderr
    assert r.stdout.splitlines() == [f"cancelled job {job}"]  # the others are still done

