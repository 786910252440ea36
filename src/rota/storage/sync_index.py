"""A synced folder's index (rota.storage.sync): path -> size, ETag and local mtime_ns of each
file as both sides held it when they last matched, kept in a file beside the folder. A sync
compares each side with it to learn what changed where; a missing or damaged index is an
empty one, for which nothing is removed on either side.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

INDEX_VERSION = 1


@dataclass(frozen=True, slots=True)
class Indexed:
    """A file as both sides last held it: the object's size and ETag, the local file's
    mtime (ns)."""

    size: int
    etag: str
    mtime_ns: int


Index = dict[str, Indexed]


def load_index(path: Path) -> Index:
    """The index kept at ``path``; empty when there is none. A damaged one counts as none:
    every file is then new to both sides, so nothing is removed on either side for it, and
    a file on both sides is kept as it is here unless the bytes are the same."""
    try:
        doc = json.loads(Path(path).read_text())
        files = doc["files"]
        return {str(k): Indexed(int(v[0]), str(v[1]), int(v[2])) for k, v in files.items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return {}


def save_index(path: Path, index: Index) -> None:
    """Write the index atomically (aside, then renamed over the old one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    doc = {"version": INDEX_VERSION,
           "files": {k: [v.size, v.etag, v.mtime_ns] for k, v in sorted(index.items())}}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
