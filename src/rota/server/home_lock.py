"""One daemon per home: the home folder is checked, then locked for the daemon's whole life.

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


def prepare_home(home: Path, *, everyone: bool = False) -> None:
    """Create the home 0700, or check an existing one: it holds the socket (full control of
    the queue), the database and secrets.key, so a folder that others can write, or that
    belongs to another user, is refused rather than changed under them.

    ``everyone`` (a root daemon, whose socket every local account reaches by its path): the
    home is 0711, traversable but not listable, so whatever is in it must be owner-only by
    its own mode: what the daemon makes from now on (umask 077), and what an earlier daemon
    left (the database, secrets.key, logs, ...); ``users`` holds each account's own folder,
    reached through it."""
    try:
        home.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        _check_existing(home)
    if not everyone:
        os.chmod(home, 0o700)  # mkdir's mode is cut by the umask; the user's own folder
        return
    os.umask(0o077)
    os.chmod(home, 0o711)
    for entry in os.scandir(home):
        if entry.name != "users" and not entry.is_symlink():
            os.chmod(entry.path, entry.stat().st_mode & 0o7700)


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
