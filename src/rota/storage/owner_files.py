"""The one door to a user's files: whatever the daemon reads, lists, serves, hashes or
copies at a path that a job or a user can name or change, it does through here, with the
rights of that path's owner (DESIGN.md invariant 11; docs/security.md has the table).

Two ways, both the kernel's own checks:

- ``OwnerFiles.run(fn, ...)`` (and ``open_read``/``listdir``/``stat``...) runs on the
  calling thread with the owner's *filesystem* credentials: ``setfsuid``/``setfsgid`` and
  the owner's supplementary groups, which Linux keeps per thread. Every path component is
  then checked as the owner would be checked: a link to ``/etc/shadow`` or into another
  account's 0700 folder opens nothing the owner could not open. Changing the fsuid away
  from 0 drops the capabilities that pass file permissions (CAP_DAC_OVERRIDE and its kin)
  for that thread alone, and setting it back restores them. This is how Samba and the NFS
  server act for a user inside a shared process. The raw ``setgroups`` system call is used
  because glibc's wrapper changes the groups of every thread in the process.
  A file opened here stays readable after the switch back: a download streams from a
  descriptor opened with the owner's rights.
- ``open_own_file(folder_fd, name, uid)``: a daemon-made file (a log, an events file) in
  a folder the daemon holds, opened ``O_NOFOLLOW`` relative to the folder's descriptor and
  accepted only as a plain file of the daemon or of that account.

A daemon that is not root has no one to switch to: its jobs run as its own account, and
``OwnerFiles`` for them runs the function as it is.

What runs under the owner's rights must do I/O only: no import (the interpreter may live
where the owner cannot read) and no writes (they would belong to the owner).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import platform
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar

from rota.errors import RotaError

P = ParamSpec("P")
T = TypeVar("T")

_NOBODY = 65534
#: the raw system call numbers of setgroups (glibc's wrapper would change every thread)
_SETGROUPS = {"x86_64": 116, "aarch64": 159, "ppc64le": 81, "s390x": 206, "riscv64": 159}


class OwnerRightsError(RotaError):
    """The thread could not take (or give back) an owner's filesystem rights."""


@dataclass(frozen=True)
class Owner:
    """Whose rights a file action takes: a Unix account (uid, gid, groups)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = ()


class Account(Protocol):
    """What names an account (``rota.backends.base.RunAs`` is one)."""

    @property
    def user(self) -> str: ...
    @property
    def uid(self) -> int: ...
    @property
    def gid(self) -> int: ...
    @property
    def groups(self) -> tuple[int, ...]: ...


class _Credentials:
    """Per-thread filesystem credentials through libc (loaded once)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._setfsuid, self._setfsgid, self._syscall = libc.setfsuid, libc.setfsgid, \
            libc.syscall
        self._setfsuid.argtypes = self._setfsgid.argtypes = [ctypes.c_uint]
        self._setfsuid.restype = self._setfsgid.restype = ctypes.c_int
        self._setgroups_nr = _SETGROUPS.get(platform.machine())
        self._root_groups = tuple(os.getgroups())

    def _groups(self, groups: tuple[int, ...]) -> None:
        if self._setgroups_nr is None:
            raise OwnerRightsError(f"cannot set one thread's groups on {platform.machine()}")
        arr = (ctypes.c_uint * max(len(groups), 1))(*groups)
        if self._syscall(ctypes.c_long(self._setgroups_nr), ctypes.c_size_t(len(groups)),
                         arr) != 0:
            err = ctypes.get_errno()
            raise OwnerRightsError(f"setgroups: {os.strerror(err)}")

    def _fs_ids(self, uid: int, gid: int) -> None:
        self._setfsgid(gid)
        self._setfsuid(uid)
        # each returns the id held before: called again, the one now held
        if self._setfsgid(gid) != gid or self._setfsuid(uid) != uid:
            raise OwnerRightsError(f"could not take the filesystem ids {uid}:{gid}")

    def become(self, owner: Owner) -> None:
        self._groups(owner.groups or (owner.gid,))
        self._fs_ids(owner.uid, owner.gid)

    def back(self) -> None:
        self._fs_ids(0, 0)  # uid first inside: its capabilities are needed for the rest
        self._groups(self._root_groups)


_CREDENTIALS: _Credentials | None = None
_LOCK = threading.Lock()
_IN_OWNER = threading.local()


def _credentials() -> _Credentials:
    global _CREDENTIALS
    with _LOCK:
        if _CREDENTIALS is None:
            _CREDENTIALS = _Credentials()
        return _CREDENTIALS


@contextlib.contextmanager
def owner_rights(owner: Owner | None) -> Iterator[None]:
    """This thread acts on files as ``owner`` for the block (no switch when ``owner`` is
    None or the daemon is not root: its jobs run as itself). Blocks do not nest."""
    if owner is None or os.geteuid() != 0 or owner.uid == 0:
        yield
        return
    if getattr(_IN_OWNER, "owner", None) is not None:
        raise OwnerRightsError("owner rights taken twice on one thread")
    creds = _credentials()
    creds.become(owner)
    _IN_OWNER.owner = owner
    try:
        yield
    finally:
        _IN_OWNER.owner = None
        creds.back()


class OwnerFiles:
    """A user's files, acted on with that user's rights (None: the daemon's own account,
    as its jobs run when it is not root)."""

    def __init__(self, owner: Owner | None) -> None:
        self.owner = owner

    @classmethod
    def of(cls, account: Account | None) -> OwnerFiles:
        """The files of the account a job runs as (None: the daemon's own)."""
        if account is None:
            return cls(None)
        return cls(Owner(account.user, account.uid, account.gid, tuple(account.groups)))

    @classmethod
    def nobody(cls) -> OwnerFiles:
        """The rights of no one (an account that is gone): nothing private is reached."""
        return cls(Owner("nobody", _NOBODY, _NOBODY, (_NOBODY,)))

    @property
    def uid(self) -> int:
        """The owner's uid (the daemon's own when it acts for itself)."""
        return self.owner.uid if self.owner is not None else os.geteuid()

    def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` with the owner's rights on this thread."""
        with owner_rights(self.owner):
            return fn(*args, **kwargs)

    def open_read(self, path: str, *, follow: bool = True) -> int:
        """A descriptor of ``path`` opened for reading as the owner would open it (the
        caller closes it; it stays readable after the rights are given back)."""
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
        with owner_rights(self.owner):
            return os.open(path, flags)

    def open_regular(self, path: str) -> int:
        """``open_read`` that accepts a regular file only (a fifo would block a reader)."""
        return _plain(self.open_read(path), path, uids=None)

    def stat(self, path: str) -> os.stat_result:
        with owner_rights(self.owner):
            return os.stat(path)

    def exists(self, path: str) -> bool:
        with owner_rights(self.owner):
            return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        with owner_rights(self.owner):
            return os.path.isdir(path)

    def can_enter(self, path: str) -> bool:
        """Whether the owner may make ``path`` its working directory (``access`` would ask
        with the real uid, not the thread's filesystem one: ``path/.`` is looked up as
        the owner instead, which needs the right to pass through ``path``)."""
        with owner_rights(self.owner):
            try:
                return stat.S_ISDIR(os.stat(os.path.join(path, ".")).st_mode)
            except OSError:
                return False

    def iterate(self, pieces: Iterator[T]) -> Iterator[T]:
        """``pieces`` (a generator reading the owner's files) advanced with the owner's
        rights at each step, whichever thread asks for the next one (a streamed answer's
        pieces are taken in a thread pool), and with the daemon's rights in between."""
        while True:
            with owner_rights(self.owner):
                try:
                    piece = next(pieces)
                except StopIteration:
                    return
            yield piece

    def read_bytes(self, path: str, limit: int) -> bytes:
        """Up to ``limit`` bytes of a regular file, read as the owner."""
        fd = self.open_regular(path)
        with os.fdopen(fd, "rb") as f:
            return f.read(limit)


def open_own_file(folder_fd: int, name: str, *, uid: int | None,
                  flags: int = os.O_RDONLY) -> int:
    """A daemon-made file ``name`` in the folder held open as ``folder_fd``: opened without
    following a link, accepted only as a plain file of the daemon or of account ``uid``
    (a job that swapped its file for a link or a fifo gets nothing read for it)."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=folder_fd)
    return _plain(fd, name, uids=(os.geteuid(), uid))


def _plain(fd: int, name: str, *, uids: tuple[int | None, ...] | None) -> int:
    """``fd`` (opened non-blocking, so that a fifo put in its place does not hang the open)
    when it is a regular file (of one of ``uids``, when given), else closed and
    PermissionError. It stays non-blocking: Linux ignores that for a regular file."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"{name} is not a regular file")
        if uids is not None and st.st_uid not in uids:
            raise PermissionError(f"{name} belongs to another account")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_own_path(path: str, *, uid: int | None, flags: int = os.O_RDONLY) -> int:
    """``open_own_file`` by a whole path whose folder the daemon made (its home's logs/,
    status/): only the file's own name can be swapped by an account (no account can write
    the daemon's home, where those folders are), so the path is opened as a whole, its last
    part without following a link: the same guard at a third of the system calls (every
    job's end reads its log and events file)."""
    name = path.rpartition("/")[2]
    if name in ("", ".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    return _plain(fd, name, uids=(os.geteuid(), uid))
