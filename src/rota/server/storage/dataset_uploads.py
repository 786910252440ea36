"""Dataset uploads under way (``rota dataset add`` of a folder), kept on disk so that one a
daemon restart cut off goes on where it was.

Each upload is a folder of the daemon's staging area: ``MANIFEST.json`` (the files it
will hold, their sizes and sha256), ``upload.json`` (whose, which dataset, when begun;
written last, by a rename: its presence makes the upload exist) and ``files/``, where the
chunks are written. What each file has received is read back from the sizes of its
staged file: bytes are written in order (a chunk past what arrived is refused), and the
commit checks every file's sha256, so bytes a crash left wrong are caught there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.errors import StorageError
from rota.storage import Manifest

log = logging.getLogger("rota.datasets")

#: an upload not committed for this long is dropped
UPLOAD_KEPT_S = 24 * 3600.0
RECORD = "upload.json"
MANIFEST = "MANIFEST.json"


@dataclass
class Upload:
    """An upload under way: its files are written into ``staged`` chunk by chunk."""

    id: str
    owner: str
    name: str
    shared: bool
    description: str | None
    source: str
    manifest: Manifest
    dir: Path  # its folder: the record, the manifest, the staged files
    made_at: float
    received: dict[str, int] = field(default_factory=dict)  # path -> bytes written so far
    lock: threading.Lock = field(default_factory=threading.Lock)
    # its commit: under way or done (a second client of the same content waits for it,
    # and its writes are dropped: the staged files are being published); the version made
    committed: asyncio.Event | None = None
    sealed: bool = False
    result: dict[str, Any] | None = None

    @property
    def staged(self) -> Path:
        return self.dir / "files"

    @property
    def total(self) -> int:
        return self.manifest.total_size

    @property
    def done(self) -> int:
        return sum(self.received.values())


def save(up: Upload) -> None:
    """Write the upload's manifest and record (again, when it is taken up again: its
    settings and the time it was begun change)."""
    up.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    manifest = up.dir / MANIFEST
    if not manifest.exists():
        _write(manifest, up.manifest.to_json())
    record = {"id": up.id, "owner": up.owner, "name": up.name, "shared": up.shared,
              "description": up.description, "source": up.source, "made_at": up.made_at}
    _write(up.dir / RECORD, json.dumps(record).encode())


def drop(up: Upload) -> None:
    shutil.rmtree(up.dir, ignore_errors=True)


def load(root: Path, now: float) -> list[Upload]:
    """The uploads under ``root`` begun less than UPLOAD_KEPT_S ago, each with what its
    files received; everything else there (older uploads, unreadable ones, an import's
    leftovers) is removed."""
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        where = root / name
        try:
            up = _read(where)
        except (OSError, ValueError, KeyError, TypeError, StorageError) as e:
            if not isinstance(e, FileNotFoundError):
                log.warning("dataset upload %s could not be read; dropped: %s", where, e)
            up = None
        if up is None or now - up.made_at > UPLOAD_KEPT_S:
            _remove(where)
            continue
        up.received = _received(up)
        out.append(up)
    return out


def _read(where: Path) -> Upload:
    record = json.loads((where / RECORD).read_bytes())
    manifest = Manifest.from_json((where / MANIFEST).read_bytes())
    if record["id"] != where.name:
        raise ValueError(f"its record names upload {record['id']!r}")
    return Upload(id=record["id"], owner=str(record["owner"]), name=str(record["name"]),
                  shared=bool(record["shared"]), description=record["description"],
                  source=str(record["source"]), manifest=manifest, dir=where,
                  made_at=float(record["made_at"]))


def _received(up: Upload) -> dict[str, int]:
    """Each file's bytes on disk, at most its size (a file never written has none)."""
    sizes: dict[str, int] = {}
    top = up.staged
    for folder, _dirs, files in os.walk(top):
        rel = os.path.relpath(folder, top)
        for f in files:
            path = f if rel == "." else f"{rel}/{f}"
            with contextlib.suppress(OSError):
                sizes[path] = os.lstat(os.path.join(folder, f)).st_size
    out = {}
    for entry in up.manifest.files:
        got = sizes.get(entry.path)
        if got:
            out[entry.path] = min(got, entry.size)
    return out


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")  # two takers at once: two
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _remove(where: Path) -> None:
    if where.is_dir() and not where.is_symlink():
        shutil.rmtree(where, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            where.unlink()
