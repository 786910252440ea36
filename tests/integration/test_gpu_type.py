"""A GPU type on this machine (`rota submit --gpu-type`, `gpu_type:` in YAML): matched at
submit against the GPUs' names (any case, a part of the name), kept to by the scheduler,
refused in words that name the GPUs there are when none is of the type.

The simulated GPUs are named by their memory, "Rota simulated GPU (24 GiB)" and
"Rota simulated GPU (80 GiB)", so one machine here has two types."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota_testing import DaemonProcess, kill_job_processes, wait_until

SMALL, BIG = "Rota simulated GPU (24 GiB)", "Rota simulated GPU (80 GiB)"
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    home = tmp_path_factory.mktemp("gpu-type")
    d = DaemonProcess(home, simulate="1x24G,2x80G").start()  # GPU 0: 24 GiB; 1, 2: 80 GiB
    try:
        yield d
    finally:
        d.stop()
        kill_job_processes(home)


def shown(daemon: DaemonProcess, job: int) -> dict:  # type: ignore[type-arg]
    r = daemon.cli("show", str(job), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_a_type_no_gpu_here_is_refused_with_the_gpus_there_are(daemon: DaemonProcess) -> None:
    r = daemon.cli("submit", "--gpu-type", "A100", "--name", "refused", "--", "true")
    assert r.returncode != 0
    assert (f"gpu_type: no GPU here is of type A100 (a part of the GPU's name, any case): "
            f"this machine has 1 x {SMALL}, 2 x {BIG}") in r.stderr, r.stderr
    forced = daemon.cli("submit", "--force", "--gpu-type", "A100", "--name", "refused", "--",
                        "true")
    assert forced.returncode != 0
    assert "--force cannot queue it: a type is matched against this machine's GPUs" \
        in forced.stderr, forced.stderr
    with daemon.client() as c:
        assert c.jobs(name="refused") == []


@pytest.mark.parametrize(("args", "words"), [
    (["--gpu-type", "80", "--allowed-gpus", "0"],
     "none of its allowed GPUs {0} is of type 80: GPUs {1-2} are (2 x Rota simulated GPU "
     "(80 GiB))"),
    (["--gpu-type", "80", "--gpus", "3"],
     "needs 3 whole GPUs of type 80 but only 2 here are of that type (GPUs 1-2)"),
    (["--gpu-type", "A100 80GB"], "is not a GPU type: 1-63 letters, digits, '-', '_' and '.'"),
    (["--gpu-type", "80", "--gpus", "0"], "gpu_type '80' names a kind of GPU but gpus=0"),
])
def test_what_a_type_cannot_be_is_refused_in_words(daemon: DaemonProcess, args: list[str],
                                                    words: str) -> None:
    r = daemon.cli("submit", *args, "--", "true")
    assert r.returncode != 0 and words in r.stderr, r.stderr


def test_a_type_becomes_the_allowed_gpus_and_stays_in_the_spec(daemon: DaemonProcess,
                                                                tmp_path: Path) -> None:
    job = daemon.submit("--hold", "--gpu-type", "80", "--", "true")
    spec = shown(daemon, job)["spec"]
    assert (spec["gpu_type"], spec["allowed_gpus"]) == ("80", [1, 2])
    within = daemon.submit("--hold", "--gpu-type", "80", "--allowed-gpus", "0-1", "--", "true")
    assert shown(daemon, within)["spec"]["allowed_gpus"] == [1]
    anycase = daemon.submit("--hold", "--gpu-type", "SIMULATED", "--", "true")
    assert shown(daemon, anycase)["spec"]["allowed_gpus"] == [0, 1, 2]
    human = daemon.cli("show", str(job))
    assert human.returncode == 0 and "gpu_type" in human.stdout, human.stdout
    (tmp_path / "jobs.yaml").write_text('- command: ["true"]\n  hold: true\n  gpu_type: 24 GiB\n'
                                        '- command: ["true"]\n  hold: true\n  gpu_type: 24\n')
    bad = daemon.cli("submit", "-f", str(tmp_path / "jobs.yaml"))
    assert bad.returncode != 0 and "'24 GiB' is not a GPU type" in bad.stderr, bad.stderr
    (tmp_path / "jobs.yaml").write_text('- command: ["true"]\n  hold: true\n  gpu_type: "24"\n')
    ok = daemon.cli("submit", "-f", str(tmp_path / "jobs.yaml"), "--json")
    assert ok.returncode == 0, ok.stderr
    from_yaml = json.loads(ok.stdout)["jobs"][0]["id"]
    assert shown(daemon, from_yaml)["spec"]["allowed_gpus"] == [0]
    for j in (job, within, anycase, from_yaml):
        daemon.cli("cancel", str(j))


def test_jobs_of_a_type_run_on_gpus_of_that_type_only_and_wait_saying_so(
        daemon: DaemonProcess) -> None:
    jobs = [daemon.submit("--gpu-type", "80", "--name", f"big-{n}", "--", *SLEEP)
            for n in range(3)]
    with daemon.client() as c:
        try:
            wait_until(lambda: sum(c.job(j)["state"] == "running" for j in jobs) == 2,
                       what="two jobs running")
            running = [j for j in jobs if c.job(j)["state"] == "running"]
            assert sorted(g for j in running for g in c.job(j)["gpu_indices"]) == [1, 2]
            [waiting] = [j for j in jobs if j not in running]
            # GPU 0 is free, but it is no 80 GiB GPU
            why = wait_until(lambda: (w := c.why(waiting))["code"] != "not_scheduled" and w)
            assert why["code"] in ("resources", "priority"), why
            assert why["message"].endswith("; of type 80 here: GPUs 1-2"), why
            said = daemon.cli("why", str(waiting))
            assert said.returncode == 0 and "of type 80 here: GPUs 1-2" in said.stdout
            assert c.job(waiting)["state"] == "pending"
        finally:
            for j in jobs:
                c.cancel(j)
