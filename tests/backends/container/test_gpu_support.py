"""Whether container jobs can get GPUs here, asked of Docker (a fake client: no Docker
daemon is needed): a GPU job is refused at submit where it would fail at launch ("could
not select device driver with capabilities: [[gpu]]"), and on simulated GPUs it runs with
CUDA_VISIBLE_DEVICES alone, as a process does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rota.backends.base import Needs, refusal
from rota.backends.container import ContainerBackend, docker_api
from rota.backends.container.request import ContainerRequest, create_kwargs, spec_of


class FakeDocker:
    def __init__(self, runtimes: dict[str, Any]) -> None:
        self.runtimes = runtimes

    def ping(self) -> bool:
        return True

    def info(self) -> dict[str, Any]:
        return {"Runtimes": self.runtimes}


def _backend(monkeypatch: pytest.MonkeyPatch, runtimes: dict[str, Any], *,
             simulated: bool = False, hook: bool = False) -> ContainerBackend:
    monkeypatch.setattr(docker_api, "connect", lambda base_url: FakeDocker(runtimes))
    monkeypatch.setattr(docker_api.shutil, "which",
                        lambda name: "/usr/bin/" + name if hook else None)
    return ContainerBackend(simulated_gpus=simulated)


def test_without_an_nvidia_runtime_a_gpu_job_is_refused_with_the_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    b = _backend(monkeypatch, {"runc": {"path": "runc"}})
    why = refusal(b, Needs(gpus=True))
    assert why is not None and why.startswith(
        "Docker here has no NVIDIA runtime (runtimes: runc), so a container cannot get GPUs")
    assert "NVIDIA Container Toolkit" in why
    assert refusal(b, Needs(gpus=False)) is None  # CPU-only container jobs still run
    assert b.gpu_support().mode == "none"


@pytest.mark.parametrize(("runtimes", "hook"), [({"runc": {}, "nvidia": {}}, False),
                                                ({"runc": {}}, True)])
def test_with_the_nvidia_runtime_or_its_hook_gpu_jobs_are_taken(
        monkeypatch: pytest.MonkeyPatch, runtimes: dict[str, Any], hook: bool) -> None:
    b = _backend(monkeypatch, runtimes, hook=hook)
    assert refusal(b, Needs(gpus=True)) is None
    assert b.gpu_support().mode == "nvidia"


def test_on_simulated_gpus_a_container_gets_no_devices_only_the_variable(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    b = _backend(monkeypatch, {"runc": {}}, simulated=True)
    assert refusal(b, Needs(gpus=True)) is None
    assert b.gpu_support().mode == "simulated"
    req = ContainerRequest(job_id=1, attempt=1, argv=["x"], shell=False,
                           env={"CUDA_VISIBLE_DEVICES": "2,3"}, cwd=None, conda=None,
                           log_path=tmp_path / "l", status_path=tmp_path / "s",
                           session_name="rota-1", image="img:1")
    kw = create_kwargs(req, spec_of(req), user="0:0", network_mode="none", gpu_devices=False)
    assert "device_requests" not in kw
    assert kw["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_the_daemon_refuses_it_at_submit_and_says_so_in_pools(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Through the intake, as `rota submit --image IMG --gpus 1` reaches it; a daemon on
    real GPUs (here: told its GPUs are not simulated)."""
    from rota.config import load_settings
    from rota.devices.simulated import SimulatedDevices
    from rota.errors import InvalidSpec
    from rota.server.intake import Intake
    from rota.server.loop.daemon import Daemon
    from rota.store.repo import Store

    monkeypatch.setattr(docker_api, "connect", lambda base_url: FakeDocker({"runc": {}}))
    monkeypatch.setattr(docker_api.shutil, "which", lambda name: None)
    settings = load_settings(home=tmp_path / "home")
    settings.home.mkdir(parents=True)
    store = Store.open(settings.db_url)
    try:
        d = Daemon(settings, store, SimulatedDevices("2x24G"))
        assert d.backends.simulated_gpus  # what the daemon decides from its devices
        d.backends.simulated_gpus = False
        intake = Intake(d)
        with pytest.raises(InvalidSpec, match=r"^jobs\[0\]: image: Docker here has no NVIDIA "
                                              "runtime") as refused:
            intake.submit([{"command": ["true"], "image": "img:1", "gpus": 1}], user="u",
                          source="t", force=True)  # force: this daemon read no GPUs yet
        assert refused.value.field == "image"
        assert store.count_by_state() == {}
        [row] = intake.submit([{"command": ["true"], "image": "img:1", "gpus": 0}], user="u",
                              source="t")
        assert row.id in d.queue  # a CPU-only container job is taken
        containers = d.backends.containers()
        assert containers["available"] and containers["gpus"] == "none"
        assert "no NVIDIA runtime" in containers["message"]
    finally:
        store.close()
