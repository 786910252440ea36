"""The backend protocol: where and how a job's process runs.

A backend launches a job through something that outlives the daemon and records the pid
and the real exit status: the local runner (``rota.backends.local``) for the local backend,
a shim per job (``rota.backends.shim``, ``shell_shim``) otherwise. Each backend owns its
processes from end to end: it launches them, locates them again after a daemon restart,
gives the daemon something to watch, and collects how they ended. The daemon and recovery
ask the backend; they never read process tables or a backend's records themselves.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rota.errors import BackendError

if TYPE_CHECKING:
    from rota.backends.engine import EngineJob


@dataclass(frozen=True, slots=True)
class RunAs:
    """The Unix account a job runs as, when it is not the daemon's own (a root daemon runs
    each job as its owner's account: docs/security.md)."""

    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary groups, as login would set them
    home: str
    shell: str

    @classmethod
    def of(cls, account: str) -> RunAs:
        import pwd

        try:
            pw = pwd.getpwnam(account)
        except KeyError:
            raise BackendError(f"there is no Unix account {account!r} on this machine to "
                               "run the job as") from None
        return cls(user=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid,
                   groups=tuple(os.getgrouplist(pw.pw_name, pw.pw_gid)),
                   home=pw.pw_dir, shell=pw.pw_shell or "/bin/sh")

    def login_env(self) -> dict[str, str]:
        """What a run-as job's environment starts from: a login's, never the daemon's."""
        return login_env(self.user, self.home, self.shell)

    def popen_args(self) -> dict[str, Any]:
        """``subprocess.Popen``'s arguments that run a helper as this account, in its home,
        with umask 077 (what it writes stays the account's own)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups),
                "umask": 0o077, "cwd": self.home if os.path.isdir(self.home) else "/"}


def python_for(run_as: RunAs | None) -> str | None:
    """An interpreter the account can run (for a helper started as it): this one's, else
    Debian's /usr/bin/python3 (a pyenv build in root's 0700 home is this one's for root
    only); None when there is none."""
    mine = sys.executable  # not resolved: a virtualenv's is one through its own path
    if run_as is None or (_world_runnable(mine) and _world_runnable(os.path.realpath(mine))):
        return mine
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if _world_runnable(os.path.realpath(candidate)):
            return candidate
    return None


def _world_runnable(path: str) -> bool:
    """Whether any account can execute ``path`` (every folder above it passable)."""
    try:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        parent = os.path.dirname(path)
        while parent and parent != "/":
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(parent)
    except OSError:
        return False
    return True


#: a run-as job's PATH unless it sets its own (a login's, as runuser -l gives)
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def as_user(user: str | None, argv: list[str]) -> list[str]:
    """``argv`` run as the Unix account ``user`` (None: as the daemon itself); a root
    daemon switches through ``runuser``, which asks no password."""
    return argv if user is None else ["runuser", "-u", user, "--", *argv]


def login_env(user: str, home: str, shell: str) -> dict[str, str]:
    """A login's environment for an account: the base of its jobs' (docs/security.md)."""
    return {"HOME": home, "USER": user, "LOGNAME": user, "SHELL": shell, "PATH": SAFE_PATH,
            "LANG": "C.UTF-8"}


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    job_id: int
    attempt: int
    argv: list[str]  # final argv (cuda arg already injected); one script string if shell
    shell: bool
    env: dict[str, str]  # extra variables on top of the daemon's environment
    cwd: str | None
    conda: str | None
    log_path: Path  # stdout+stderr of the job, appended
    status_path: Path  # written by the shim: pid at start, exit status at the end
    session_name: str  # for tmux/screen, e.g. "rota-12-gpu0.1-3fa2c1" (the home's tag last)
    log_header: str = ""  # a line the log gets before the job's output (which attempt, GPUs)
    # for a cluster engine's pool: the job as the engine is handed it (its secret_env names
    # variables whose values are in ``env``); None on this machine
    engine_job: EngineJob | None = None
    # for a container on this machine (rota.backends.container): its image and limits; the
    # GPUs are those of CUDA_VISIBLE_DEVICES in ``env``
    image: str | None = None
    cpus: float | None = None
    memory: int | None = None  # bytes
    network: bool = False  # none unless asked
    # the account it runs as, when not the daemon's own (every executor applies it)
    run_as: RunAs | None = None
    # its user's and project's workspace on this machine (ROTA_WORKSPACE in env; a
    # container sees it at /workspace)
    workspace: str | None = None
    # its datasets, for a container: the path it sees each at -> the cached folder (mounted
    # read-only there; ROTA_DATASET_<NAME> in env names the cached folder, and the container
    # is told the mount's path instead)
    datasets: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Handle:
    """Enough to find a running job again after a daemon restart; stored as JSON."""

    backend: str
    pid: int  # the shim's pid (its process group and session id as well)
    status_path: str
    session_name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "pid": self.pid, "status_path": self.status_path,
                "session_name": self.session_name, "extra": self.extra}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Handle:
        return cls(backend=d["backend"], pid=int(d["pid"]), status_path=d["status_path"],
                   session_name=d.get("session_name"), extra=d.get("extra") or {})


@dataclass(frozen=True, slots=True)
class ExitInfo:
    exit_code: int | None  # None when killed by a signal
    signal: int | None
    ended_at: float | None  # unix time from the shim; None when the shim itself was killed
    # how it ended when no exit code or signal says so (an engine's words: cancelled there)
    why: str = ""

    @property
    def success(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True, slots=True)
class NotStarted(ExitInfo):
    """The end of an attempt its backend dropped before starting it, because a job it was
    told to wait for (a cluster engine's ``EngineJob.after``) ended otherwise than needed:
    not the job's failure; Rota's queue takes it back."""


@dataclass(frozen=True, slots=True)
class TakenBack(ExitInfo):
    """The end of an attempt its cluster engine took back: it preempted the job, or lost
    (or could not boot) its node. Not the job's failure: Rota queues it again as after its
    own preemption, and the next attempt resumes from the job's checkpoint."""


@dataclass(frozen=True, slots=True)
class Launched:
    handle: Handle


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    reason: str
    retryable: bool = False  # a passing trouble (the runner was lost), not the request
    #: nothing of the job's: what starts jobs was lost mid-request (the local runner
    #: killed), and nothing was started: the daemon queues it again, not as a failure
    lost: bool = False


LaunchOutcome = Launched | LaunchFailed


@dataclass(frozen=True, slots=True)
class Located:
    """What a backend knows of an attempt after a daemon restart."""

    handle: Handle | None  # None: no process was ever started for it
    ended: ExitInfo | None = None  # how it ended; None while it still runs (and is ours)


@dataclass(frozen=True, slots=True)
class Capabilities:
    attachable: bool = False  # `rota attach` works
    gpu_pinning: bool = True  # honours CUDA_VISIBLE_DEVICES
    adopt_after_restart: bool = True
    launch_blocks: bool = False  # a launch waits on the process (run off the event loop)
    stop_signal: bool = True  # sends the job's own stop signal (else only SIGTERM)
    engine: bool = False  # a cluster engine: it places the job itself (no GPUs of ours)
    run_as: bool = False  # starts a job as another account (LaunchRequest.run_as)


@dataclass(frozen=True, slots=True)
class Needs:
    """What a job asks of the backend that runs it (see ``refusal``)."""

    gpus: bool = False  # pinned to its GPUs (CUDA_VISIBLE_DEVICES)
    stop_signal: str = "SIGTERM"  # what asks it to stop


class Backend(Protocol):
    name: str
    capabilities: Capabilities

    def missing(self) -> str | None:
        """What this machine lacks to run any job here (tmux not installed), in a
        sentence; None when nothing is."""
        ...

    def check(self, req: LaunchRequest) -> None:
        """Raise BackendError naming what is missing (tmux not installed, no conda)."""
        ...

    def launch(self, req: LaunchRequest) -> Handle:
        """Start the job detached (own session and process group); return at once."""
        ...

    def launch_many(self, reqs: list[LaunchRequest]) -> list[LaunchOutcome]:
        """Launch several: an outcome each."""
        ...

    def launch_later(self, reqs: list[LaunchRequest],
                     done: Callable[[int, LaunchOutcome], None]) -> bool:
        """Launch several without blocking the event loop: ``done(i, outcome)`` is called on
        the running event loop for ``reqs[i]`` as soon as its outcome is known. False when
        this backend cannot (then nothing was done: use ``launch_many``)."""
        ...

    def locate(self, handle: Handle | None, status_path: str, started_at: float) -> Located:
        """After a daemon restart: the attempt's process (from its stored ``handle``, else
        from the backend's own records of ``status_path``), and how it ended if it has (or
        its process is gone, or is no longer ours)."""
        ...

    def watch(self, handle: Handle) -> int | None:
        """An fd that turns readable when the job has ended (and its end is recorded),
        for the daemon's event loop; None when it has ended already. What can be read from
        it then goes to ``collect`` as ``watched``."""
        ...

    def is_alive(self, handle: Handle) -> bool: ...

    def collect(self, handle: Handle, watched: bytes = b"") -> ExitInfo | None:
        """How it ended: from ``watched`` (what its watch fd delivered) when that says it,
        else from its status record; None while it still runs."""
        ...

    def tidy(self, status_dir: Path, active: set[str]) -> None:
        """Drop records of ended attempts kept in ``status_dir``: ``active`` holds the status
        paths of the attempts whose end is not stored yet (their records must stay)."""
        ...

    def signal(self, handle: Handle, sig: int) -> None:
        """Send a signal to the job's whole process group; no error if already gone."""
        ...

    def attach_argv(self, handle: Handle) -> list[str] | None:
        """The argv a person runs to attach to the job's session, if attachable."""
        ...

    def list_sessions(self) -> list[str]:
        """Names of Rota's live sessions (tmux/screen); empty for the plain local backend."""
        ...


def refusal(backend: Backend, needs: Needs) -> str | None:
    """Why ``backend`` cannot run a job with these needs, in a sentence a person can act
    on; None when it can. Read before a job is queued, so that a job no backend here can
    run is refused at once instead of failing at its launch."""
    missing = backend.missing()
    if missing is not None:
        return missing
    caps = backend.capabilities
    if needs.gpus and not caps.gpu_pinning:
        return (f"the {backend.name} backend cannot pin a job to GPUs; ask for no GPUs "
                "or choose another session")
    # whether GPUs reach its jobs can depend on the machine (a container backend asks
    # Docker for an NVIDIA runtime): a backend that knows says why not
    gpu_refusal: Callable[[], str | None] | None = getattr(backend, "gpu_refusal", None)
    if needs.gpus and gpu_refusal is not None:
        why = gpu_refusal()
        if why is not None:
            return why
    if needs.stop_signal != "SIGTERM" and not caps.stop_signal:
        return (f"the {backend.name} backend stops jobs with SIGTERM only, not "
                f"{needs.stop_signal}")
    return None
