"""What a running job writes: its output, read into metrics and progress, and its
checkpoints on disk."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections.abc import Iterable, Mapping

from rota.ml import checkpoints
from rota.ml.parse import LineParser
from rota.server.jobs.running import Running
from rota.server.tracking.log_limit import LOG_LIMIT
from rota.server.tracking.log_times import LogTimes
from rota.server.tracking.outputs import (
    CATCH_UP_S,
    PARSE_BUDGET_S,
    READ_EVERY_S,
    OutputReader,
    Progress,
    events_path,
)
from rota.server.tracking.trackers import Tracking
from rota.store.repo import Store

log = logging.getLogger("rota.daemon")

#: The time index of every job's log (``rota logs --since/--until``): one per daemon
#: process, like the loop that reads the output.
LOG_TIMES = LogTimes()
#: Which running job's output is read first: it turns with every read, so that when the
#: parsing budget runs out no job is always the one left for later.
_TURNS = itertools.count()


def reader_for(run: Running, stored: dict[str, object] | None) -> OutputReader:
    """The reader of an attempt's output; a re-adopted attempt goes on where the stored
    progress says reading had got to, a new one starts at the log's current end."""
    progress = Progress.from_json(stored, run.attempt_no)
    # a later attempt's output follows the earlier ones' in the job's log (the first
    # attempt's log starts empty: no stat for it)
    if run.attempt_no > 1 and (stored is None or stored.get("attempt") != run.attempt_no):
        with contextlib.suppress(OSError):
            progress.log_offset = run.log_path.stat().st_size
    tb = run.spec.tensorboard_dir
    if tb is not None and not os.path.isabs(tb):
        tb = os.path.join(run.spec.cwd or ".", tb)
    return OutputReader(job_id=run.job_id, log_path=run.log_path,
                        events_path=events_path(run.status_path),
                        parser=LineParser.lenient(run.spec.metric_patterns), progress=progress,
                        tensorboard_dir=tb, json_only=run.spec.log_metrics == "json",
                        files=run.files)


def read_outputs(store: Store, tracking: Tracking, runs: Iterable[Running], now: float, *,
                 final: bool = False, deadline: float | None = None) -> None:
    """Metrics and progress from what the jobs wrote since the last read, stored in the
    open transaction (or in one of their own) and mirrored to their trackers. Parsing
    stops at ``deadline`` (by default PARSE_BUDGET_S from now: this runs on the daemon's
    loop); the rest is read next time (after a job's final read: by ``read_ended``)."""
    if deadline is None:
        deadline = time.perf_counter() + PARSE_BUDGET_S
    runs = list(runs)
    if len(runs) > 1:
        first = next(_TURNS) % len(runs)
        runs = runs[first:] + runs[:first]
    for run in runs:
        _index_log(run, now, final)
    _read(store, tracking, runs, now, final, deadline)
    LOG_LIMIT.bound(runs)  # after the read: what it has parsed may be left out


def read_ended(store: Store, tracking: Tracking, ended: dict[int, Running],
               running: Mapping[int, Running], now: float, *, deadline: float) -> None:
    """Go on reading the output of jobs whose final read stopped at its deadline (a job
    that wrote much just before it ended), up to where each ended; ``ended`` loses each
    one read to its end, and any whose job runs again (its new attempt's reader takes the
    job's stored progress over)."""
    for job_id in [j for j, run in ended.items() if run.output is None or j in running]:
        del ended[job_id]
    _read(store, tracking, list(ended.values()), now, True, deadline)
    for job_id, run in list(ended.items()):
        if run.output is None or run.output.caught_up():
            del ended[job_id]


def next_read_in(runs: Iterable[Running], ended: Mapping[int, Running]) -> float:
    """Seconds until the outputs loop reads again: soon while a read left output unread."""
    behind = ended or any(r.output is not None and not r.output.caught_up() for r in runs)
    return CATCH_UP_S if behind else READ_EVERY_S


def _read(store: Store, tracking: Tracking, runs: list[Running], now: float, final: bool,
          deadline: float) -> None:
    rows: list[dict[str, object]] = []
    progress: dict[int, dict[str, object]] = {}
    for run in runs:
        out = run.output
        if out is None:
            continue
        out.read(now, final=final, deadline=deadline)
        rows += out.drain()
        if out.changed:  # offsets alone change with every line: stored with progress
            out.changed = False
            progress[run.job_id] = out.progress.to_json()
    if rows or progress:
        store.add_metrics(rows, progress)
    if rows:
        tracking.mirror(rows)


def _index_log(run: Running, now: float, final: bool) -> None:
    """Note in the log's time index how far it has grown by now (engine jobs' logs too:
    their poller appends what the engine's output adds)."""
    # a later attempt's log without an index holds output from before indexes were kept:
    # written at some time since the job was submitted
    LOG_TIMES.note(run.log_path, now, attempt_start=run.started_at,
                   log_start=run.started_at if run.attempt_no == 1 else run.submitted_at)
    if final:
        LOG_TIMES.forget(run.log_path)


def checkpoints_of(run: Running, *, since: float, now: float) -> list[checkpoints.Checkpoint]:
    """The job's checkpoints written since ``since``: under its checkpoint_dir, the one it
    reported, or (naming no checkpoint_dir) the usual layouts under its working directory."""
    try:  # with its account's rights: a path the job names is never read as the daemon
        return run.files.run(
            checkpoints.of_job, run.spec.checkpoint_dir, run.spec.cwd, since=since,
            reported=run.output.progress.checkpoint if run.output else None, now=now)
    except OSError as e:
        log.warning("job %s: looking for checkpoints failed: %s", run.job_id, e)
        return []
