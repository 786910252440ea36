"""A dataset's files as the client uploads them: listed with their sizes and sha256 (the
manifest the daemon checks the upload against), then sent in chunks.

A link to a file is followed (a Hugging Face snapshot is links into its blob folder), one to
a folder is not (it could loop); fifos, sockets and devices are refused, by name.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rota.errors import InvalidSpec

READ_BYTES = 1 << 20


@dataclass(frozen=True)
class LocalFile:
    local: Path
    entry: dict[str, Any]  # path (relative, '/'), size, sha256


def dataset_files(path: Path) -> list[LocalFile]:
    """Every regular file under the folder ``path`` (or ``path`` itself, a file)."""
    top = Path(path).expanduser()
    try:
        st = top.stat()
    except OSError as e:
        raise InvalidSpec(f"{path}: {e.strerror or e}", field="path") from None
    if stat.S_ISREG(st.st_mode):
        return [_listed(top, top.name)]
    if not stat.S_ISDIR(st.st_mode):
        raise InvalidSpec(f"{path}: neither a folder nor a file", field="path")
    out: list[LocalFile] = []
    for folder, dirs, names in os.walk(top, onerror=_refuse):
        dirs.sort()
        for name in sorted(names):
            full = Path(folder) / name
            rel = full.relative_to(top).as_posix()
            try:
                mode = full.stat().st_mode
            except OSError as e:
                raise InvalidSpec(f"{full}: {e.strerror or e} (a broken link?)",
                                  field="path") from None
            if stat.S_ISDIR(mode):  # a link to a folder: not followed
                raise InvalidSpec(f"{full}: a link to a folder; copy what it holds in, or "
                                  "add that folder on its own", field="path")
            if not stat.S_ISREG(mode):
                raise InvalidSpec(f"{full}: not a regular file", field="path")
            out.append(_listed(full, rel))
    if not out:
        raise InvalidSpec(f"{path}: holds no file", field="path")
    return out


def _refuse(e: OSError) -> None:
    raise InvalidSpec(f"{e.filename}: {e.strerror or e}", field="path")


def _listed(local: Path, rel: str) -> LocalFile:
    digest = hashlib.sha256()
    size = 0
    try:
        with open(local, "rb") as f:
            while chunk := f.read(READ_BYTES):
                digest.update(chunk)
                size += len(chunk)
    except OSError as e:
        raise InvalidSpec(f"{local}: {e.strerror or e}", field="path") from None
    return LocalFile(local, {"path": rel, "size": size, "sha256": digest.hexdigest()})


def send_files(put: Callable[[LocalFile, int, bytes], object], files: Sequence[LocalFile],
               chunk_bytes: int, progress: Callable[[int, int], object] | None,
               received: Mapping[str, int] | None = None) -> None:
    """Each file's bytes, ``chunk_bytes`` at a time, through ``put(file, offset, data)``
    (an empty file needs none), from what the daemon has of it already (``received``:
    path -> bytes, an upload cut off earlier)."""
    total = sum(f.entry["size"] for f in files)
    have = received or {}
    sent = sum(min(have.get(f.entry["path"], 0), f.entry["size"]) for f in files)
    if progress is not None and sent:
        progress(sent, total)
    for f in files:
        offset = min(have.get(f.entry["path"], 0), f.entry["size"])
        with open(f.local, "rb") as src:
            src.seek(offset)
            while data := src.read(chunk_bytes):
                put(f, offset, data)
                offset += len(data)
                sent += len(data)
                if progress is not None:
                    progress(sent, total)
        if offset != f.entry["size"]:
            raise InvalidSpec(f"{f.local}: changed while it was sent ({offset} bytes, "
                              f"{f.entry['size']} when listed); add the dataset again",
                              field="path")
