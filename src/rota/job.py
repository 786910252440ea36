"""For a job's own code: tell Rota about metrics and checkpoints, and learn when Rota asks the
job to stop. Standard library only, and a no-op outside Rota, so a script keeps working
anywhere (this file can be copied next to a script whose environment lacks Rota).

    from rota import job

    start = load(job.resume_from()) if job.resume_from() else 0
    for step in range(start, total):
        loss = train_step()
        job.report(step=step, total_steps=total, loss=loss)
        if step % 500 == 0 or job.should_stop():
            save(path)
            job.checkpoint_saved(path, step=step)
        if job.should_stop():
            break  # Rota requeues the job; the next attempt resumes from `path`

Rota reads the job's printed output as well (``loss: 1.23``, tqdm bars, ...); ``report`` is
for those who prefer to say it explicitly. Each call appends one JSON line to the file named
by ``ROTA_EVENTS_FILE``; in a distributed run only rank 0 writes unless ``all_ranks=True``.

A job that fails can say why before it exits non-zero:

    if not results:
        job.fail_reason("the eval set is empty")  # prints `rota: FAILED: the eval set ...`
        sys.exit(1)

and the job's end reads ``exit code 1: the eval set is empty`` (``rota why``, ``rota show``,
the dashboard) instead of ``exit code 1`` alone. It is a line on stderr, so it works on
every pool (an engine's output is copied into the job's log) and anywhere else is just a
line of output.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
from typing import Any

__all__ = ["checkpoint_saved", "fail_reason", "grace_seconds", "report", "resume_from",
           "should_stop", "take_stop_signal"]

_lock = threading.Lock()
_stop = threading.Event()
_handler_installed = False


def _rank0() -> bool:
    return os.environ.get("RANK", "0") == "0"


def _write(record: dict[str, Any], all_ranks: bool) -> bool:
    path = os.environ.get("ROTA_EVENTS_FILE")
    if not path or not (all_ranks or _rank0()):
        return False
    record["ts"] = time.time()
    line = json.dumps(record, allow_nan=False, default=str) + "\n"
    with _lock, open(path, "a", encoding="utf-8") as f:  # one write: a reader sees whole lines
        f.write(line)
    return True


def report(step: int | None = None, *, total_steps: int | None = None,
           epoch: float | None = None, total_epochs: int | None = None,
           all_ranks: bool = False, **metrics: float) -> bool:
    """Record metrics (``loss=1.2, lr=3e-4``) and progress. Values that are not finite
    numbers are left out. Returns whether anything was written (False outside Rota)."""
    clean = {k: float(v) for k, v in metrics.items()
             if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
    record: dict[str, Any] = {"kind": "metrics", "metrics": clean}
    for key, value in (("step", step), ("total_steps", total_steps), ("epoch", epoch),
                       ("total_epochs", total_epochs)):
        if value is not None:
            record[key] = value
    return _write(record, all_ranks)


def checkpoint_saved(path: str | os.PathLike[str], *, step: int | None = None,
                     all_ranks: bool = False) -> bool:
    """Tell Rota a checkpoint is complete on disk: the next attempt may resume from it."""
    record: dict[str, Any] = {"kind": "checkpoint", "path": os.path.abspath(os.fspath(path))}
    if step is not None:
        record["step"] = int(step)
    return _write(record, all_ranks)


def fail_reason(reason: str, *, program: str | None = None) -> str:
    """Say why this job is failing, just before it exits non-zero: one line on stderr,
    ``rota: FAILED: <reason>`` (``rota-<program>: FAILED: ...`` with ``program``), which
    Rota records with the job's end. The reason is put on one line (at most 1,000
    characters are kept); the last such line of the attempt's output counts. Returns the
    line printed."""
    if program is not None and not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", program):
        raise ValueError(f"program {program!r}: lowercase letters, digits and '-'")
    one = "; ".join(s.strip() for s in str(reason).splitlines() if s.strip()) or "failed"
    name = f"rota-{program}" if program else "rota"
    line = f"{name}: FAILED: {one}"
    with contextlib.suppress(OSError, ValueError):  # a closed stderr: nothing to say it on
        sys.stdout.flush()
        print(line, file=sys.stderr, flush=True)
    return line


def resume_from() -> str | None:
    """The checkpoint this attempt should continue from (``ROTA_RESUME_FROM``), if any."""
    return os.environ.get("ROTA_RESUME_FROM") or None


def grace_seconds() -> float:
    """Seconds between Rota's stop signal and its SIGKILL (``ROTA_GRACE_SECONDS``)."""
    try:
        return float(os.environ.get("ROTA_GRACE_SECONDS", "30"))
    except ValueError:
        return 30.0


def should_stop() -> bool:
    """Whether Rota asked the job to stop (time limit, preemption, drain, cancel): save and
    exit. The first call installs a handler for the stop signal (``ROTA_STOP_SIGNAL``,
    SIGTERM by default), so call it from the main thread early, e.g. at every step."""
    _install()
    if _stop.is_set():
        return True
    flag = os.environ.get("ROTA_STOP_FILE")
    if flag and os.path.exists(flag):  # a stop asked for without a signal reaching us
        _stop.set()
    return _stop.is_set()


def take_stop_signal() -> None:
    """Handle the stop signal with Rota's handler alone, in place of whatever handles it now:
    for frameworks that install their own (Lightning's ends ``fit`` at once, without a
    checkpoint). A no-op outside the main thread."""
    _install(replace=True)


def _install(replace: bool = False) -> None:
    global _handler_installed
    if _handler_installed and not replace:
        return
    _handler_installed = True
    name = os.environ.get("ROTA_STOP_SIGNAL", "SIGTERM")
    sig = getattr(signal, name if name.startswith("SIG") else f"SIG{name}", signal.SIGTERM)
    previous = None if replace else signal.getsignal(sig)

    def on_stop(signum: int, frame: Any) -> None:
        _stop.set()
        if callable(previous) and previous not in (signal.SIG_DFL, signal.SIG_IGN):
            previous(signum, frame)

    with contextlib.suppress(ValueError):  # not the main thread: the stop file still works
        signal.signal(sig, on_stop)
