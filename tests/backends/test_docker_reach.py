"""What `rota pools` and a container pool say when Docker cannot be reached: where it
looked, and the system's reason in words (not the transport's nested Python tuples)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rota.backends.container import docker_api
from rota.errors import BackendError


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_docker_host_is_named_with_the_reason(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    port = _closed_port()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    with pytest.raises(BackendError) as e:
        docker_api.connect(None)
    assert str(e.value) == f"cannot reach Docker at DOCKER_HOST=tcp://127.0.0.1:{port}: " \
                           "Connection refused"
    monkeypatch.delenv("DOCKER_HOST")
    missing = tmp_path / "docker.sock"
    with pytest.raises(BackendError) as e:
        docker_api.connect(f"unix://{missing}")
    assert str(e.value) == f"cannot reach Docker at unix://{missing}: No such file or directory"
    assert "(" not in str(e.value).split(": ", 1)[1]
