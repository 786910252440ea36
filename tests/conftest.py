"""Shared fixtures: a real daemon in a subprocess, on simulated GPUs, in a temp ROTA_HOME."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota_testing import DaemonProcess, kill_job_processes

# The suite runs as root, so its daemons can start jobs as any account, and would refuse
# the jobs of token users who have no Unix account (rota.server.access.accounts). Tests of the API's
# rights use such users; they run with every user's jobs under the daemon's account, as a
# daemon's admin may choose. tests/integration/test_multi_user.py sets it back to false.
os.environ.setdefault("ROTA_SHARED_ACCOUNT", "true")


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[type[DaemonProcess]]:
    made: list[DaemonProcess] = []

    class Factory(DaemonProcess):
        def __init__(self, simulate: str | None = "4x24G", home: Path | None = None,
                     **kw: object) -> None:
            super().__init__(home or tmp_path / "home", simulate, **kw)  # type: ignore[arg-type]
            made.append(self)

    yield Factory
    for d in made:
        d.stop()
        kill_job_processes(d.home)


@pytest.fixture
def daemon(daemon_factory: type[DaemonProcess]) -> DaemonProcess:
    return daemon_factory().start()
