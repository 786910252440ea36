"""Fixtures for the CLI tests: a real daemon on simulated GPUs, and a `rota` runner."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Rich sizes its console when rota.cli is imported: wide, so table cells are not cut.
os.environ["COLUMNS"] = "250"

import pytest
from typer.testing import CliRunner, Result

from rota.client import RawClient as Client
from rota.server.serve import socket_alive
from rota_testing import patience

START_TIMEOUT = 60.0


@dataclass
class Daemon:
    home: Path
    proc: subprocess.Popen[bytes]
    client: Client
    tmux_socket: str

    @property
    def env(self) -> dict[str, str]:
        return {"ROTA_HOME": str(self.home), "ROTA_TMUX_SOCKET": self.tmux_socket}


def wait_for(pred: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll `pred` every 20 ms until it is truthy; fail after `timeout` seconds."""
    timeout = patience(timeout)  # a loaded machine is slow: at least PATIENCE_S
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


def start_daemon(home: Path, *extra: str) -> Daemon:
    """`python -m rota server --simulate 4x24G` with ROTA_HOME=home; waits for its socket."""
    tmux_socket = f"rota-test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "ROTA_HOME": str(home), "ROTA_TMUX_SOCKET": tmux_socket}
    env.pop("ROTA_DATABASE_URL", None)
    log = open(home / "daemon-test.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([sys.executable, "-m", "rota", "server", "--simulate", "4x24G",
                             *extra], env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    sock = home / "rota.sock"
    deadline = time.monotonic() + START_TIMEOUT
    while not (socket_alive(sock) and (home / "rota.pid").exists()):
        if proc.poll() is not None:
            text = (home / "daemon-test.log").read_text(errors="replace")
            raise RuntimeError(f"the daemon exited with {proc.returncode}:\n{text}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the daemon did not answer within {START_TIMEOUT}s")
        time.sleep(0.05)
    return Daemon(home, proc, Client(sock), tmux_socket)


def stop_daemon(d: Daemon) -> None:
    with contextlib.suppress(Exception):
        d.client.shutdown()
    try:
        d.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(d.proc.pid, signal.SIGKILL)
        d.proc.wait(timeout=5)
    d.client.close()
    if shutil.which("tmux"):
        subprocess.run(["tmux", "-L", d.tmux_socket, "kill-server"], capture_output=True,
                       check=False)
        tmux_dir = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
        (tmux_dir / d.tmux_socket).unlink(missing_ok=True)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon for the whole CLI suite; tests leave GPUs resumed and draining off."""
    d = start_daemon(tmp_path_factory.mktemp("home"))
    try:
        yield d
    finally:
        stop_daemon(d)


Rota = Callable[..., Result]


@pytest.fixture
def rota(daemon: Daemon) -> Rota:
    """Run `rota ARGS...` in-process against the test daemon."""
    return make_runner(daemon.env)


def make_runner(env: dict[str, str]) -> Rota:
    from rota.cli.main import app

    runner = CliRunner()

    def run(*args: str, cwd: Path | None = None) -> Result:
        old = os.getcwd()
        if cwd is not None:
            os.chdir(cwd)
        try:
            return runner.invoke(app, list(args), env=env, catch_exceptions=False)
        finally:
            os.chdir(old)

    return run


@pytest.fixture
def until() -> Callable[..., Any]:
    """`until(pred, timeout, what)`: an explicit wait with a timeout."""
    return wait_for


@pytest.fixture
def runner_for() -> Callable[[dict[str, str]], Rota]:
    """A `rota` runner with a given environment (e.g. a ROTA_HOME with no daemon)."""
    return make_runner
