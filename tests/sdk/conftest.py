"""Fixtures for the SDK tests: one real daemon on simulated GPUs, on its socket and on TCP."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator

import pytest
from sdk_helpers import Sdk

import rota
from rota_testing import DaemonProcess, kill_job_processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sdk]:
    port = free_port()
    home = tmp_path_factory.mktemp("sdk-home")
    d = DaemonProcess(home, args=["--listen", f"127.0.0.1:{port}"])
    d.env.pop("ROTA_DATABASE_URL", None)
    d.start(timeout=60)
    try:
        yield Sdk(d, f"http://127.0.0.1:{port}")
    finally:
        d.stop()
        kill_job_processes(home)


@pytest.fixture(autouse=True)
def _no_ambient_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests say which daemon they mean: none comes from the developer's environment."""
    for var in ("ROTA_URL", "ROTA_TOKEN", "ROTA_HOME"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def client(sdk: Sdk) -> Iterator[rota.Client]:
    with sdk.client() as c:
        yield c


@pytest.fixture
def unique() -> Callable[[str], str]:
    """A name no other test uses, so filters see only this test's jobs."""
    tag = uuid.uuid4().hex[:8]
    return lambda base: f"{base}-{tag}"
