"""The attempt's status file for a container, and how Docker's end state reads as an exit.

The status file holds the container's id at the start and how it ended at the end (the
same ``ended_at``/``exit_code``/``signal`` fields the shims write, plus ``oom_killed``), so
the end is known after the container has been removed. It never holds the environment.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rota.backends.base import ExitInfo
from rota.backends.common import exit_info_from_status, read_status


@dataclass(frozen=True, slots=True)
class ContainerExit(ExitInfo):
    """An ExitInfo that also says whether the kernel's OOM killer struck in the container
    (its memory limit). Meant as a field of ExitInfo itself (see docs/containers.md)."""

    oom_killed: bool = False


def write_record(path: str | Path, record: dict[str, Any]) -> None:
    """Replace the status file atomically (a reader never sees half of it)."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)


def read_record(path: str | Path) -> dict[str, Any]:
    return read_status(path) or {}


def exit_of_record(record: dict[str, Any]) -> ContainerExit | None:
    info = exit_info_from_status(record)
    if info is None:
        return None
    return ContainerExit(info.exit_code, info.signal, info.ended_at,
                         oom_killed=bool(record.get("oom_killed")))


def exit_of_state(state: dict[str, Any]) -> ContainerExit:
    """Docker's ``State`` of an ended container as an exit. docker-init reports a job
    killed by signal N as 128 + N (as shells do), and so does Docker for its init: those
    codes read as the signal, the one way Docker's record allows."""
    code = int(state.get("ExitCode") or 0)
    sig = code - 128 if 128 < code < 128 + signal.NSIG else None
    return ContainerExit(exit_code=None if sig else code, signal=sig,
                         ended_at=_unix_time(state.get("FinishedAt")) or time.time(),
                         oom_killed=bool(state.get("OOMKilled")))


def end_fields(info: ContainerExit) -> dict[str, Any]:
    return {"ended_at": info.ended_at, "exit_code": info.exit_code, "signal": info.signal,
            "oom_killed": info.oom_killed}


def _unix_time(text: str | None) -> float | None:
    """Docker's RFC 3339 time (nanoseconds; Python keeps microseconds); its zero time, or
    none, is None."""
    if not text or text.startswith("0001-"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None
