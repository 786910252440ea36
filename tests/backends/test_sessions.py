"""tmux and screen specifics: attaching, listing, naming, and missing programs."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator

import pytest

from rota.backends.base import Backend, Handle
from rota.backends.registry import make_backend
from rota.backends.sessions import ScreenBackend, TmuxBackend, session_name
from rota.errors import BackendError

from .conftest import Env, py, require, wait_exit, wait_for, wait_text

SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"


def test_session_name_is_literal_for_tmux_and_screen() -> None:
    assert session_name("rota-12-gpu0.1") == "rota-12-gpu0_1"
    assert session_name("job:1 x") == "rota-job_1_x"
    assert session_name("rota-7-1") == "rota-7-1"


def test_local_is_not_attachable(env: Env) -> None:
    b = env.backend("local")
    h = env.launch(b, env.req(["true"]))
    assert b.attach_argv(h) is None
    assert b.list_sessions() == []
    wait_exit(b, h)


def test_tmux_attach_and_list(env: Env) -> None:
    require("tmux")
    b = env.backend("tmux")
    assert b.list_sessions() == []  # no server on this socket yet
    req = env.req(py(SLEEPER), session_name="rota-5-gpu0.1")
    h = env.launch(b, req)
    assert h.session_name == "rota-5-gpu0_1"
    argv = b.attach_argv(h)
    assert argv == ["tmux", "-L", env.tmux_socket, "attach", "-t", "=rota-5-gpu0_1"]
    assert b.list_sessions() == ["rota-5-gpu0_1"]
    wait_text(req.log_path, "ready")
    # a person attached sees the output: it is on the pane as well as in the log
    def pane() -> str:
        return subprocess.run(["tmux", "-L", env.tmux_socket, "capture-pane", "-p", "-t",
                               "=rota-5-gpu0_1:"], capture_output=True, text=True).stdout
    wait_for(lambda: "ready" in pane(), what="output on the pane")
    b.signal(h, signal.SIGTERM)
    assert wait_exit(b, h).signal == signal.SIGTERM
    wait_for(lambda: b.list_sessions() == [], what="the session to close")


def test_tmux_lists_only_rota_sessions(env: Env) -> None:
    require("tmux")
    subprocess.run(["tmux", "-L", env.tmux_socket, "new-session", "-d", "-s", "mine", "--",
                    "sleep", "60"], check=True)
    b = env.backend("tmux")
    h = env.launch(b, env.req(py(SLEEPER)))
    assert b.list_sessions() == [h.session_name]
    b.signal(h, signal.SIGKILL)


def test_tmux_duplicate_session_is_an_error(env: Env) -> None:
    require("tmux")
    b = env.backend("tmux")
    first = env.req(py(SLEEPER), session_name="rota-9-1")
    h = env.launch(b, first)
    with pytest.raises(BackendError, match="duplicate session"):
        b.launch(env.req(["true"], session_name="rota-9-1"))
    b.signal(h, signal.SIGKILL)


def test_tmux_uses_its_own_socket(env: Env) -> None:
    require("tmux")
    b = make_backend("tmux", tmux_socket=env.tmux_socket)
    assert isinstance(b, TmuxBackend) and b.socket_name == env.tmux_socket
    h = env.launch(b, env.req(py(SLEEPER)))
    assert h.extra == {"socket": env.tmux_socket}
    other = make_backend("tmux", tmux_socket=env.tmux_socket + "-other")
    assert other.list_sessions() == []
    # the handle remembers its socket, so attaching works whatever the current default
    assert env.tmux_socket in (other.attach_argv(h) or [])
    b.signal(h, signal.SIGKILL)


def test_screen_attach_and_list(env: Env) -> None:
    require("screen")
    b = env.backend("screen")
    assert b.list_sessions() == []
    req = env.req(py(SLEEPER), session_name="rota-6-gpu1")
    h = env.launch(b, req)
    assert b.list_sessions() == ["rota-6-gpu1"]
    argv = b.attach_argv(h)
    assert argv is not None
    assert argv[:2] == ["env", f"SCREENDIR={env.screendir}"]
    assert argv[2:4] == ["screen", "-r"]
    pid, name = argv[4].split(".", 1)
    assert name == "rota-6-gpu1" and pid.isdigit()
    assert os.path.exists(os.path.join(env.screendir, argv[4]))  # screen's socket
    b.signal(h, signal.SIGKILL)
    wait_exit(b, h)
    wait_for(lambda: b.list_sessions() == [], what="the session to close")


def test_screen_default_dir_attach_argv() -> None:
    b = ScreenBackend()
    h = Handle(backend="screen", pid=1, status_path="x", session_name="rota-1-1",
               extra={"screendir": None, "screen_id": "42.rota-1-1"})
    assert b.attach_argv(h) == ["screen", "-r", "42.rota-1-1"]


@pytest.fixture
def terminal() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Runs attach commands under script(1), a pseudo-terminal standing in for a person."""
    if shutil.which("script") is None:
        pytest.skip("script (util-linux) is not installed")
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def attach(terminal: list[subprocess.Popen[bytes]], argv: list[str]) -> None:
    p = subprocess.Popen(["script", "-qfc", shlex.join(argv), "/dev/null"],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=dict(os.environ, TERM="xterm"))
    terminal.append(p)


def test_tmux_attach_argv_attaches(env: Env, terminal: list[subprocess.Popen[bytes]]) -> None:
    require("tmux")
    b = env.backend("tmux")
    h = env.launch(b, env.req(py(SLEEPER), session_name="rota-3-1"))
    env.launch(b, env.req(py(SLEEPER), session_name="rota-3-10"))  # a prefix trap
    attach(terminal, b.attach_argv(h) or [])

    def clients() -> str:
        return subprocess.run(["tmux", "-L", env.tmux_socket, "list-clients", "-F",
                               "#{client_session}"], capture_output=True, text=True).stdout
    assert wait_for(lambda: clients().strip(), what="a client").split() == ["rota-3-1"]
    b.signal(h, signal.SIGKILL)


def test_screen_attach_argv_attaches(env: Env,
                                     terminal: list[subprocess.Popen[bytes]]) -> None:
    require("screen")
    b = env.backend("screen")
    h = env.launch(b, env.req(py(SLEEPER), session_name="rota-4-1"))
    env.launch(b, env.req(py(SLEEPER), session_name="rota-4-10"))  # a prefix trap
    attach(terminal, b.attach_argv(h) or [])

    def attached() -> list[str]:
        out = subprocess.run(["screen", "-ls"], capture_output=True, text=True,
                             env=dict(os.environ, SCREENDIR=env.screendir)).stdout
        return [ln.split()[0].split(".", 1)[1] for ln in out.splitlines() if "(Attached)" in ln]
    assert wait_for(attached, what="an attached session") == ["rota-4-1"]
    b.signal(h, signal.SIGKILL)


@pytest.mark.parametrize("name", ["tmux", "screen"])
def test_missing_program_is_a_clear_error(env: Env, name: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    empty = env.tmp / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    b: Backend = env.backend(name)
    with pytest.raises(BackendError, match=f"{name} is not installed"):
        b.check(env.req(["true"]))
    with pytest.raises(BackendError, match=f"{name} is not installed"):
        b.launch(env.req(["true"]))
    assert b.list_sessions() == []


def test_a_session_launch_waits_off_the_event_loop(env: Env) -> None:
    """tmux's launch polls for the shim's record: launch_later runs it on a worker thread
    and posts the outcome back, while the loop goes on turning."""
    import asyncio

    from rota.backends.base import Launched, LaunchOutcome

    require("tmux")
    b = env.backend("tmux")
    assert b.capabilities.launch_blocks
    reqs = [env.req(py(SLEEPER), session_name=f"rota-{i}-cpu") for i in (1, 2)]

    async def run() -> tuple[list[tuple[int, LaunchOutcome]], int]:
        got: list[tuple[int, LaunchOutcome]] = []
        ticks = 0
        assert b.launch_later(reqs, lambda i, outcome: got.append((i, outcome)))
        while len(got) < len(reqs):  # the loop is free while tmux starts the sessions
            ticks += 1
            await asyncio.sleep(0.001)
        return got, ticks

    got, ticks = asyncio.run(run())
    assert ticks > 1 and [i for i, _ in got] == [0, 1]
    for _, outcome in got:
        assert isinstance(outcome, Launched)
        env.handles.append(outcome.handle)
        b.signal(outcome.handle, signal.SIGKILL)
        wait_exit(b, outcome.handle)


def test_a_failed_session_launch_is_a_typed_outcome(env: Env) -> None:
    from rota.backends.base import LaunchFailed

    require("tmux")
    b = env.backend("tmux")
    [got] = b.launch_many([env.req(["true"], cwd=str(env.tmp / "nowhere"))])
    assert isinstance(got, LaunchFailed) and "does not exist" in got.reason


def test_a_run_as_session_is_signalled_only_where_its_pid_is_its_accounts() -> None:
    """A job run as another account can write its status file, so the pid read there is
    believed only for a process of that account: a root daemon never signals another's."""
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        forged = Handle(backend="tmux", pid=victim.pid, status_path="/nonexistent",
                        session_name="rota-1-cpu", extra={"user": "someone", "uid": 4242})
        with pytest.raises(BackendError, match=f"process {victim.pid} named in the job's "
                           r"status file is not its account's \(uid \d+, not 4242\)"):
            TmuxBackend().signal(forged, signal.SIGKILL)
        assert victim.poll() is None  # untouched
    finally:
        victim.kill()
        victim.wait()
