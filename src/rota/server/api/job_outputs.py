"""What a job produced: its log (a range, followed, or as server-sent events), the metrics
read from its output, and its checkpoints."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import WithJsonSchema

from rota.answers import CheckpointsAnswer, LogAnswer, MetricsPageAnswer
from rota.core.lifecycle import TERMINAL
from rota.errors import InvalidSpec, NotFound
from rota.ml.checkpoints import Checkpoint, newest_valid, tar_stream
from rota.ml.checkpoints import of_job as checkpoints_of_job
from rota.server.api._shared import MAX_ID, Caller, JobId, Json, ReadsPort, own
from rota.server.api.problems import errors
from rota.server.api.views import progress_view
from rota.server.ports import Reads
from rota.server.tracking.log_times import window
from rota.server.tracking.logstream import follow as follow_log
from rota.server.tracking.logstream import log_size, read_log
from rota.server.tracking.logstream import sse as log_sse
from rota.storage.owner_files import OwnerFiles

_OFFSET = {"type": "integer", "minimum": 0}


def _sse_event(name: str, data: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The schema of one kind of server-sent event, whose ``data`` is JSON with these
    properties (before OpenAPI 3.2, an event stream's schema describes each event)."""
    return {"type": "object", "required": ["event", "data", *fields], "properties": {
        "event": {"const": name}, **fields, "data": {
            "type": "string", "contentMediaType": "application/json",
            "contentSchema": {"type": "object", "required": list(data),
                              "properties": data}}}}


_LOG_EVENTS = {"oneOf": [
    _sse_event("log", {"offset": _OFFSET, "next": _OFFSET, "text": {"type": "string"}},
           id={"type": "string", "pattern": "^[0-9]+$"}),
    _sse_event("end", {"id": {"type": "integer"}, "state": {"enum": sorted(TERMINAL)},
                   "exit_code": {"type": ["integer", "null"]},
                   "end_reason": {"type": ["string", "null"]}})]}


#: Last-Event-ID: a header is absent or a string, never null (pydantic would document
#: ``str | None`` as string-or-null, and a client cannot send a null)
_ResumeAt = Annotated[str | None, Header(description="the byte offset to resume from"),
                      WithJsonSchema({"type": "string", "pattern": r"^[0-9]{1,18}$"})]

#: since / until: unix times (the CLI turns "2h" or an ISO 8601 time into one)
_SINCE = Query(None, ge=0, le=1e11, description="only what was written at or after this "
               "unix time (whole lines; one read interval of slack)")
_UNTIL = Query(None, ge=0, le=1e11, description="only what was written at or before this "
               "unix time (whole lines; one read interval of slack)")

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


def _ended(reads: Reads, job_id: int, until: float | None = None) -> Callable[[], bool]:
    """Whether following is over: the job ended (or the time ``until`` has passed)."""
    if until is None:
        return lambda: reads.job_state(job_id).terminal
    return lambda: reads.now() > until or reads.job_state(job_id).terminal


def _end(reads: Reads, job_id: int) -> dict[str, Any]:
    """The last server-sent event: how the job ended."""
    row = reads.store.get_job(job_id)
    return {"id": job_id, "state": str(reads.job_state(job_id)),
            "exit_code": row.exit_code, "end_reason": row.end_reason}


def _window(reads: Reads, job_id: int, path: Path, since: float | None,
            until: float | None, uid: int) -> tuple[int, int | None]:
    """The byte range of what the job wrote from ``since`` to ``until``."""
    if since is None and until is None:
        return 0, None
    return window(path, job_id, since, until, now=reads.now(),
                  ended=reads.job_state(job_id).terminal, uid=uid)


def _checkpoints(reads: Reads, files: OwnerFiles,
                 job_id: int) -> tuple[list[Checkpoint], Checkpoint | None]:
    """Looked for with the job's account's rights: a path the job reported, or a folder
    its owner named, shows only what that account could read itself."""
    row = reads.store.get_job(job_id)
    found = files.run(checkpoints_of_job, row.spec.get("checkpoint_dir"), row.spec.get("cwd"),
                      reported=(row.progress or {}).get("checkpoint"), since=row.created_at,
                      now=reads.now())
    return found, newest_valid(found)


def _attachment(name: str) -> str:
    """A Content-Disposition for a file name the job chose (RFC 6266: percent-encoded, so
    no quote or line break of it reaches the header)."""
    return f"attachment; filename*=utf-8''{quote(name, safe='')}"


def _file_pieces(fd: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """A file's bytes from a descriptor opened with its owner's rights."""
    try:
        while data := os.read(fd, chunk):
            yield data
    finally:
        os.close(fd)


@router.get("/jobs/{job_id}/logs", response_model=None, responses={
    **errors(401, 403, 404, 409, 422, 503),
    200: {"content": {"text/plain": {"schema": {"type": "string"}}},  # JSON: LogAnswer's
          "description": "a byte range as JSON (offset, next, end, data); with follow=true "
                         "the log as plain text until the job ends; with stream=true the "
                         "range as plain text up to the log's end now"}})
async def logs(job_id: JobId, p: Caller, reads: ReadsPort,
               offset: int = Query(0, ge=0, le=MAX_ID),
               limit: int = Query(1 << 20, ge=1, le=16 << 20),
               follow: bool = False, since: float | None = _SINCE,
               until: float | None = _UNTIL,
               stream: bool = Query(False, description="the bytes from offset (or since) "
                                    "to the log's end now (or until), streamed as they "
                                    "are read: a log of any size in bounded memory")
               ) -> Annotated[Response, LogAnswer]:
    """A byte range of the job's log from ``offset``. With ``since``/``until`` only whole
    lines written in that time: the range starts there (``offset`` counts when later) and
    stops at ``end``; page on with ``offset=next`` and the same window. Followed with
    ``until``, the stream ends at the window's end, or once ``until`` has passed. Offsets
    count the bytes as the job wrote them: past ``max_log_bytes`` a part of the log is
    left out, and an offset in it reads on from the marker line that says so (``offset``
    of the answer is then later than asked)."""
    path = reads.log_path(own(reads, p, job_id, "read the logs of"))
    uid = reads.job_files(job_id).uid  # the log is its account's: read as no link's target
    start, end = _window(reads, job_id, path, since, until, uid)
    offset = max(offset, start)
    if follow or stream:
        ended = _ended(reads, job_id, until) if follow else (lambda: True)
        stop = end if follow or end is not None else log_size(path, uid)
        chunks = follow_log(path, offset, ended, stop_at=stop, uid=uid)
        return StreamingResponse((data async for _, data in chunks), media_type="text/plain")
    if end is not None:
        limit = min(limit, end - offset)
    at, data = read_log(path, offset, limit, uid=uid) if limit > 0 else (offset, b"")
    return JSONResponse({"offset": at, "next": at + len(data), "end": end,
                         "data": data.decode("utf-8", "replace")})


@router.get("/jobs/{job_id}/logs/stream", response_class=StreamingResponse, responses={
    **errors(401, 403, 404, 409, 422, 503),
    200: {"content": {"text/event-stream": {"schema": _LOG_EVENTS}},
          "description": "server-sent events: `log`, then `end`"}})
async def log_events(job_id: JobId, p: Caller, reads: ReadsPort,
                     offset: int = Query(0, ge=0, le=MAX_ID),
                     since: float | None = _SINCE,
                     last_event_id: _ResumeAt = None) -> StreamingResponse:
    """The log as server-sent events that follow the job until it ends, from the
    first line written at or after ``since`` when given. A client that reconnects with
    ``Last-Event-ID`` resumes where it left off."""
    path = reads.log_path(own(reads, p, job_id, "read the logs of"))
    uid = reads.job_files(job_id).uid
    if last_event_id is not None:
        if not (last_event_id.isascii() and last_event_id.isdigit()) \
                or len(last_event_id) > 18:
            raise InvalidSpec(f"Last-Event-ID: {last_event_id[:40]!r} is not a byte "
                              "offset", field="Last-Event-ID")
        offset = int(last_event_id)
    else:
        offset = max(offset, _window(reads, job_id, path, since, None, uid)[0])
    return StreamingResponse(log_sse(path, offset, _ended(reads, job_id),
                                     partial(_end, reads, job_id), uid=uid),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store",
                                      "X-Accel-Buffering": "no"})


@router.get("/jobs/{job_id}/metrics", responses=errors(401, 403, 404, 422, 503))
async def metrics_of(job_id: JobId, p: Caller, reads: ReadsPort,
                     name: list[str] = Query(default=[]),
                     attempt: int | None = Query(None, ge=1, le=1_000_000),
                     after: int = Query(0, ge=0, le=MAX_ID),
                     limit: int = Query(10_000, ge=1, le=100_000),
                     ) -> Annotated[Json, MetricsPageAnswer]:
    """Metric samples read from the job's output, per metric as [step, value, time,
    attempt] points, oldest first. ``next`` is the ``after`` that asks for what came
    since (poll with it); ``more`` says whether this answer stopped at ``limit``. Its
    owner's and admins' only, as its log is (the metrics are read from the log)."""
    row = reads.store.get_job(job_id)
    p.require_owner(row.user, f"read the metrics of job {job_id}")
    got = reads.store.metrics(job_id, names=name, attempt=attempt, after_id=after,
                              limit=limit)
    series: dict[str, list[list[Any]]] = {}
    for m in got:
        series.setdefault(m.name, []).append([m.step, m.value, m.ts, m.attempt])
    return {"id": job_id, "series": series, "next": got[-1].id if got else after,
            "more": len(got) == limit, "progress": progress_view(row.progress)}


@router.get("/jobs/{job_id}/checkpoints", responses=errors(401, 403, 404, 422, 503))
async def checkpoints_of(job_id: JobId, p: Caller,
                         reads: ReadsPort) -> Annotated[Json, CheckpointsAnswer]:
    """The job's checkpoints (under its checkpoint_dir, or reported by rota.job), oldest
    step first, and the one a retry would resume from: its owner's and admins' only."""
    own(reads, p, job_id, "list the checkpoints of")
    found, best = await asyncio.to_thread(_checkpoints, reads, reads.job_files(job_id), job_id)
    return {"id": job_id, "checkpoints": [c.to_json() for c in found],
            "resume_from": best.path if best else None,
            "checkpoint_dir": reads.store.get_job(job_id).spec.get("checkpoint_dir")}


@router.get("/jobs/{job_id}/checkpoints/download", response_class=StreamingResponse,
              responses={**errors(401, 403, 404, 422, 503),
                         200: {"content": {"application/octet-stream": {},
                                           "application/x-tar": {}},
                               "description": "the file, or a directory as a tar stream"}})
async def checkpoint_download(job_id: JobId, p: Caller, reads: ReadsPort,
                              path: str = Query(..., max_length=4096)) -> Response:
    """One of the listed checkpoints: a file as it is, a directory as a tar stream. Only
    a path the listing gives is served."""
    own(reads, p, job_id, "download the checkpoints of")
    files = reads.job_files(job_id)
    found, _ = await asyncio.to_thread(_checkpoints, reads, files, job_id)
    hit = next((c for c in found if c.path == path), None)
    if hit is None:
        raise NotFound(f"job {job_id} has no checkpoint {path!r}; "
                       f"`rota checkpoints {job_id}` lists them")
    name = os.path.basename(hit.path.rstrip("/"))
    # read with the job's account's rights, as listed: each piece of a folder's tar, and
    # a file opened as that account (what it may not open is not served)
    if await asyncio.to_thread(files.is_dir, hit.path):
        return StreamingResponse(files.iterate(tar_stream(hit.path)),
                                 media_type="application/x-tar",
                                 headers={"Content-Disposition": _attachment(f"{name}.tar")})
    try:
        fd = await asyncio.to_thread(files.open_regular, hit.path)
    except OSError as e:
        raise NotFound(f"job {job_id}'s checkpoint {path!r} cannot be read: "
                       f"{e.strerror or e}") from None
    return StreamingResponse(_file_pieces(fd), media_type="application/octet-stream",
                             headers={"Content-Disposition": _attachment(name),
                                      "Content-Length": str(os.fstat(fd).st_size)})

