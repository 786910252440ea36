"""Links to a job's saved outputs that work without a Rota account (`rota share-link`).

Two kinds:

- **the daemon's own** (the default): ``PUBLIC_URL/share/TOKEN``, served on its TCP API.
  TOKEN is random (192 bits); the store keeps only its SHA-256, so the link is shown
  once. It works until it expires (at most MAX_EXPIRES_S) or is revoked, whichever comes
  first, and only ever reads the files it names: one file, a folder of the list (as a
  tar), or all of them.
- **a presigned S3 URL** (``presigned``, an S3 store only): the bucket serves the file
  itself, to whoever has the URL, until it expires (at most S3's 7 days). A bucket gives
  no way to revoke one sooner, so it is not stored, and the answer says so.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rota.config import Settings
from rota.errors import Conflict, Gone, InvalidSpec, NotFound
from rota.server.access.auth import token_digest
from rota.server.storage.artifacts import Artifacts, chosen, key_of
from rota.storage import FileEntry, Manifest
from rota.store.repo import ShareLinkRecord, Store

DEFAULT_EXPIRES_S = 7 * 86400.0
MAX_EXPIRES_S = 30 * 86400.0
#: S3's limit for a presigned URL (SigV4)
PRESIGNED_MAX_S = 7 * 86400.0


@dataclass(frozen=True)
class Shared:
    """What a link serves: these files, as one (``single``) or as a tar."""

    job_id: int
    files: list[FileEntry]
    single: bool
    name: str  # for the download's file name


class ShareLinks:
    def __init__(self, settings: Settings, store: Store, artifacts: Artifacts,
                 clock: Callable[[], float]) -> None:
        self.settings, self.store, self.artifacts, self.clock = settings, store, artifacts, clock

    def base_url(self) -> str | None:
        """Where people reach this daemon's TCP API; None when it has none."""
        return self.settings.reach_url()

    def check(self, job_id: int) -> None:
        """The job has saved outputs to share."""
        row = self.store.artifacts(job_id)
        if row is None:
            raise NotFound(f"job {job_id} names no outputs, so it has nothing to share")
        if row.state != "saved":
            raise Conflict(f"job {job_id}'s outputs are {row.state}, not saved: nothing to "
                           "share" + (f" ({row.error})" if row.error else ""))

    def create(self, job_id: int, manifest: Manifest, path: str | None, expires_s: float, *,
               presigned: bool, by: str) -> dict[str, Any]:
        """A new link to what ``manifest`` (the job's, read by the caller) lists."""
        files, single = chosen(manifest, path)
        limit = PRESIGNED_MAX_S if presigned else MAX_EXPIRES_S
        if not 0 < expires_s <= limit:
            raise InvalidSpec(f"expires: between 1 second and {limit / 86400:g} days"
                              + (" (S3's limit for a presigned link)" if presigned else ""),
                              field="expires")
        now = self.clock()
        if presigned:
            return self._presigned(job_id, files, single, expires_s, now)
        base = self.base_url()
        if base is None:
            raise InvalidSpec("the daemon serves its links on its TCP API, and it has none: "
                              "start it with --listen HOST:PORT (and set public_url to the "
                              "address people reach it at), or give a presigned link from "
                              "an S3 store (--presigned)", field="presigned")
        token = secrets.token_urlsafe(24)
        link = self.store.add_share_link(digest=token_digest(token), job_id=job_id,
                                         path=path, by=by, now=now,
                                         expires_at=now + expires_s)
        return {**self.view(link), "url": f"{base}/share/{token}"}

    def _presigned(self, job_id: int, files: list[FileEntry], single: bool,
                   expires_s: float, now: float) -> dict[str, Any]:
        if not single:
            raise InvalidSpec("a presigned link serves one file: name one of the list "
                              "(`rota artifacts JOB`), or drop --presigned for the "
                              "daemon's own link to a folder", field="path")
        url = self.artifacts.objects().link(key_of(job_id), files[0].path, expires_s)
        if url is None:
            raise InvalidSpec("--presigned needs an S3 store ([storage] url = "
                              "\"s3://...\"); this daemon's store is a local folder, whose "
                              "links it serves itself", field="presigned")
        return {"id": None, "job": job_id, "path": files[0].path, "kind": "presigned",
                "url": url, "created_by": None, "created_at": now,
                "expires_at": now + expires_s, "revoked_at": None, "downloads": None,
                "active": True}

    def view(self, link: ShareLinkRecord) -> dict[str, Any]:
        now = self.clock()
        return {"id": link.id, "job": link.job_id, "path": link.path, "kind": "daemon",
                "url": None, "created_by": link.created_by, "created_at": link.created_at,
                "expires_at": link.expires_at, "revoked_at": link.revoked_at,
                "downloads": link.downloads,
                "active": link.revoked_at is None and link.expires_at > now}

    def revoke(self, link: ShareLinkRecord) -> dict[str, Any]:
        if link.revoked_at is None:
            self.store.update_share_link(link.id, revoked_at=self.clock())
        found = self.store.share_link(link_id=link.id)
        assert found is not None
        return self.view(found)

    def find(self, token: str) -> ShareLinkRecord:
        """The link of ``token``: NotFound for one that never was, Gone for one expired
        or revoked."""
        link = self.store.share_link(digest=token_digest(token))
        if link is None:
            raise NotFound("no such link")
        if link.revoked_at is not None:
            raise Gone("this link was revoked")
        if link.expires_at <= self.clock():
            raise Gone("this link has expired")
        return link

    def serve(self, link: ShareLinkRecord, manifest: Manifest) -> Shared:
        """What the link serves of ``manifest`` (its job's), counted as one more download."""
        files, single = chosen(manifest, link.path)
        self.store.update_share_link(link.id, downloads=link.downloads + 1)
        leaf = (link.path or f"job-{link.job_id}").rstrip("/").rsplit("/", 1)[-1]
        return Shared(link.job_id, files, single, leaf if single else f"{leaf}.tar")
