"""An attempt's engine record: the small file next to its status file (``<status_path>.engine``).

Why it exists: crash safety. ``EngineBackend`` (``rota.backends.engine_backend``) writes the
record *before* it hands the attempt to its engine (its key, and its array's key, index and
size for an array member), then the engine's id once the engine answers; a later try of the
same attempt, or a daemon restarted in between, finds the record and asks the engine by the
key instead of submitting again. The poller (``rota.backends.engine_poller``) keeps in it how
much of the job's output is in the log already (``offset``, ``log_size``).

A record is written whole (a temporary file renamed over it): a reader sees the old one or
the new one, never half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rota.backends.engine import engine_key

#: The record of an attempt's engine job, next to its status file.
SUFFIX = ".engine"


def state_path(status_path: str | Path) -> Path:
    return Path(f"{status_path}{SUFFIX}")


def key_of(status_path: str | Path, install: str = "") -> str:
    """The engine key of an attempt from its status file's name (``<job>-<attempt>.json``,
    as the launcher names it) and this installation's id."""
    job, _, attempt = Path(status_path).name.removesuffix(".json").rpartition("-")
    return engine_key(install, int(job), int(attempt))


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            got = json.load(fh)
    except (FileNotFoundError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def _write_record(path: Path, record: dict[str, Any]) -> None:
    """Atomically: a reader sees the old record or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)
