"""A machine's cache of dataset versions, so jobs that use the same dataset fetch it once.

A version is named by its manifest's digest (:meth:`~rota.storage.manifest.Manifest.digest`,
64 hex): the same files whenever and under whatever key they were published. Layout under
the root (mode 0711: a version's path can be opened by whoever knows its digest, the list
of versions cannot be read):

- ``<digest>/``: a complete, verified, read-only version. It appears by one rename when
  all its files arrived, so its presence means it is whole; a crash never leaves a part.
  Read-only modes do not stop root, nor the owner of the files: before a version is used
  again it is checked against its seal (rota.storage.cache_seal), and one that was changed
  is moved out and fetched again (:meth:`DatasetCache.intact`, :meth:`DatasetCache.fetch`).
- ``.meta/<digest>.json``: its size, file count, last use (for LRU eviction) and seal,
  written before the rename and replaced atomically.
- ``.incoming/``: downloads under way (``<digest>-<uuid>``, the store's own ``.part``
  folder beside it, and a ``.lock`` that the downloader holds while it lives).
- ``.trash/``: evicted versions, renamed there (gone for readers at once) then removed.
- ``.lock``: flock'ed by whoever evicts, places a version or writes a sidecar, so several
  processes (the jobs of one node) can share the root. It is not held during downloads.

- ``.inuse/<digest>``: flock'ed shared by each process reading that version
  (:meth:`DatasetCache.hold`: a cluster job's fetch, held through its command); a version
  so held is never evicted, by any process sharing the root.

A root belongs to one account (a user's jobs, or a root daemon that hands versions to
their owners): the hidden folders are that account's alone. Callers in one process name
what they need in ``keep`` (the daemon: the versions of its starting and running jobs);
other processes' readers hold theirs.
Downloads under way are not counted against the limit, so concurrent fetches of new
versions may overshoot it until the next eviction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from rota.errors import NotFound, StorageError
from rota.storage._common import oserrors
from rota.storage.cache_seal import past_this_tick, seal_of
from rota.storage.store import ObjectStore
from rota.units import format_memory

__all__ = ["LEFTOVER_AGE_S", "CacheEntry", "CacheFull", "DatasetCache"]

#: leftovers in ``.incoming`` and ``.trash`` older than this (and no longer locked by a
#: live download) are an interrupted process's: clean_leftovers removes them
LEFTOVER_AGE_S = 3600.0
_HEX64 = re.compile(r"[0-9a-f]{64}")
_META, _INCOMING, _TRASH, _LOCK = ".meta", ".incoming", ".trash", ".lock"
_INUSE = ".inuse"
_ROOT_MODE = 0o711
_PRIVATE = 0o700


class CacheFull(StorageError):
    """The cache's limit cannot hold a version, even after evicting every version that is
    not kept. Not passing: the same fetch with the same limit and needs fails again."""


@dataclass(frozen=True)
class CacheEntry:
    digest: str  # its name in the cache: the content's digest, or a private copy's slot
    size: int  # bytes of its files
    files: int
    used_at: float  # the last fetch or touch (epoch seconds)
    seal: str | None = None  # its files as placed (cache_seal); None: unknown, not trusted


class DatasetCache:
    """The cache under ``root``; ``limit``: the bytes its versions may hold (None: no limit).
    Safe to share between processes and between threads of one process."""

    def __init__(self, root: Path, limit: int | None, *, mode: int = _ROOT_MODE) -> None:
        """``mode``: the root's, when it is made (0711: other accounts' jobs pass through
        to the versions they may read; 0700 where every job is the owner's)."""
        if limit is not None and (isinstance(limit, bool) or limit < 0):
            raise StorageError(f"dataset cache {root}: limit {limit!r} is not a number of "
                               "bytes >= 0")
        self.root = Path(root).absolute()
        self.limit = limit
        self._thread_lock = threading.Lock()
        with oserrors(f"dataset cache {self.root}"):
            if not self.root.is_dir():
                self.root.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):  # another process made it
                    self.root.mkdir()
                    os.chmod(self.root, mode)  # exactly, whatever the umask

    # -- reading

    def path(self, digest: str) -> Path:
        return self.root / _check_digest(digest)

    def present(self, digest: str) -> bool:
        """Whether the version is here, whole (it only ever appears complete)."""
        return self.path(digest).is_dir()

    def entry(self, digest: str) -> CacheEntry | None:
        """The version's entry; None when it is not here."""
        if not self.present(digest):
            return None
        return self._read_entry(digest)

    def entries(self) -> list[CacheEntry]:
        """The versions here, least recently used first."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        found = [e for name in names if _HEX64.fullmatch(name)
                 if (e := self._read_entry(name)) is not None]
        return sorted(found, key=lambda e: (e.used_at, e.digest))

    def intact(self, digest: str) -> bool:
        """Whether the version is here as it was placed: False when it is not here, when
        a file in it changed since (rota.storage.cache_seal: one lstat per file, no
        content read), or when it has no seal to check (its sidecar was lost)."""
        entry = self.entry(digest)
        if entry is None or entry.seal is None:
            return False
        try:
            return seal_of(self.path(digest)) == entry.seal
        except OSError:  # evicted meanwhile, or a folder in it closed even to its owner
            return False

    def used(self) -> int:
        """Bytes held by the versions here (downloads under way are not counted)."""
        return sum(e.size for e in self.entries())

    # -- changing

    def touch(self, digest: str, now: float) -> None:
        """Records a use at ``now``: the version is evicted after those used less lately."""
        with self._locked():
            if not self.present(digest):
                raise NotFound(f"dataset cache {self.root}: no version {digest}")
            self._touch_locked(digest, now)

    def make_room(self, need: int, keep: Collection[str], now: float) -> list[str]:
        """Evicts the least recently used versions not in ``keep`` until ``need`` more
        bytes fit under the limit; returns their digests, in eviction order. CacheFull,
        evicting nothing, when they cannot fit even so."""
        with self._locked():
            removed = self._make_room_locked(need, keep, now)
        self._empty_trash(removed)
        return [digest for digest, _ in removed]

    def hold(self, digest: str) -> int:
        """A descriptor whose shared flock on ``.inuse/<digest>`` keeps the version from
        eviction by any process sharing the root while it is open: in the reader itself,
        and in what it execs when inheritable (a cluster job's command). Closing it (or the
        end of every process holding it) lets the version go. Taken under the cache's lock,
        so an eviction never slips between the open and the flock."""
        _check_digest(digest)
        with self._locked(), oserrors(f"dataset cache {self.root}: hold {digest[:12]}"):
            (self.root / _INUSE).mkdir(mode=_PRIVATE, exist_ok=True)
            fd = os.open(self.root / _INUSE / digest, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC,
                         0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
            except BaseException:
                os.close(fd)
                raise
        return fd

    def remove(self, digest: str, now: float = 0.0) -> bool:
        """The version out of the cache (its dataset was removed); False when it was not
        here."""
        with self._locked():
            if not self.present(digest):
                return False
            aside = self._evict_locked(digest, now)
        self._empty_trash([(digest, aside)])
        return True

    def fetch(self, store: ObjectStore, key: str, digest: str, *,
              keep: Collection[str] = (), now: float,
              owner: tuple[int, int] | None = None, slot: str | None = None,
              changed: Callable[[str], object] | None = None) -> Path:
        """The version ``digest`` of ``key``, from the cache or fetched into it; returns its
        read-only folder. ``keep``: versions that must not be evicted to make room (the
        others the same job uses). ``owner`` (uid, gid): the version is that account's
        alone (a root daemon fetching a private dataset): chowned, modes 0400/0500.

        A version here is checked first (:meth:`intact`): one changed since it was placed
        is moved out and fetched again, and ``changed`` is told its name.

        ``slot``: the name it is cached under (64 hex digits) when not ``digest``: the same
        content as one account's private copy and as another's, or as a shared one.

        The key must still hold that version: a key republished with other files since the
        digest was chosen is refused rather than served under the old name."""
        name = slot or digest
        target = self.path(name)
        where = f"dataset cache {self.root}: {store.url}: {key}"
        if self._here(name, now, changed):
            return target
        manifest = store.manifest(key)
        if manifest is None:
            raise NotFound(f"{store.url}: no key {key!r}")
        if manifest.digest() != digest:
            raise _republished(where, digest, manifest.digest())
        with self._locked():
            if target.is_dir():  # another process brought it meanwhile
                self._touch_locked(name, now)
                return target
            removed = self._make_room_locked(manifest.total_size, {*keep, name}, now)
        self._empty_trash(removed)
        return self._download(store, key, digest, where, now, owner, name)

    def clean_leftovers(self, now: float) -> list[str]:
        """Removes what interrupted processes left: downloads and evicted versions older
        than LEFTOVER_AGE_S (a download whose process still lives is spared, however old),
        and sidecars without their version. Returns them, as paths under the root."""
        cutoff = now - LEFTOVER_AGE_S
        removed: list[str] = []
        with oserrors(f"dataset cache {self.root}: clean leftovers"):
            incoming = self.root / _INCOMING
            names = _listdir(incoming)
            live = {_download_id(n) for n in names if n.endswith(".lock")
                    and _held(incoming / n)}
            for name in names:
                if _download_id(name) not in live and _mtime(incoming / name) <= cutoff:
                    _remove(incoming / name)
                    removed.append(f"{_INCOMING}/{name}")
            for name in _listdir(self.root / _TRASH):
                if _mtime(self.root / _TRASH / name) <= cutoff:
                    _remove(self.root / _TRASH / name)
                    removed.append(f"{_TRASH}/{name}")
            with self._locked():  # sidecars change only under the lock: none is half made
                for name in _listdir(self.root / _META):
                    digest = name.removesuffix(".json")
                    if name.endswith(".json") and _HEX64.fullmatch(digest) \
                            and (self.root / digest).is_dir():
                        continue
                    if name.endswith(".json") or _mtime(self.root / _META / name) <= cutoff:
                        _remove(self.root / _META / name)
                        removed.append(f"{_META}/{name}")
        return sorted(removed)

    # -- helpers

    def _here(self, name: str, now: float, changed: Callable[[str], object] | None) -> bool:
        """Whether the version is here intact (its use recorded); one changed since it
        was placed is moved out first (checked again under the lock: another process may
        have placed it afresh meanwhile)."""
        target = self.path(name)
        if not target.is_dir():
            return False
        ok = self.intact(name)  # (outside the lock: a big version takes a while)
        with self._locked():
            if ok or self.intact(name):
                if not target.is_dir():
                    return False
                self._touch_locked(name, now)
                return True
            if not target.is_dir():
                return False
            aside = self._evict_locked(name, now)
        self._empty_trash([(name, aside)])
        if changed is not None:
            changed(name)
        return False

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's threads, then other processes (flock on ``.lock``), one at a
        time. A new descriptor each time: a fork never inherits a held lock by mistake."""
        with self._thread_lock:
            with oserrors(f"dataset cache {self.root}: lock"):
                fd = os.open(self.root / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                with oserrors(f"dataset cache {self.root}: lock"):
                    fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def _make_room_locked(self, need: int, keep: Collection[str],
                          now: float) -> list[tuple[str, Path]]:
        """Under the lock: the evicted versions, each renamed into ``.trash`` already."""
        if self.limit is None:
            return []
        keep = set(keep)
        entries = self.entries()
        used = sum(e.size for e in entries)
        if used + need <= self.limit:
            return []
        kept = sum(e.size for e in entries if e.digest in keep)
        if kept + need > self.limit:  # evicting the others would not be enough
            raise CacheFull(
                f"dataset cache {self.root}: {_size(need)} cannot fit under its limit of "
                f"{_size(self.limit)}: versions kept for the same job hold {_size(kept)} "
                "(raise the limit, or use fewer or smaller datasets at once)")
        evictable = [e for e in entries if e.digest not in keep
                     and not _held(self.root / _INUSE / e.digest)]  # (others' readers)
        freeable = sum(e.size for e in evictable)
        if used - freeable + need > self.limit:
            busy = used - kept - freeable
            raise StorageError(
                f"dataset cache {self.root}: {_size(need)} cannot fit under its limit of "
                f"{_size(self.limit)} while other jobs here read {_size(busy)} of it; it "
                "may once they end", passing=True)
        removed: list[tuple[str, Path]] = []
        with oserrors(f"dataset cache {self.root}: evict"):
            for e in evictable:  # least recently used first
                if used + need <= self.limit:
                    break
                removed.append((e.digest, self._evict_locked(e.digest, now)))
                used -= e.size
        return removed

    def _evict_locked(self, digest: str, now: float) -> Path:
        """Out of readers' sight in one rename; the caller removes it after the lock."""
        (self.root / _TRASH).mkdir(mode=_PRIVATE, exist_ok=True)
        aside = self.root / _TRASH / f"{digest}-{uuid.uuid4().hex}"
        os.rename(self.root / digest, aside)
        with contextlib.suppress(OSError):  # its age in the trash, not since it arrived
            os.utime(aside, (now, now), follow_symlinks=False)
        (self.root / _META / f"{digest}.json").unlink(missing_ok=True)
        return aside

    def _empty_trash(self, removed: list[tuple[str, Path]]) -> None:
        for _, aside in removed:
            _remove(aside)

    def _download(self, store: ObjectStore, key: str, digest: str, where: str,
                  now: float, owner: tuple[int, int] | None, name: str) -> Path:
        target = self.path(name)
        incoming = self.root / _INCOMING
        with oserrors(where):
            incoming.mkdir(mode=_PRIVATE, exist_ok=True)
            dest = incoming / f"{name}-{uuid.uuid4().hex}"
            lock = dest.with_name(f"{dest.name}.lock")
            # held while this process lives: clean_leftovers spares a download however long
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                got = store.fetch(key, dest)
                if got.digest() != digest:  # republished between manifest() and fetch()
                    raise _republished(where, digest, got.digest())
                with oserrors(where):
                    _seal(dest, owner)
                    past_this_tick()  # a change after the seal cannot keep its times
                    sealed = seal_of(dest)  # (its folder's rename below is not part of it)
                    with self._locked():
                        if target.is_dir():  # another process won: theirs is the same
                            self._touch_locked(name, now)
                        else:
                            self._write_meta(name, CacheEntry(
                                name, got.total_size, len(got.files), now, sealed))
                            os.rename(dest, target)
            finally:
                if dest.exists():  # failed, or lost to another process
                    _remove(dest)
        finally:
            lock.unlink(missing_ok=True)
            os.close(fd)
        return target

    def _touch_locked(self, digest: str, now: float) -> None:
        entry = self._read_entry(digest)
        if entry is not None:
            self._write_meta(digest, dataclasses.replace(entry, used_at=now))

    def _read_entry(self, digest: str) -> CacheEntry | None:
        """From the sidecar, or (one lost or damaged) from the files themselves. None when
        the version is not here."""
        try:
            doc = json.loads((self.root / _META / f"{digest}.json").read_bytes())
            got = doc.get("seal")
            return CacheEntry(digest, int(doc["size"]), int(doc["files"]),
                              float(doc["used_at"]), got if isinstance(got, str) else None)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        size = files = 0
        folder = self.root / digest
        try:
            used_at = folder.stat().st_mtime
            for parent, _, names in os.walk(folder):
                for name in names:
                    size += os.lstat(os.path.join(parent, name)).st_size
                    files += 1
        except FileNotFoundError:
            return None
        return CacheEntry(digest, size, files, used_at)

    def _write_meta(self, digest: str, entry: CacheEntry) -> None:
        """Under the lock; replaced in one rename, so readers see the old or the new."""
        meta = self.root / _META
        meta.mkdir(mode=_PRIVATE, exist_ok=True)
        tmp = meta / f".{digest}.{uuid.uuid4().hex}.tmp"
        doc = {"size": entry.size, "files": entry.files, "used_at": entry.used_at,
               "seal": entry.seal}
        try:
            tmp.write_text(json.dumps(doc, sort_keys=True))
            os.replace(tmp, meta / f"{digest}.json")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _check_digest(digest: str) -> str:
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise StorageError(f"dataset version {digest!r} is not a manifest digest "
                           "(64 lowercase hex digits)")
    return digest


def _republished(where: str, want: str, got: str) -> StorageError:
    return StorageError(f"{where}: the key holds version {got[:12]}, not {want[:12]}: it "
                        "was republished with other files since this version was chosen")


def _size(n: int) -> str:
    return f"{format_memory(n)} ({n} bytes)" if n >= 1024 else f"{n} bytes"


def _seal(top: Path, owner: tuple[int, int] | None) -> None:
    """Read-only for everyone (0444/0555), or ``owner``'s alone (0400/0500): a job cannot
    change what the next job of the same version reads."""
    file_mode, dir_mode = (0o444, 0o555) if owner is None else (0o400, 0o500)
    for parent, _, files in os.walk(top, topdown=False):  # a folder after its content
        for name in files:  # regular files only: the store's fetch makes nothing else
            path = os.path.join(parent, name)
            if owner is not None:
                os.chown(path, *owner)
            os.chmod(path, file_mode)
        if owner is not None:
            os.chown(parent, *owner)
        os.chmod(parent, dir_mode)


def _remove(path: Path) -> None:
    """A file, or a tree whose read-only folders are first made writable again."""
    if path.is_dir() and not path.is_symlink():
        for parent, _, _ in os.walk(path):
            with contextlib.suppress(OSError):
                os.chmod(parent, _PRIVATE)
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _listdir(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except FileNotFoundError:
        return time.time()  # gone meanwhile: never old


def _download_id(name: str) -> str:
    """The download an ``.incoming`` entry belongs to: ``<digest>-<uuid>`` for the folder,
    its ``.lock``, and the store's ``.<digest>-<uuid>.part-<pid>``."""
    name = name.removeprefix(".").removesuffix(".lock")
    return name.split(".part-")[0]


def _held(lock: Path) -> bool:
    """Whether a live process holds ``lock`` (a download under way)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


