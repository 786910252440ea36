"""A backend's declared capabilities are read before a job is queued: what it cannot do
(or what this machine lacks for it) is a sentence, not a failed launch."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rota.backends.base import Capabilities, Needs, refusal
from rota.backends.local.backend import LocalBackend
from rota.backends.registry import make_backend


class _Limited(LocalBackend):
    """A backend that cannot pin GPUs nor send a chosen stop signal."""

    name = "limited"
    capabilities = dataclasses.replace(Capabilities(), gpu_pinning=False, stop_signal=False)


def test_a_capable_backend_runs_any_job(tmp_path: Path) -> None:
    local = LocalBackend(tmp_path / "runner.sock")
    assert refusal(local, Needs(gpus=True, stop_signal="SIGINT")) is None


def test_what_a_backend_cannot_do_is_said_in_a_sentence(tmp_path: Path) -> None:
    b = _Limited(tmp_path / "runner.sock")
    assert refusal(b, Needs()) is None  # no GPUs, the default stop signal
    assert refusal(b, Needs(gpus=True)) == (
        "the limited backend cannot pin a job to GPUs; ask for no GPUs or choose another "
        "session")
    assert refusal(b, Needs(stop_signal="SIGUSR1")) == (
        "the limited backend stops jobs with SIGTERM only, not SIGUSR1")


@pytest.mark.parametrize("name", ["tmux", "screen"])
def test_a_session_program_that_is_not_installed_is_named(
        tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    b = make_backend(name, screendir=str(tmp_path / "screens"))
    assert b.missing() == (f"{name} is not installed on this machine (session={name!r} "
                           "needs it); install it or use session='none'")
    assert refusal(b, Needs()) == b.missing()
