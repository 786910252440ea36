"""tmux and screen backends: the job runs in a detached session a person can attach to.

The session holds the shim (with ``--tee``: output goes to the pane and to the job's log),
and the shim holds the job, exactly as in the local backend; the session only adds a
terminal. The session closes when the shim exits, and the exit status comes from the
shim's status file, never from tmux or screen (which would report the shim, or nothing).

The job's argv, environment and cwd reach the shim through a 0600 job file (see
``common.write_job_file``), never through the tmux/screen command line: tmux re-parses
its arguments even after ``--`` (an argument ending in ``;`` ends the command and the
rest runs as tmux commands, ``run-shell`` included), so no user value may appear there.
The command line holds only Rota's own values: the interpreter, the module, three paths
and a sanitised session name, and tmux (>= 3.0) execs it as an argv, without a shell.

A job run as another account (``LaunchRequest.run_as``, a root daemon's) is in a tmux
server (a screen folder) of that account, started and asked through ``runuser`` with a
login's environment, so the account attaches to it as to its own sessions; its shim
reads a job file, appends to a status file and tees to a log made its own (``hand_over``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import psutil

import rota
from rota.backends.base import Capabilities, Handle, LaunchRequest, RunAs, as_user
from rota.backends.common import (
    append_log_header,
    check_request,
    hand_over,
    prepare_paths,
    read_status,
    shim_argv,
    write_job_file,
)
from rota.backends.process import ProcessBackend
from rota.errors import BackendError

SESSION_PREFIX = "rota-"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: Variables of an enclosing tmux/screen that would make the client talk to the wrong server.
_CLIENT_DROP = ("TMUX", "TMUX_PANE", "STY", "WINDOW")


def session_name(name: str) -> str:
    """A name tmux and screen take literally: '.' and ':' are target syntax in tmux and
    screen prefixes names with "PID.", so only letters, digits, '-' and '_' remain."""
    safe = _UNSAFE.sub("_", name)
    return safe if safe.startswith(SESSION_PREFIX) else SESSION_PREFIX + safe


def as_account(run_as: RunAs | None, argv: list[str]) -> list[str]:
    """``argv`` run by ``run_as`` (None: by the daemon itself)."""
    return as_user(None if run_as is None else run_as.user, argv)


def account_client_env(run_as: RunAs) -> dict[str, str]:
    """A session client's environment as ``run_as``: a login's (the daemon's never reaches
    the account's server, its panes or its jobs), and where Rota's code is, for the shim."""
    code = os.path.dirname(os.path.dirname(os.path.abspath(rota.__file__)))
    return {**run_as.login_env(), "PYTHONPATH": code}


def _run(argv: list[str], env: dict[str, str], timeout: float = 10.0
         ) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BackendError(f"{argv[0]} failed: {e}") from e


def _check_owner(pid: int, uid: int) -> None:
    """A run-as job's status file is its account's to write, so the pid in it is believed
    only for a process of that account: a root daemon never signals another's on its word."""
    try:
        real = psutil.Process(pid).uids().real
    except psutil.NoSuchProcess:
        return  # gone: signalling it does nothing
    except psutil.Error as e:
        raise BackendError(f"cannot tell whose process {pid} is: {e}") from e
    if real != uid:
        raise BackendError(f"process {pid} named in the job's status file is not its "
                           f"account's (uid {real}, not {uid}); not signalled")


class _SessionBackend(ProcessBackend):
    """What tmux and screen share: launch through a job file, then learn the shim's pid
    (a wait: the daemon launches these off its event loop)."""

    name: str
    program: str
    capabilities = Capabilities(attachable=True, launch_blocks=True, run_as=True)
    #: How long launch waits for the shim's first status record.
    start_timeout_s: float = 10.0

    def _client_env(self, run_as: RunAs | None = None) -> dict[str, str]:
        if run_as is not None:
            return account_client_env(run_as)
        return {k: v for k, v in os.environ.items() if k not in _CLIENT_DROP}

    def missing(self) -> str | None:
        if shutil.which(self.program) is None:
            return (f"{self.program} is not installed on this machine (session="
                    f"{self.name!r} needs it); install it or use session='none'")
        return None

    def _check_program(self) -> None:
        missing = self.missing()
        if missing is not None:
            raise BackendError(missing)

    def check(self, req: LaunchRequest) -> None:
        self._check_program()
        check_request(req)

    # --- to implement per program (run_as: the session's account, None: the daemon's) --
    def _start(self, name: str, argv: list[str], run_as: RunAs | None = None) -> None:
        raise NotImplementedError

    def _exists(self, name: str, run_as: RunAs | None = None) -> bool:
        raise NotImplementedError

    def _kill(self, name: str, run_as: RunAs | None = None) -> None:
        raise NotImplementedError

    def _handle_extra(self, name: str, shim_pid: int,
                      run_as: RunAs | None = None) -> dict[str, object]:
        return {}

    # --- shared ---------------------------------------------------------------------
    def launch(self, req: LaunchRequest) -> Handle:
        self.check(req)
        name = session_name(req.session_name)
        prepare_paths(req)
        append_log_header(req)
        hand_over(req, req.status_path)
        job_file = write_job_file(req)
        argv = shim_argv(req, tee=True, job_file=job_file)
        try:
            self._start(name, argv, req.run_as)
            pid = self._wait_for_shim(req.status_path, name, req.run_as)
            if req.run_as is not None:
                _check_owner(pid, req.run_as.uid)
        except BaseException:
            if req.run_as is not None:
                self._kill(name, req.run_as)
            raise
        finally:  # read by now, or never; a shim run as another account cannot delete it
            job_file.unlink(missing_ok=True)
        extra = self._handle_extra(name, pid, req.run_as)
        if req.run_as is not None:
            extra.update(user=req.run_as.user, uid=req.run_as.uid)
        return Handle(backend=self.name, pid=pid, status_path=str(req.status_path),
                      session_name=name, extra=extra)

    def signal(self, handle: Handle, sig: int) -> None:
        if handle.extra.get("uid") is not None:  # the root daemon signals only that account's
            _check_owner(handle.pid, int(handle.extra["uid"]))
        super().signal(handle, sig)

    def _wait_for_shim(self, status_path: Path, name: str, run_as: RunAs | None) -> int:
        """Poll for the shim's first record; the session gone without one is a failed start."""
        deadline = time.monotonic() + self.start_timeout_s
        next_session_check = time.monotonic() + 0.2
        while True:
            status = read_status(status_path)
            if status and status.get("shim_pid"):
                return int(status["shim_pid"])
            now = time.monotonic()
            if now >= next_session_check:
                next_session_check = now + 0.2
                if not self._exists(name, run_as):
                    status = read_status(status_path)  # ended just now?
                    if status and status.get("shim_pid"):
                        return int(status["shim_pid"])
                    raise BackendError(f"{self.name} session {name!r} ended before the job "
                                       "started (the shim could not run)")
            if now >= deadline:
                self._kill(name, run_as)
                raise BackendError(f"{self.name} session {name!r}: the job did not start "
                                   f"within {self.start_timeout_s:g}s")
            time.sleep(0.01)


class TmuxBackend(_SessionBackend):
    """Jobs in tmux sessions on a server of Rota's own (``tmux -L SOCKET``).

    A dedicated socket keeps Rota's sessions out of the person's own ``tmux ls`` and lets
    tests run their own server. The person's ~/.tmux.conf still applies (key bindings when
    they attach); a ``remain-on-exit on`` there only keeps finished panes visible.
    """

    name = "tmux"
    program = "tmux"

    def __init__(self, socket_name: str = "rota") -> None:
        self.socket_name = socket_name
        self._version_ok = False

    def _tmux(self, socket_name: str | None = None) -> list[str]:
        return ["tmux", "-L", socket_name or self.socket_name]

    def missing(self) -> str | None:
        found = super().missing()
        if found is not None or self._version_ok:
            return found
        try:
            out = _run(["tmux", "-V"], self._client_env()).stdout.strip()
        except BackendError as e:
            return str(e)
        m = re.search(r"(\d+)\.(\d+)", out)
        # 3.0 added new-session with the command as separate arguments, exec'd directly.
        if m and (int(m.group(1)), int(m.group(2))) < (3, 0):
            return f"tmux >= 3.0 is needed, this machine has {out!r}"
        self._version_ok = True
        return None

    def _start(self, name: str, argv: list[str], run_as: RunAs | None = None) -> None:
        bad = [a for a in argv if a.endswith(";")]
        if bad:  # only our own paths are here; tmux would split the command at them
            raise BackendError(f"tmux cannot take an argument ending in ';': {bad[0]!r}")
        r = _run(as_account(run_as, [*self._tmux(), "new-session", "-d", "-s", name,
                                     "-x", "200", "-y", "50", "--", *argv]),
                 self._client_env(run_as))
        if r.returncode != 0:
            raise BackendError(f"tmux new-session {name!r} failed: {r.stderr.strip()}")

    def _exists(self, name: str, run_as: RunAs | None = None) -> bool:
        r = _run(as_account(run_as, [*self._tmux(), "has-session", "-t", f"={name}"]),
                 self._client_env(run_as))
        return r.returncode == 0

    def _kill(self, name: str, run_as: RunAs | None = None) -> None:
        _run(as_account(run_as, [*self._tmux(), "kill-session", "-t", f"={name}"]),
             self._client_env(run_as))

    def _handle_extra(self, name: str, shim_pid: int,
                      run_as: RunAs | None = None) -> dict[str, object]:
        return {"socket": self.socket_name}

    def attach_argv(self, handle: Handle) -> list[str] | None:
        if not handle.session_name:
            return None
        sock = str(handle.extra.get("socket") or self.socket_name)
        return [*self._tmux(sock), "attach", "-t", f"={handle.session_name}"]

    def list_sessions(self) -> list[str]:
        if shutil.which("tmux") is None:
            return []
        r = _run([*self._tmux(), "list-sessions", "-F", "#{session_name}"], self._client_env())
        if r.returncode != 0:  # no server running: no sessions
            return []
        return sorted(n for n in r.stdout.splitlines() if n.startswith(SESSION_PREFIX))


class ScreenBackend(_SessionBackend):
    """Jobs in GNU screen sessions; ``screendir`` (SCREENDIR) isolates them, e.g. in tests.

    screen names a session "PID.NAME" and matches a bare NAME by prefix, so the handle keeps
    the full "PID.NAME" to attach to exactly this session.
    """

    name = "screen"
    program = "screen"

    def __init__(self, screendir: str | None = None) -> None:
        self.screendir = screendir

    def _client_env(self, run_as: RunAs | None = None) -> dict[str, str]:
        env = super()._client_env(run_as)
        if self.screendir and run_as is None:  # another account's: its own default folder
            env["SCREENDIR"] = self.screendir
        return env

    def _check_program(self) -> None:
        super()._check_program()
        if self.screendir:  # screen refuses a directory others can read
            os.makedirs(self.screendir, mode=0o700, exist_ok=True)

    def _start(self, name: str, argv: list[str], run_as: RunAs | None = None) -> None:
        r = _run(as_account(run_as, ["screen", "-S", name, "-dm", *argv]),
                 self._client_env(run_as))
        if r.returncode != 0:
            raise BackendError(f"screen -S {name!r} -dm failed: "
                               f"{(r.stderr or r.stdout).strip()}")

    def _sessions(self, run_as: RunAs | None = None) -> list[str]:
        """Full "PID.NAME" ids of live sessions in our SCREENDIR (``run_as``'s own)."""
        # exits 1 even when it lists some
        r = _run(as_account(run_as, ["screen", "-ls"]), self._client_env(run_as))
        ids = []
        for line in r.stdout.splitlines():
            parts = line.strip().split("\t")
            if parts and re.fullmatch(r"\d+\.\S+", parts[0]):
                ids.append(parts[0])
        return ids

    def _exists(self, name: str, run_as: RunAs | None = None) -> bool:
        return any(i.split(".", 1)[1] == name for i in self._sessions(run_as))

    def _kill(self, name: str, run_as: RunAs | None = None) -> None:
        for sid in self._sessions(run_as):
            if sid.split(".", 1)[1] == name:
                _run(as_account(run_as, ["screen", "-S", sid, "-X", "quit"]),
                     self._client_env(run_as))

    def _handle_extra(self, name: str, shim_pid: int,
                      run_as: RunAs | None = None) -> dict[str, object]:
        extra: dict[str, object] = {"screendir": self.screendir if run_as is None else None}
        # the shim's parent is the SCREEN process whose pid prefixes the name
        with contextlib.suppress(psutil.Error):
            extra["screen_id"] = f"{psutil.Process(shim_pid).ppid()}.{name}"
        return extra

    def attach_argv(self, handle: Handle) -> list[str] | None:
        if not handle.session_name:
            return None
        target = str(handle.extra.get("screen_id") or handle.session_name)
        screendir = handle.extra.get("screendir", self.screendir)
        argv = ["screen", "-r", target]
        return ["env", f"SCREENDIR={screendir}", *argv] if screendir else argv

    def list_sessions(self) -> list[str]:
        if shutil.which("screen") is None:
            return []
        names = (sid.split(".", 1)[1] for sid in self._sessions())
        return sorted(n for n in names if n.startswith(SESSION_PREFIX))
