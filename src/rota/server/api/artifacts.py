"""What a job's ``outputs`` saved when it ended (rota.server.storage.artifacts): the list with
sizes and sha256, and each file. Its owner's and admins' only, as its log is."""

from __future__ import annotations

import os
from typing import Annotated, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query
from fastapi.responses import Response, StreamingResponse

from rota.answers import ArtifactsAnswer, CardAnswer
from rota.errors import NotFound
from rota.server.api._shared import Caller, JobId, Json, ReadsPort, own
from rota.server.api.problems import errors

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


@router.get("/jobs/{job_id}/artifacts", responses=errors(401, 403, 404, 422, 502, 503))
async def artifacts_of(job_id: JobId, p: Caller,
                       reads: ReadsPort) -> Annotated[Json, ArtifactsAnswer]:
    """The job's saved outputs: ``pending`` until its end's save is done, then ``saved``
    with every file (its size and sha256) or ``failed`` with the reason."""
    own(reads, p, job_id, "list the artifacts of")
    row = reads.store.artifacts(job_id)
    if row is None:
        raise NotFound(f"job {job_id} names no outputs (submit with --output DIR)")
    files = []
    if row.state == "saved":
        manifest = await reads.artifact_manifest(job_id)
        files = [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in manifest.files]
    return {"id": job_id, "state": row.state, "store": row.store_url, "key": row.key,
            "sources": dict(row.sources), "files": files, "bytes": row.bytes,
            "notes": list(row.skipped or []), "error": row.error,
            "requested_at": row.requested_at, "saved_at": row.saved_at}


@router.get("/jobs/{job_id}/artifacts/file", response_class=StreamingResponse,
            responses={**errors(401, 403, 404, 422, 502, 503),
                       200: {"content": {"application/octet-stream": {}},
                             "description": "the file's bytes, as saved"}})
async def artifact_file(job_id: JobId, p: Caller, reads: ReadsPort,
                        path: str = Query(..., min_length=1, max_length=4096)
                        ) -> StreamingResponse:
    """One saved file, by its path in the list. Its sha256 is in the ``X-Rota-Sha256``
    header, for the client to check what it received."""
    own(reads, p, job_id, "download the artifacts of")
    entry, chunks = await reads.artifact_file(job_id, path)
    name = os.path.basename(entry.path)
    return StreamingResponse(chunks, media_type="application/octet-stream", headers={
        "Content-Length": str(entry.size), "X-Rota-Sha256": entry.sha256,
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}"})


@router.get("/jobs/{job_id}/artifacts/archive", response_class=StreamingResponse,
            responses={**errors(401, 403, 404, 422, 502, 503),
                       200: {"content": {"application/x-tar": {}},
                             "description": "the files as one uncompressed tar stream"}})
async def artifact_archive(job_id: JobId, p: Caller, reads: ReadsPort,
                           prefix: str | None = Query(None, min_length=1, max_length=4096)
                           ) -> StreamingResponse:
    """Every saved file, or the one or those under the folder ``prefix``, as one tar
    stream (their paths as in the list): one request for a folder of many files. Each is
    checked against its manifest entry as it is read; check them again on arrival."""
    own(reads, p, job_id, "download the artifacts of")
    _, chunks = await reads.artifact_archive(job_id, prefix)
    return StreamingResponse(chunks, media_type="application/x-tar", headers={
        "Content-Disposition": f"attachment; filename=job-{job_id}-artifacts.tar"})


@router.get("/jobs/{job_id}/card", response_class=Response, response_model=None,
            responses={**errors(401, 403, 404, 422, 503),
                       200: {"content": {"text/markdown": {}, "text/html": {},
                                         "image/svg+xml": {}, "application/json": {}},
                             "description": "the card"}})
async def card_of(job_id: JobId, p: Caller, reads: ReadsPort,
                  format: Literal["markdown", "html", "svg", "json"] = Query("markdown"),
                  ) -> Annotated[Response, CardAnswer]:
    """The job's model card and training report, as it stands now: Markdown, one HTML
    page, its loss curve alone (SVG), or its facts as JSON (each metric's last, least and
    largest value). Its owner's and admins' only."""
    own(reads, p, job_id, "read the card of")
    text, media = await reads.card(job_id, format)
    return Response(text, media_type=media)
