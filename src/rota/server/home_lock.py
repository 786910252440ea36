"""One daemon per home: the home folder is checked, then locked for the daemon's whole life,
and only then are its rights set (a refused start changes nothing in it).

The lock (an exclusive ``flock`` on ``ROTA_HOME/rota.lock``) is taken before the store is
migrated and before the socket is touched, so two starts at the same moment, or a start
after ``rota.sock`` was removed, cannot both run; the kernel drops it when the daemon dies,
however it dies. The holder writes its pid into the file so a refused start can name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path

from rota.errors import RotaError

LOCK_NAME = "rota.lock"


#: what other accounts pass through on a root daemon (0711: reached by name, never listed):
#: each account's folder, the dataset cache (their versions), the job logs and status
#: folders (a job's own log, events and status files), the workspaces and a Slurm pool's
#: work folder (its output folder). Whatever lies in them is guarded by its own mode.
PASSABLE = frozenset({"users", "dataset-cache", "logs", "status", "workspaces", "slurm"})


def prepare_home(home: Path, *, everyone: bool = False) -> None:
    """Create the home 0700, or check an existing one: it holds the socket (full control of
    the queue), the database and secrets.key, so a folder that others can write, or that
    belongs to another user, is refused rather than changed under them. Nothing in an
    existing home is changed here: that waits for the lock (:func:`settle_home`), so a
    start that is refused leaves a running daemon's home as it was.

    ``everyone``: a root daemon; what it makes from now on is its own alone (umask 077)."""
    if everyone:
        os.umask(0o077)
    try:
        home.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        _check_existing(home)


def settle_home(home: Path, *, everyone: bool = False) -> None:
    """The home's rights, set by the daemon holding its lock.

    ``everyone`` (a root daemon, whose socket every local account reaches by its path): the
    home is 0711, traversable but not listable, so whatever is in it must be closed to
    others by its own mode: what an earlier daemon left (the database, secrets.key, ...)
    loses group and other rights. A folder in ``PASSABLE`` keeps its execute bits (the
    accounts whose jobs pass through it still do after a restart); a socket keeps its mode
    (a stale one is replaced, and a live one is another daemon's door)."""
    if not everyone:
        os.chmod(home, 0o700)  # mkdir's mode is cut by the umask; the user's own folder
        return
    os.chmod(home, 0o711)
    for entry in os.scandir(home):
        if entry.is_symlink() or entry.name == "users":
            continue
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISSOCK(st.st_mode):
            continue
        keep = 0o7711 if entry.name in PASSABLE and stat.S_ISDIR(st.st_mode) else 0o7700
        if st.st_mode & 0o7777 & ~keep:
            os.chmod(entry.path, st.st_mode & keep)


def _check_existing(home: Path) -> None:
    st = home.stat()
    if not stat.S_ISDIR(st.st_mode):
        raise RotaError(f"ROTA_HOME {home} is not a folder")
    if st.st_uid != os.geteuid():
        raise RotaError(f"ROTA_HOME {home} belongs to uid {st.st_uid}, not to this user "
                        f"(uid {os.geteuid()}): choose a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RotaError(f"ROTA_HOME {home} can be written by others "
                        f"(mode {stat.S_IMODE(st.st_mode):o}): choose a folder only you can "
                        "write (Rota creates a missing one with mode 700)")


def holder_pid(home: Path) -> int | None:
    """The pid written by the daemon holding the home's lock (None if unreadable)."""
    try:
        text = (home / LOCK_NAME).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _refusal(home: Path) -> RotaError:
    pid = holder_pid(home)
    who = f"pid {pid}" if pid else "another process"
    return RotaError(f"a Rota daemon ({who}) already holds {home / LOCK_NAME}; "
                     "one daemon per home: stop it first (rota server stop)")


def lock_home(home: Path) -> int:
    """Take the home's lock for this process's life and return its descriptor (kept open;
    not inherited by children, so a job or runner never holds it)."""
    fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _refusal(home) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def check_unlocked(home: Path) -> None:
    """Refuse now if a daemon holds the home (for `rota server --detach`, whose child would
    otherwise be refused out of sight, in daemon.log)."""
    path = home / LOCK_NAME
    if not path.exists():
        return
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _refusal(home) from None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)  # closing drops a lock taken here
