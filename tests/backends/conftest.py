"""Fixtures for the backend tests: request builder, backends on private servers, waits."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from rota.backends.base import Backend, ExitInfo, Handle, LaunchRequest
from rota.backends.common import pid_alive, reap, signal_group
from rota.backends.registry import make_backend
from rota_testing import patience

PY = sys.executable
_ids = itertools.count(1)


def wait_for(pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``pred`` every 20 ms until it returns something truthy; fail after ``timeout``."""
    timeout = patience(timeout)  # a loaded machine is slow: at least PATIENCE_S
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


def wait_exit(backend: Backend, handle: Handle, timeout: float = 10.0) -> ExitInfo:
    info: ExitInfo = wait_for(lambda: backend.collect(handle), timeout, "the job to end")
    return info


def wait_text(path: Path, text: str, timeout: float = 10.0) -> None:
    """Wait until ``text`` shows in a file (a job saying it is ready)."""
    def has() -> bool:
        try:
            return text in path.read_text(errors="replace")
        except FileNotFoundError:
            return False
    wait_for(has, timeout, f"{text!r} in {path.name}")


class Env:
    """One test's world: where files go, which servers the session backends use."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.tmux_socket = f"rota-test-{uuid.uuid4().hex[:10]}"
        # screen's socket path must fit in sun_path (108 bytes): keep it short
        self.screendir = tempfile.mkdtemp(prefix="rs-", dir="/tmp")
        os.chmod(self.screendir, 0o700)
        self.handles: list[Handle] = []

    def backend(self, name: str) -> Backend:
        if name == "local-shim":  # a shell shim per job, as without a runner socket
            return make_backend("local")
        # the local runner's socket must fit in sun_path too
        runner = Path(self.screendir) / "runner.sock" if name == "local" else None
        return make_backend(name, tmux_socket=self.tmux_socket, screendir=self.screendir,
                            runner_socket=runner)

    def req(self, argv: list[str], *, shell: bool = False, env: dict[str, str] | None = None,
            cwd: str | None = None, conda: str | None = None,
            session_name: str | None = None) -> LaunchRequest:
        n = next(_ids)
        return LaunchRequest(job_id=n, attempt=1, argv=argv, shell=shell, env=env or {},
                             cwd=cwd, conda=conda, log_path=self.tmp / "logs" / f"{n}.log",
                             status_path=self.tmp / "run" / f"{n}.status.json",
                             session_name=session_name or f"rota-{n}-1")

    def launch(self, backend: Backend, req: LaunchRequest) -> Handle:
        h = backend.launch(req)
        self.handles.append(h)
        return h

    def cleanup(self) -> None:
        for h in self.handles:
            if pid_alive(h.pid):
                signal_group(h.pid, signal.SIGKILL)
            reap(h.pid)
        if shutil.which("tmux"):
            subprocess.run(["tmux", "-L", self.tmux_socket, "kill-server"],
                           capture_output=True, check=False)
            tmpdir = os.environ.get("TMUX_TMPDIR") or "/tmp"
            with contextlib.suppress(OSError):  # tmux 3.3 leaves the socket file behind
                os.unlink(os.path.join(tmpdir, f"tmux-{os.getuid()}", self.tmux_socket))
        if shutil.which("screen"):
            senv = dict(os.environ, SCREENDIR=self.screendir)
            out = subprocess.run(["screen", "-ls"], capture_output=True, text=True,
                                 env=senv, check=False).stdout
            for line in out.splitlines():
                sid = line.strip().split("\t")[0]
                if sid[:1].isdigit() and "." in sid:
                    subprocess.run(["screen", "-S", sid, "-X", "quit"], env=senv,
                                   capture_output=True, check=False)
        for p in psutil.process_iter(["cmdline"]):  # the local runner of this test
            if self.screendir in " ".join(p.info.get("cmdline") or []):
                with contextlib.suppress(psutil.Error):
                    p.kill()
        shutil.rmtree(self.screendir, ignore_errors=True)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    try:
        yield e
    finally:
        e.cleanup()


def require(program: str) -> None:
    """Skip only when the program is missing; CI installs tmux and screen."""
    if program in ("tmux", "screen") and shutil.which(program) is None:
        pytest.skip(f"{program} is not installed")


@pytest.fixture(params=["local", "local-shim", "tmux", "screen"])
def backend_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require(name)
    return name


@pytest.fixture
def backend(env: Env, backend_name: str) -> Backend:
    return env.backend(backend_name)


def py(code: str, *args: str) -> list[str]:
    """argv running a Python snippet: a portable job with precise behaviour."""
    return [PY, "-c", code, *args]
