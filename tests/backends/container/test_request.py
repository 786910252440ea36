"""The container's create arguments and Docker's end states, without a Docker daemon.

GPU device requests cannot be tried for real here (no NVIDIA runtime: Docker refuses to
start such a container), so what Docker is asked for is checked instead.
"""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rota.backends.base import LaunchRequest
from rota.backends.container.records import exit_of_state
from rota.backends.container.request import (
    DEFAULT_SHM_SIZE,
    ContainerDefaults,
    ContainerRequest,
    container_name,
    create_kwargs,
    spec_of,
)
from rota.errors import BackendError

if os.environ.get("ROTA_REQUIRE_DOCKER") == "1":  # CI: a missing SDK fails, never skips
    import docker  # noqa: F401
else:
    pytest.importorskip("docker")


def request(tmp: Path, **fields: object) -> ContainerRequest:
    base: dict[str, object] = dict(
        job_id=7, attempt=2, argv=["python", "train.py"], shell=False,
        env={"CUDA_VISIBLE_DEVICES": "2,3", "FOO": "bar"}, cwd=str(tmp), conda=None,
        log_path=tmp / "7.log", status_path=tmp / "status" / "7-2.status",
        session_name="rota-7-gpu2.3", image="trainer:1")
    return ContainerRequest(**{**base, **fields})  # type: ignore[arg-type]


def kwargs_of(req: LaunchRequest, defaults: ContainerDefaults = ContainerDefaults()
              ) -> dict[str, Any]:
    return create_kwargs(req, spec_of(req, defaults), user="1000:1000", network_mode="bridge")


def launch_request(tmp: Path, **fields: object) -> LaunchRequest:
    """A request as the daemon makes it: a plain LaunchRequest, no container-only fields."""
    base: dict[str, object] = dict(
        job_id=1, attempt=1, argv=["x"], shell=False, env={"CUDA_VISIBLE_DEVICES": "5"},
        cwd=None, conda=None, log_path=tmp / "l", status_path=tmp / "s", session_name="rota-1")
    return LaunchRequest(**{**base, **fields})  # type: ignore[arg-type]


def test_gpus_become_a_device_request_and_are_renumbered(tmp_path: Path) -> None:
    from docker.types import DeviceRequest

    kw = kwargs_of(request(tmp_path, gpus=(2, 3)))
    assert kw["device_requests"] == [DeviceRequest(device_ids=["2", "3"],
                                                   capabilities=[["gpu"]])]
    # the container sees only its two GPUs, as devices 0 and 1
    env = kw["environment"]
    assert (env["CUDA_VISIBLE_DEVICES"], env["FOO"]) == ("0,1", "bar")


def test_gpus_read_from_cuda_visible_devices_without_the_field(tmp_path: Path) -> None:
    spec = spec_of(launch_request(tmp_path), ContainerDefaults(image="default:1"))
    assert (spec.image, spec.gpus, spec.network) == ("default:1", (5,), False)


def test_cpu_job_has_no_device_request_and_hides_gpus(tmp_path: Path) -> None:
    kw = kwargs_of(request(tmp_path, env={"CUDA_VISIBLE_DEVICES": ""}))
    assert "device_requests" not in kw
    assert kw["environment"] == {"CUDA_VISIBLE_DEVICES": "", "TINI_KILL_PROCESS_GROUP": "1"}


def test_isolation_defaults_and_labels(tmp_path: Path) -> None:
    req = request(tmp_path, cpus=1.5, memory=2 << 30)
    kw = kwargs_of(req)
    assert (kw["read_only"], kw["network_mode"], kw["init"], kw["user"]) == \
        (True, "none", True, "1000:1000")
    assert kw["tmpfs"] == {"/tmp": "rw,nosuid,nodev,mode=1777"}
    assert (kw["nano_cpus"], kw["mem_limit"], kw["memswap_limit"]) == \
        (1_500_000_000, 2 << 30, 2 << 30)
    assert kw["working_dir"] == str(tmp_path)
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in kw["mounts"]] == \
        [(str(tmp_path), str(tmp_path), False)]
    assert kw["labels"] == {"rota.job": "7", "rota.attempt": "2",
                            "rota.status": str(req.status_path), "rota.log": str(req.log_path)}
    assert kw["command"] == ["python", "train.py"]
    assert kwargs_of(request(tmp_path, network=True))["network_mode"] == "bridge"


def test_name_is_unique_per_attempt_and_home(tmp_path: Path) -> None:
    a = request(tmp_path)
    b = request(tmp_path, status_path=tmp_path / "other" / "7-2.status")
    assert container_name(a) == container_name(request(tmp_path))
    assert container_name(a) != container_name(b)
    assert container_name(a).startswith("rota-7-2-")


def test_events_file_is_mounted_at_its_path(tmp_path: Path) -> None:
    req = request(tmp_path, env={"ROTA_EVENTS_FILE": str(tmp_path / "status" / "7-2.events")})
    req.status_path.parent.mkdir()
    mounts = kwargs_of(req)["mounts"]
    assert str(tmp_path / "status" / "7-2.events") in [m["Target"] for m in mounts]
    assert (tmp_path / "status" / "7-2.events").exists()


def test_shm_size_default_reaches_docker_and_a_request_s_own_wins(tmp_path: Path) -> None:
    # Docker's own 64 MiB /dev/shm breaks PyTorch DataLoader workers: 8 GiB unless set
    assert kwargs_of(request(tmp_path))["shm_size"] == DEFAULT_SHM_SIZE == 8 << 30
    assert kwargs_of(launch_request(tmp_path, image="t:1"),
                     ContainerDefaults(shm_size=96 << 20))["shm_size"] == 96 << 20
    assert kwargs_of(request(tmp_path, shm_size=32 << 20),
                     ContainerDefaults(shm_size=96 << 20))["shm_size"] == 32 << 20
    # none at all: Docker's default
    assert "shm_size" not in kwargs_of(request(tmp_path), ContainerDefaults(shm_size=None))


def test_cpu_and_memory_defaults_fill_what_a_job_does_not_give(tmp_path: Path) -> None:
    pool = ContainerDefaults(cpus=4, memory=16 << 30)

    def limits(req: LaunchRequest) -> tuple[object, ...]:
        kw = kwargs_of(req, pool)
        return kw.get("nano_cpus"), kw.get("mem_limit"), kw.get("memswap_limit")

    assert limits(launch_request(tmp_path, image="t:1")) == \
        (4_000_000_000, 16 << 30, 16 << 30)
    # each on its own: the job's --cpus wins, the memory is still the pool's
    assert limits(launch_request(tmp_path, image="t:1", cpus=0.5)) == \
        (500_000_000, 16 << 30, 16 << 30)
    assert limits(launch_request(tmp_path, image="t:1", memory=1 << 30)) == \
        (4_000_000_000, 1 << 30, 1 << 30)
    # no defaults: no limits, as before
    kw = kwargs_of(launch_request(tmp_path, image="t:1"))
    assert not {"nano_cpus", "mem_limit", "memswap_limit"} & kw.keys()


def test_the_local_pool_s_defaults_reach_the_backend(tmp_path: Path) -> None:
    """[pools.local] in the settings -> the daemon's container backend -> the kwargs."""
    from rota.backends.container import ContainerBackend
    from rota.config import load_settings
    from rota.server.loop.backend_set import BackendSet

    settings = load_settings(home=tmp_path, pools={"local": {
        "container_shm_size": "2G", "container_cpus": 3, "container_memory": "12G"}})
    backend = BackendSet(settings).get("container")
    assert isinstance(backend, ContainerBackend)
    kw = kwargs_of(launch_request(tmp_path, image="t:1"), backend.defaults)
    assert (kw["shm_size"], kw["nano_cpus"], kw["mem_limit"]) == \
        (2 << 30, 3_000_000_000, 12 << 30)
    # unset: the same /dev/shm as a backend made without settings, and no limits
    plain = BackendSet(load_settings(home=tmp_path / "b")).get("container")
    assert isinstance(plain, ContainerBackend)
    assert plain.defaults == ContainerDefaults() == ContainerDefaults(shm_size=8 << 30)


@pytest.mark.parametrize("fields,match", [({"image": None}, "no image"),
                                          ({"conda": "env"}, "conda"),
                                          ({"argv": []}, "empty command")])
def test_refused_requests(tmp_path: Path, fields: dict[str, object], match: str) -> None:
    with pytest.raises(BackendError, match=match):
        kwargs_of(request(tmp_path, **fields))


def test_shell_jobs_run_sh_c(tmp_path: Path) -> None:
    kw = kwargs_of(request(tmp_path, argv=["echo $1", "hi"], shell=True))
    assert kw["command"] == ["/bin/sh", "-c", "echo $1", "sh", "hi"]


@pytest.mark.parametrize("state,expected", [
    ({"ExitCode": 0}, (0, None, False)),
    ({"ExitCode": 3}, (3, None, False)),
    ({"ExitCode": 143}, (None, signal.SIGTERM, False)),
    ({"ExitCode": 137, "OOMKilled": True}, (None, signal.SIGKILL, True)),
])
def test_end_states(state: dict[str, object], expected: tuple[object, ...]) -> None:
    info = exit_of_state({**state, "FinishedAt": "2026-11-25T02:03:10.176377369Z"})
    assert (info.exit_code, info.signal, info.oom_killed) == expected
    assert info.ended_at == datetime(2026, 11, 25, 2, 3, 10, 176377, tzinfo=UTC).timestamp()


def test_a_job_run_as_another_account_gets_its_groups_and_its_events_file(
        tmp_path: Path) -> None:
    from rota.backends.base import RunAs

    me = os.getuid(), os.getgid()
    run_as = RunAs(user="alice", uid=me[0], gid=me[1], groups=(me[1], 100, 27),
                   home="/home/alice", shell="/bin/sh")
    events = tmp_path / "status" / "7-2.events"
    req = request(tmp_path, run_as=run_as, env={"ROTA_EVENTS_FILE": str(events)})
    (tmp_path / "status").mkdir()
    kw = kwargs_of(req)
    assert kw["group_add"] == ["100", "27"]  # its primary group is the user's own
    assert (events.stat().st_uid, events.stat().st_gid) == me
