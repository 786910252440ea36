"""The environment the launcher gives a job on this machine: ``ROTA_IMAGE`` for a job that
runs in an image (a Kubernetes pod's, which the pool may give, comes from its renderer:
tests/backends/kubernetes/test_render.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from rota.backends.base import Capabilities
from rota.core.snapshot import PendingJob
from rota.core.spec import JobSpec
from rota.server.jobs.running import Running
from rota.server.loop.launcher import Launcher


def launch_env(tmp_path: Path, **spec: Any) -> dict[str, str]:
    launcher = Launcher.__new__(Launcher)  # only what _request reads
    launcher.settings = cast(Any, SimpleNamespace(  # the job is its owner's: no run-as
        user="", pool_set=SimpleNamespace(get=lambda name: ("local", None))))
    launcher.tracking = cast(Any, SimpleNamespace(launch_env=lambda **kw: {}))
    launcher.home_tag = "abc123"
    launcher.workspaces = None  # (tests/integration/test_workspaces.py has them)
    launcher.datasets = None  # (tests/integration/test_datasets.py has them)
    backend = SimpleNamespace(name="container", capabilities=Capabilities())
    run = Running(job_id=7, attempt_id=1, attempt_no=1,
                  spec=JobSpec(command=["python", "eval.py"], **spec), gpus=(0,), milli=1000,
                  gpu_mem=None, backend=cast(Any, backend), started_at=0.0,
                  pending=PendingJob(id=7, priority=0, seq=1, gpus_milli=1000), failures=0,
                  log_path=tmp_path / "7.log", status_path=tmp_path / "7-1.status")
    return launcher._request(run).env


def test_a_job_in_an_image_is_told_its_image(tmp_path: Path) -> None:
    env = launch_env(tmp_path, image="ghcr.io/lab/evals:2", session="none")
    assert env["ROTA_IMAGE"] == "ghcr.io/lab/evals:2"
    assert env["ROTA_JOB_ID"] == "7" and env["ROTA_POOL"] == "local"


def test_a_job_without_an_image_gets_none(tmp_path: Path) -> None:
    assert "ROTA_IMAGE" not in launch_env(tmp_path)
