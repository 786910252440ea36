"""What both stores share: key rules, the layout's reserved names, verified copies and the
never-half-present fetch."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import BinaryIO, Protocol

from rota.errors import NotFound, RotaError, StorageError
from rota.storage.manifest import CHUNK, MANIFEST_NAME, FileEntry, safe_relpath

#: a key's files live under ``<key>/files/<manifest digest>/``; like MANIFEST.json, the
#: name cannot be a key's segment, so a key nested in another never meets its files
FILES_DIR = "files"
_RESERVED = frozenset({FILES_DIR, MANIFEST_NAME})
_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_MAX_KEY = 512


def check_key(key: str) -> str:
    """``key`` when it is ``/``-separated names of letters, digits, ``.``, ``_``, ``-`` (no
    name starting with a dot, so ``.staging`` is never a key); StorageError otherwise."""
    if not isinstance(key, str) or not key:
        raise StorageError(f"key {key!r}: a key cannot be empty")
    if len(key) > _MAX_KEY:
        raise StorageError(f"key {key[:40]!r}...: longer than {_MAX_KEY} characters")
    for seg in key.split("/"):
        if not seg:
            raise StorageError(f"key {key!r}: empty segment (a leading, trailing or double '/')")
        if not _SEGMENT.fullmatch(seg):
            raise StorageError(f"key {key!r}: segment {seg!r} is not allowed: keys are "
                               "'/'-separated names of letters, digits, '.', '_' and '-' "
                               "that do not start with '.'")
        if seg in _RESERVED:
            raise StorageError(f"key {key!r}: {seg!r} is reserved for the store's own layout")
    return key


def mismatch(where: str, entry: FileEntry, size: int, sha256: str | None) -> StorageError:
    got = f"{size} bytes" + (f", sha256 {sha256}" if sha256 else " so far")
    return StorageError(f"{where}: {entry.path} does not match its manifest: {got}; the "
                        f"manifest says {entry.size} bytes, sha256 {entry.sha256}")


class Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


def copy_verified(src: BinaryIO, out: Writable, entry: FileEntry, where: str) -> None:
    """``src`` into ``out``, refusing (StorageError naming the file) what is not ``entry``."""
    h, size = hashlib.sha256(), 0
    while chunk := src.read(CHUNK):
        size += len(chunk)
        if size > entry.size:  # no need to read the rest of a longer file
            raise mismatch(where, entry, size, None)
        h.update(chunk)
        out.write(chunk)
    if size != entry.size or h.hexdigest() != entry.sha256:
        raise mismatch(where, entry, size, h.hexdigest())


class VerifyingReader:
    """A staged file as an uploader reads it: at its end (or past the manifest's size) a
    file that is not what the manifest says raises, so the upload fails before it is
    completed. Not seekable, so the uploader reads it once, in order."""

    def __init__(self, f: BinaryIO, entry: FileEntry, where: str) -> None:
        self._f, self._entry, self._where = f, entry, where
        self._hash, self._size = hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, n: int | None = -1) -> bytes:
        data = self._f.read(-1 if n is None else n)
        self._size += len(data)
        if self._size > self._entry.size:
            raise mismatch(self._where, self._entry, self._size, None)
        self._hash.update(data)
        if n is None or n < 0 or len(data) < n:  # the end of a regular file
            digest = self._hash.copy().hexdigest()
            if self._size != self._entry.size or digest != self._entry.sha256:
                raise mismatch(self._where, self._entry, self._size, digest)
        return data


def open_staged(staged: Path, path: str, where: str) -> BinaryIO:
    """A staged file for reading: not through a symlink, neither at its end (O_NOFOLLOW)
    nor on the way (a folder that leads out of ``staged``)."""
    src = staged / path
    if not src.parent.resolve().is_relative_to(staged.resolve()):
        raise StorageError(f"{where}: staged file {path} is outside {staged} "
                           "(a symlink on the way)")
    try:
        return open(os.open(src, os.O_RDONLY | os.O_NOFOLLOW), "rb")
    except OSError as e:
        raise StorageError(f"{where}: cannot read staged file {src}: {e.strerror or e}") \
            from None


def fetch_into(dest: Path, entries: Iterable[FileEntry],
               open_entry: Callable[[FileEntry], AbstractContextManager[BinaryIO]],
               where: str) -> None:
    """Every entry into ``dest``, which appears only when all of them arrived verified:
    they are written into the hidden sibling ``.<name>.part-<pid>`` first."""
    if dest.exists() or dest.is_symlink():
        raise StorageError(f"{where}: {dest} exists already: fetch into a new folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.parent / f".{dest.name}.part-{os.getpid()}"
    shutil.rmtree(part, ignore_errors=True)  # this pid's leftover of an earlier crash
    part.mkdir()
    try:
        for entry in entries:
            out = part / entry.path
            out.parent.mkdir(parents=True, exist_ok=True)
            with open_entry(entry) as src, open(out, "xb") as f:
                copy_verified(src, f, entry, where)
        os.rename(part, dest)
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise


def select(entries: tuple[FileEntry, ...], find: Callable[[str], FileEntry | None],
           paths: Iterable[str] | None, where: str) -> list[FileEntry]:
    """The entries named by ``paths`` (all when None); NotFound for one not listed."""
    if paths is None:
        return list(entries)
    chosen: dict[str, FileEntry] = {}
    for p in paths:
        entry = find(safe_relpath(p))
        if entry is None:
            raise NotFound(f"{where}: no file {p!r} in its manifest")
        chosen[entry.path] = entry
    return list(chosen.values())


@contextmanager
def oserrors(where: str) -> Iterator[None]:
    """The filesystem's errors as StorageError naming the place and the cause (an
    interrupted call is passing trouble)."""
    try:
        yield
    except RotaError:
        raise
    except OSError as e:
        name = f" {e.filename}" if e.filename else ""
        raise StorageError(f"{where}:{name}: {e.strerror or e}",
                           passing=e.errno in (errno.EINTR, errno.EAGAIN)) from e


def node_cache(environ: Mapping[str, str], variable: str, name: str) -> Path:
    """A cache folder of a job's node: ``environ[variable]``, else
    ``$XDG_CACHE_HOME/rota/NAME`` (a relative value is ignored, as XDG says), else
    ``~/.cache/rota/NAME``."""
    if environ.get(variable):
        return Path(environ[variable])
    xdg = environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "rota" / name
