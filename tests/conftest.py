"""Shared fixtures: a real daemon in a subprocess, on simulated GPUs, in a temp ROTA_HOME."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rota_testing import DaemonProcess, kill_job_processes


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
