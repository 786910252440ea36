"""A dataset's files as the client uploads them: listed with their sizes and sha256 (the
manifest the daemon checks the upload against), then sent in chunks.

A link to a file is followed (a Hugging Face snapshot is links into its blob folder), one to
a folder is not (it could loop); fifos, sockets and devices are refused, by name.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rota.errors import InvalidSpec

READ_BYTES = 1 << 20
#: files of at most this many bytes go whole, many in one request (one request per file
#: costs more than such a file: about 0.75 ms)
SMALL_FILE = 256 << 10
#: the most files one such request carries
BATCH_FILES = 1000
#: room left in a request for the tar's long-name headers and its end
TAR_SLACK = 64 << 10


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


def send_files(put: Callable[[LocalFile, int, bytes], object],
               put_files: Callable[[bytes], object], files: Sequence[LocalFile],
               chunk_bytes: int, progress: Callable[[int, int], object] | None,
               received: Mapping[str, int] | None = None) -> None:
    """Each file's bytes the daemon does not have yet (``received``: path -> bytes, of an
    upload cut off earlier): a file of at most SMALL_FILE bytes whole, with others, in one
    tar through ``put_files(tar)``; a larger one ``chunk_bytes`` at a time through
    ``put(file, offset, data)``. An empty file needs none."""
    total = sum(f.entry["size"] for f in files)
    have = received or {}
    sent = sum(min(have.get(f.entry["path"], 0), f.entry["size"]) for f in files)
    if progress is not None and sent:
        progress(sent, total)
    budget = chunk_bytes - TAR_SLACK
    batch: list[tuple[LocalFile, bytes]] = []

    def flush() -> None:
        nonlocal sent
        if batch:
            put_files(_tar(batch))
            sent += sum(len(data) - have.get(f.entry["path"], 0) for f, data in batch)
            batch.clear()
            if progress is not None:
                progress(sent, total)

    for f in files:
        size = f.entry["size"]
        offset = min(have.get(f.entry["path"], 0), size)
        if offset == size:
            continue
        if size <= SMALL_FILE:
            if _tar_size(batch) + _member_size(size) > budget or len(batch) >= BATCH_FILES:
                flush()
            batch.append((f, _whole(f)))
            continue
        with open(f.local, "rb") as src:
            src.seek(offset)
            while data := src.read(chunk_bytes):
                put(f, offset, data)
                offset += len(data)
                sent += len(data)
                if progress is not None:
                    progress(sent, total)
        if offset != size:
            raise _changed(f, offset)
    flush()


def _changed(f: LocalFile, size: int) -> InvalidSpec:
    return InvalidSpec(f"{f.local}: changed while it was sent ({size} bytes, "
                       f"{f.entry['size']} when listed); add the dataset again", field="path")


def _whole(f: LocalFile) -> bytes:
    try:
        data = f.local.read_bytes()
    except OSError as e:
        raise InvalidSpec(f"{f.local}: {e.strerror or e}", field="path") from None
    if len(data) != f.entry["size"]:
        raise _changed(f, len(data))
    return data


def _member_size(size: int) -> int:
    """A file's bytes in a tar: its header and its data, in 512-byte blocks (a long name's
    extra header is in TAR_SLACK)."""
    return 512 + -(-size // 512) * 512


def _tar_size(batch: Sequence[tuple[LocalFile, bytes]]) -> int:
    return sum(_member_size(len(data)) for _, data in batch)


def _tar(batch: Sequence[tuple[LocalFile, bytes]]) -> bytes:
    """The files as an uncompressed tar, each named by its manifest path."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for f, data in batch:
            info = tarfile.TarInfo(f.entry["path"])
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
