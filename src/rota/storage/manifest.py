"""Manifests: the list of a published key's files with their sizes and sha256.

A manifest is what a store publishes last and reads first: its presence makes a key exist,
and every fetched file is checked against it. :meth:`Manifest.digest` hashes the files only
(not when or with what notes they were published), so it names a dataset's version.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from pathlib import Path
from typing import Any

from rota.errors import StorageError

MANIFEST_NAME = "MANIFEST.json"
#: the files are read and hashed this many bytes at a time
CHUNK = 1 << 20
_FORMAT = 1
_HEX64 = re.compile(r"[0-9a-f]{64}")


def safe_relpath(path: str) -> str:
    """``path`` as a normalised relative posix path (``a//./b`` -> ``a/b``), or StorageError
    when it is empty, absolute, climbs out (``..``) or holds a NUL."""
    if not isinstance(path, str) or not path:
        raise StorageError(f"file path {path!r}: a path cannot be empty")
    if "\0" in path:
        raise StorageError(f"file path {path!r}: a path cannot hold a NUL character")
    if path.startswith("/"):
        raise StorageError(f"file path {path!r}: a path must be relative, not absolute")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise StorageError(f"file path {path!r}: a path cannot climb out with '..'")
    if not parts:
        raise StorageError(f"file path {path!r}: a path must name a file")
    return "/".join(parts)


@dataclass(frozen=True)
class FileEntry:
    path: str  # posix, relative, normalised (see safe_relpath)
    size: int
    sha256: str  # lowercase hex

    def __post_init__(self) -> None:
        if safe_relpath(self.path) != self.path:
            raise StorageError(f"file path {self.path!r} is not normalised: "
                               f"{safe_relpath(self.path)!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise StorageError(f"{self.path}: size {self.size!r} is not a whole number >= 0")
        if not isinstance(self.sha256, str) or not _HEX64.fullmatch(self.sha256):
            raise StorageError(f"{self.path}: sha256 {self.sha256!r} is not 64 lowercase "
                               "hex digits")


@dataclass(frozen=True)
class Manifest:
    files: tuple[FileEntry, ...]  # sorted by path on creation, one entry per path
    created_at: float
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        files = tuple(sorted(self.files, key=lambda f: f.path))
        for a, b in pairwise(files):
            if a.path == b.path:
                raise StorageError(f"manifest lists {a.path} twice")
        object.__setattr__(self, "files", files)  # sorted: equal content, equal manifests

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

    def find(self, path: str) -> FileEntry | None:
        i = bisect_left(self.files, path, key=lambda f: f.path)
        return self.files[i] if i < len(self.files) and self.files[i].path == path else None

    def to_json(self) -> bytes:
        """Stable bytes: sorted keys, sorted files, no spaces."""
        doc = {"format": _FORMAT, "created_at": self.created_at, "meta": self.meta,
               "files": [_entry_doc(f) for f in self.files]}
        try:
            return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:
            raise StorageError(f"manifest meta is not JSON: {e}") from None

    def digest(self) -> str:
        """sha256 hex of the files alone (path, size, sha256): equal for equal content
        whenever and however it was published."""
        return self._digest

    @cached_property
    def _digest(self) -> str:
        files = [_entry_doc(f) for f in self.files]
        return hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":"))
                              .encode()).hexdigest()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """The manifest in ``data``; StorageError naming what is wrong otherwise."""
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise StorageError(f"manifest is not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise StorageError("manifest is not a JSON object")
        if doc.get("format", _FORMAT) != _FORMAT:
            raise StorageError(f"manifest format {doc['format']!r} is not known "
                               f"(this Rota reads {_FORMAT})")
        created, meta, files = doc.get("created_at"), doc.get("meta", {}), doc.get("files")
        if isinstance(created, bool) or not isinstance(created, int | float):
            raise StorageError(f"manifest created_at {created!r} is not a number")
        if not isinstance(meta, dict):
            raise StorageError("manifest meta is not a JSON object")
        if not isinstance(files, list):
            raise StorageError("manifest files is not a list")
        return cls(files=tuple(_entry(i, f) for i, f in enumerate(files)),
                   created_at=float(created), meta=meta)


def _entry_doc(f: FileEntry) -> dict[str, Any]:
    return {"path": f.path, "size": f.size, "sha256": f.sha256}


def _entry(i: int, doc: Any) -> FileEntry:
    if not isinstance(doc, dict):
        raise StorageError(f"manifest files[{i}] is not a JSON object")
    try:
        return FileEntry(path=doc.get("path"), size=doc.get("size"),  # type: ignore[arg-type]
                         sha256=doc.get("sha256"))  # type: ignore[arg-type]
    except StorageError as e:
        raise StorageError(f"manifest files[{i}]: {e}") from None


def build_manifest(folder: Path, *, meta: Mapping[str, Any] | None = None,
                   now: float) -> Manifest:
    """A manifest of the regular files under ``folder``. Symlinks are not followed (one
    could point anywhere on this machine) and, like fifos, sockets and devices, are left
    out: their paths go to ``meta["skipped"]`` (sorted; set in every manifest built here)."""
    files: list[FileEntry] = []
    skipped: list[str] = []
    _walk(Path(folder), "", files, skipped)
    return Manifest(files=tuple(files), created_at=now,
                    meta={**(meta or {}), "skipped": sorted(skipped)})


def _walk(folder: Path, rel: str, files: list[FileEntry], skipped: list[str]) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
        raise StorageError(f"cannot read {folder}: {e.strerror or e}") from None
    for entry in entries:
        path = f"{rel}{entry.name}"
        try:
            path.encode()
        except UnicodeEncodeError:  # a name that is not UTF-8 has no place in a manifest
            skipped.append(path)
            continue
        if entry.is_dir(follow_symlinks=False):
            _walk(Path(entry.path), f"{path}/", files, skipped)
        elif entry.is_file(follow_symlinks=False):
            got = _hash_regular(Path(entry.path))
            if got is None:  # replaced by something else since the listing
                skipped.append(path)
            else:
                files.append(FileEntry(path=path, size=got[0], sha256=got[1]))
        else:
            skipped.append(path)


def _hash_regular(path: Path) -> tuple[int, str] | None:
    """(size, sha256) of the regular file at ``path``; None when it is not one. Opened
    without following a symlink, and without blocking should it have become a fifo."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):  # a symlink or a socket by now
            return None
        raise StorageError(f"cannot read {path}: {e.strerror or e}") from None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        h, size = hashlib.sha256(), 0
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()
