"""Registered datasets (rota.server.storage.datasets): list, show, add (an upload in chunks, or a
copy of an S3 prefix) and remove."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field, StrictBool, StrictInt

from rota.answers import (
    DatasetAddAnswer,
    DatasetCacheAnswer,
    DatasetChunkAnswer,
    DatasetFilesAnswer,
    DatasetsAnswer,
    DatasetShowAnswer,
    DatasetsRemovedAnswer,
)
from rota.core.spec import DATASET_VERSION
from rota.errors import InvalidSpec, StorageError
from rota.server.api._shared import Caller, CommandsPort, Json
from rota.server.api.problems import errors
from rota.server.storage.dataset_names import NAME_RE, OWNER_RE
from rota.storage import FileEntry
from rota.storage.manifest import safe_relpath

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)

_NAME = f"^{NAME_RE}$"
_OWNER = f"^{OWNER_RE}$"
_VERSION = rf"^(?:{DATASET_VERSION})$"
_MAX_FILE = (1 << 53) - 1  # what a JSON number holds exactly
DatasetName = Annotated[str, Path(pattern=_NAME, description="the dataset's name")]
UploadId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")]


class FileBody(BaseModel):
    path: str = Field(min_length=1, max_length=4096, description="relative, '/'-separated")
    size: StrictInt = Field(ge=0, le=_MAX_FILE)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class UploadBody(BaseModel):
    name: str = Field(pattern=_NAME)
    files: list[FileBody] = Field(max_length=200_000, description="every file, with its "
                                  "size and sha256 (the manifest the upload must match)")
    shared: StrictBool = Field(default=False, description="every user may read it")
    description: str | None = Field(default=None, max_length=2000)
    source: str = Field(default="", max_length=4096, description="where it came from (shown)")


class ImportBody(BaseModel):
    name: str = Field(pattern=_NAME)
    source: str = Field(pattern=r"^s3://[a-z0-9][a-z0-9-]{1,61}[a-z0-9](/.*)?$", max_length=4096,
                        description="s3://bucket/prefix, read with the daemon's credentials")
    shared: StrictBool = False
    description: str | None = Field(default=None, max_length=2000)


@router.get("/datasets", responses=errors(401, 422, 503))
async def datasets_list(p: Caller, commands: CommandsPort) -> Annotated[Json, DatasetsAnswer]:
    """The datasets the caller may read (their own and those shared; an admin's: all), each
    with its latest version."""
    return {"datasets": commands.datasets.views(p.user, p.admin)}


@router.get("/dataset-cache", responses=errors(401, 403, 422, 503))
async def datasets_cache(p: Caller, commands: CommandsPort
                         ) -> Annotated[Json, DatasetCacheAnswer]:
    """This machine's cache of dataset versions (admins)."""
    p.require_admin("reading the dataset cache")
    return commands.datasets.cache_view()


@router.get("/datasets/{name}", responses=errors(401, 404, 422, 503))
async def dataset_show(name: DatasetName, p: Caller, commands: CommandsPort,
                       owner: str | None = Query(None, pattern=_OWNER),
                       version: str = Query("latest", pattern=_VERSION),
                       ) -> Annotated[Json, DatasetShowAnswer]:
    """One version (the latest unless ``version``), with its files and the jobs that read
    it. NAME alone is the caller's own dataset, else the one shared by that name."""
    given = f"{owner}/{name}:{version}" if owner else f"{name}:{version}"
    return await commands.datasets.show(given, p.user, p.admin)


@router.delete("/datasets/{name}", responses=errors(401, 403, 404, 409, 422, 503))
async def dataset_remove(name: DatasetName, p: Caller, commands: CommandsPort,
                         owner: str | None = Query(None, pattern=_OWNER),
                         version: str | None = Query(None, pattern=_VERSION),
                         ) -> Annotated[Json, DatasetsRemovedAnswer]:
    """Remove one version, or the whole dataset: its owner's or an admin's, refused while
    a job not ended reads it."""
    removed = await commands.datasets.remove(owner=owner or p.user, name=name,
                                             version=version, user=p.user, admin=p.admin)
    return {"removed": removed}


@router.post("/dataset-uploads", responses=errors(400, 401, 422, 503))
async def dataset_upload(body: UploadBody, p: Caller, commands: CommandsPort
                         ) -> Annotated[Json, DatasetAddAnswer]:
    """Begin adding a version from files the client holds: their manifest first. When a
    version has this content already, it is the answer and nothing is sent."""
    files = []
    for f in body.files:
        try:
            files.append(FileEntry(path=safe_relpath(f.path), size=f.size, sha256=f.sha256))
        except StorageError as e:
            raise InvalidSpec(f"files: {e}", field="files") from None
    if len({f.path for f in files}) != len(files):
        raise InvalidSpec("files: a path is listed twice", field="files")
    return await commands.datasets.begin_upload(
        owner=p.user, name=body.name, shared=body.shared, description=body.description,
        source=body.source, files=files)


@router.put("/dataset-uploads/{upload_id}", responses={
    **errors(400, 401, 404, 409, 422, 503),
    200: {"description": "the file's bytes received so far"}},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def dataset_chunk(upload_id: UploadId, request: Request, p: Caller,
                        commands: CommandsPort,
                        path: str = Query(..., min_length=1, max_length=4096),
                        offset: int = Query(..., ge=0, le=_MAX_FILE),
                        ) -> Annotated[Json, DatasetChunkAnswer]:
    """Bytes of one file at ``offset``: the next ones, or ones sent again (a retry). An
    offset past what arrived is refused (409) with the offset to send from."""
    up = commands.datasets.upload(upload_id, p.user)
    data = await request.body()
    limit = commands.datasets.upload_view(up)["chunk_bytes"]
    if len(data) > limit:
        raise InvalidSpec(f"a chunk carries at most {limit} bytes", field="body")
    received = await commands.datasets.put_chunk(up, path, offset, data)
    return {"path": path, "received": received}


@router.put("/dataset-uploads/{upload_id}/files", responses={
    **errors(400, 401, 404, 422, 503),
    200: {"description": "each file's bytes received so far"}},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/octet-stream": {"schema": {
            "type": "string", "format": "binary",
            "description": "an uncompressed tar (application/x-tar)"}}}}})
async def dataset_files(upload_id: UploadId, request: Request, p: Caller,
                        commands: CommandsPort) -> Annotated[Json, DatasetFilesAnswer]:
    """Small files whole, many in one request: an uncompressed tar whose members are
    regular files named by their manifest paths, each at its manifest size (one request
    per file costs more than the file)."""
    up = commands.datasets.upload(upload_id, p.user)
    data = await request.body()
    limit = commands.datasets.upload_view(up)["chunk_bytes"]
    if len(data) > limit:
        raise InvalidSpec(f"a request carries at most {limit} bytes", field="body")
    return {"received": await commands.datasets.put_files(up, data)}


@router.post("/dataset-uploads/{upload_id}/commit",
             responses=errors(401, 404, 409, 422, 502, 503))
async def dataset_commit(upload_id: UploadId, p: Caller, commands: CommandsPort
                         ) -> Annotated[Json, DatasetAddAnswer]:
    """Every file arrived: each is checked against its sha256, then the version is
    published (all of it at once) and recorded."""
    up = commands.datasets.upload(upload_id, p.user)
    return await commands.datasets.commit(up, p.user)


@router.post("/dataset-imports", responses=errors(400, 401, 404, 422, 502, 503))
async def dataset_import(body: ImportBody, p: Caller, commands: CommandsPort
                         ) -> Annotated[Json, DatasetAddAnswer]:
    """Add a version copied from an S3 prefix (answers once it is all copied)."""
    return await commands.datasets.import_s3(owner=p.user, name=body.name,
                                             source=body.source, shared=body.shared,
                                             description=body.description, by=p.user)
