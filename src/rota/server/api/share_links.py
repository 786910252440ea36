"""Links to a job's saved outputs for people without a Rota account
(rota.server.storage.share_links): made, listed and revoked by the job's owner (or an
admin) under /v1, and served by ``GET /share/TOKEN``, which needs no token of Rota's: the
link is the credential."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from rota.answers import ShareLinkAnswer, ShareLinksAnswer
from rota.errors import NotFound
from rota.server.api._shared import Caller, CommandsPort, JobId, Json, ReadsPort, own
from rota.server.api.problems import errors
from rota.server.storage.share_links import DEFAULT_EXPIRES_S, MAX_EXPIRES_S

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)
public_router = APIRouter()  # no caller: the link is its own credential


class LinkBody(BaseModel):
    path: str | None = Field(default=None, min_length=1, max_length=4096,
                             description="a file or folder of the job's artifacts list; "
                                         "none: all of them")
    expires: float = Field(default=DEFAULT_EXPIRES_S, gt=0, allow_inf_nan=False,
                           description=f"seconds it works for (at most "
                                       f"{MAX_EXPIRES_S / 86400:g} days; a presigned link "
                                       f"at most 7): the daemon words a longer one's error")
    presigned: bool = Field(default=False, description="a presigned URL of the S3 store "
                                                       "(one file; it cannot be revoked)")


@router.post("/jobs/{job_id}/share-links", status_code=201,
             responses=errors(400, 401, 403, 404, 409, 422, 502, 503))
async def share_link_create(job_id: JobId, body: LinkBody, p: Caller, reads: ReadsPort,
                            commands: CommandsPort) -> Annotated[Json, ShareLinkAnswer]:
    """A link to the job's saved outputs that works without an account until it expires
    or is revoked. Its ``url`` is given here only: keep it."""
    own(reads, p, job_id, "share the artifacts of")
    return await commands.create_share_link(job_id, body.path, body.expires,
                                            presigned=body.presigned, by=p.user)


@router.get("/share-links", responses=errors(401, 403, 404, 422, 503))
async def share_links_list(p: Caller, reads: ReadsPort,
                           job: int | None = Query(None, ge=1, le=2**63 - 1)
                           ) -> Annotated[Json, ShareLinksAnswer]:
    """The links of one job (its owner's and admins'), or those the caller made, newest
    first; never their URLs."""
    if job is not None:
        own(reads, p, job, "list the links of")
        return {"links": reads.share_links(job_id=job)}
    return {"links": reads.share_links(user=None if p.admin else p.user)}


@router.delete("/share-links/{link_id}", responses=errors(401, 403, 404, 422, 503))
async def share_link_revoke(p: Caller, reads: ReadsPort, commands: CommandsPort,
                            link_id: int = Path(ge=1, le=2**63 - 1),
                            ) -> Annotated[Json, ShareLinkAnswer]:
    """Revoke a link: it stops working at once."""
    link = reads.store.share_link(link_id=link_id)
    if link is None:
        raise NotFound(f"no link {link_id}")
    if link.created_by != p.user:
        own(reads, p, link.job_id, "revoke the links of")
    return commands.revoke_share_link(link_id)


@public_router.get("/share/{token}", response_class=StreamingResponse,
                   responses={**errors(404, 410, 422, 502, 503),
                              200: {"content": {"application/octet-stream": {},
                                                "application/x-tar": {}},
                                    "description": "the file, or the files as a tar"}})
async def shared(reads: ReadsPort,
                 token: str = Path(min_length=16, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
                 ) -> StreamingResponse:
    """What a share link names: one file as it is, several as one tar stream."""
    what, chunks = await reads.shared(token)
    headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{quote(what.name)}",
               "Cache-Control": "no-store"}
    if what.single:
        headers |= {"Content-Length": str(what.files[0].size),
                    "X-Rota-Sha256": what.files[0].sha256}
        return StreamingResponse(chunks, media_type="application/octet-stream",
                                 headers=headers)
    return StreamingResponse(chunks, media_type="application/x-tar", headers=headers)
