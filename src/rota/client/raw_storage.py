"""What :class:`~rota.client.raw.RawClient` asks of the daemon's storage: a job's saved
files (artifacts, their archive, its card), share links, workspaces and datasets.

A part of ``RawClient`` (its base class), as ``rota.server.storage`` is the daemon's side
of the same: the client's side of users' files, whose bytes stream both ways (downloads
checked against their sha256, dataset uploads in chunks). Its answers are the TypedDicts
of :mod:`rota.answers`, as the rest of ``RawClient``'s are.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from contextlib import contextmanager

from rota.errors import StorageError

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import IO, Any

    from rota.answers import (
        ArtifactsAnswer,
        CleanupDoneAnswer,
        CleanupPlanAnswer,
        DatasetAddAnswer,
        DatasetsAnswer,
        DatasetShowAnswer,
        DatasetsRemovedAnswer,
        ShareLinkAnswer,
        ShareLinksAnswer,
        WorkspaceAnswer,
        WorkspacesAnswer,
    )
    from rota.client._wire import WireTransport


class RawStorage:
    """The storage routes of :class:`~rota.client.raw.RawClient`, which gives them its
    transport and ``request``."""

    if TYPE_CHECKING:  # what RawClient has, for these methods' types
        _t: WireTransport

        def request(self, method: str, path: str, **kw: Any) -> Any: ...

    # --- artifacts -----------------------------------------------------------------------
    def artifacts(self, job_id: int) -> ArtifactsAnswer:
        return self.request("GET", f"/v1/jobs/{int(job_id)}/artifacts")

    def download_artifact(self, job_id: int, path: str, into: IO[bytes]) -> str:
        """One saved file's bytes written to ``into``; its sha256 as the daemon gave it,
        checked against what arrived (StorageError when they differ)."""
        digest = hashlib.sha256()
        with self._t.stream("GET", f"/v1/jobs/{int(job_id)}/artifacts/file",
                            params={"path": path}) as resp:
            said = resp.headers.get("x-rota-sha256", "")
            for chunk in resp.iter_bytes():
                digest.update(chunk)
                into.write(chunk)
        if said and digest.hexdigest() != said:
            raise StorageError(f"job {job_id}'s {path}: what arrived does not match its "
                               f"sha256 ({digest.hexdigest()} != {said})")
        return digest.hexdigest()

    @contextmanager
    def artifact_archive(self, job_id: int, prefix: str | None = None) -> Iterator[IO[bytes]]:
        """The saved files (all, or those under ``prefix``) as one tar stream to read."""
        params = {"prefix": prefix} if prefix else None
        with self._t.stream("GET", f"/v1/jobs/{int(job_id)}/artifacts/archive",
                            params=params) as resp:
            yield io.BufferedReader(_Pieces(resp.iter_bytes()), 1 << 20)

    def card(self, job_id: int, fmt: str = "markdown") -> str:
        """The job's card as text (markdown, html or svg)."""
        with self._t.stream("GET", f"/v1/jobs/{int(job_id)}/card",
                            params={"format": fmt}) as resp:
            return b"".join(resp.iter_bytes()).decode()

    # --- share links ---------------------------------------------------------------------
    def share_link(self, job_id: int, path: str | None = None, *, expires: float,
                   presigned: bool = False) -> ShareLinkAnswer:
        return self.request("POST", f"/v1/jobs/{int(job_id)}/share-links",
                            json={"path": path, "expires": expires, "presigned": presigned})

    def share_links(self, job_id: int | None = None) -> ShareLinksAnswer:
        return self.request("GET", "/v1/share-links",
                            params={"job": job_id} if job_id is not None else None)

    def revoke_share_link(self, link_id: int) -> ShareLinkAnswer:
        return self.request("DELETE", f"/v1/share-links/{int(link_id)}")

    # --- workspaces ----------------------------------------------------------------------
    def workspaces(self) -> WorkspacesAnswer:
        return self.request("GET", "/v1/workspaces")

    def set_workspace_quota(self, name: str, limit: int | None) -> WorkspaceAnswer:
        return self.request("PUT", "/v1/workspaces/quota", json={"name": name, "limit": limit})

    def clean_workspace(self, name: str, days: float | None = None) -> CleanupPlanAnswer:
        return self.request("POST", "/v1/workspaces/clean", json={"name": name, "days": days})

    def apply_cleanup(self, plan: str) -> CleanupDoneAnswer:
        return self.request("POST", f"/v1/workspaces/clean/{plan}/apply")

    # --- datasets ------------------------------------------------------------------------
    def datasets(self) -> DatasetsAnswer:
        return self.request("GET", "/v1/datasets")

    def dataset(self, name: str, *, owner: str | None = None,
                version: str = "latest") -> DatasetShowAnswer:
        return self.request("GET", f"/v1/datasets/{name}",
                            params={"version": version, **({"owner": owner} if owner else {})})

    def remove_dataset(self, name: str, *, owner: str | None = None,
                       version: str | None = None) -> DatasetsRemovedAnswer:
        params = {k: v for k, v in (("owner", owner), ("version", version)) if v}
        return self.request("DELETE", f"/v1/datasets/{name}", params=params or None)

    def import_dataset(self, name: str, source: str, *, shared: bool = False,
                       description: str | None = None) -> DatasetAddAnswer:
        """A version copied by the daemon from ``s3://bucket/prefix`` (waits for the copy)."""
        return self.request("POST", "/v1/dataset-imports", timeout=None, json={
            "name": name, "source": source, "shared": shared, "description": description})

    def add_dataset(self, name: str, path: Path, *, shared: bool = False,
                    description: str | None = None,
                    progress: Callable[[int, int], object] | None = None,
                    ) -> DatasetAddAnswer:
        """A version from a local folder (or one file): its manifest first, then each
        file's bytes in chunks, then the commit, which checks every file's sha256.
        ``progress(sent, total)`` after each chunk. Content the dataset has already is
        not sent again, nor what the daemon has of an upload of it cut off earlier."""
        from rota.client.uploads import dataset_files, send_files

        files = dataset_files(path)
        begun: DatasetAddAnswer = self.request("POST", "/v1/dataset-uploads", json={
            "name": name, "shared": shared, "description": description,
            "source": str(path), "files": [f.entry for f in files]})
        up = begun["upload"]
        if up is None:
            return begun
        send_files(lambda f, offset, data: self.request(
            "PUT", f"/v1/dataset-uploads/{up['id']}", content=data,
            params={"path": f.entry["path"], "offset": offset}),
            lambda tar: self.request("PUT", f"/v1/dataset-uploads/{up['id']}/files",
                                     content=tar),
            files, up["chunk_bytes"], progress, up.get("received_files"))
        return self.request("POST", f"/v1/dataset-uploads/{up['id']}/commit", timeout=None)


class _Pieces(io.RawIOBase):
    """A stream's pieces read as a file (for tarfile)."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces, self._left = pieces, b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._left:
            piece = next(self._pieces, None)
            if piece is None:
                return 0
            self._left = piece
        n = min(len(b), len(self._left))
        b[:n] = self._left[:n]
        self._left = self._left[n:]
        return n
