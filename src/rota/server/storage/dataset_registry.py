"""What the API asks of the datasets: registering a version (an upload in chunks, checked
against its manifest before anything is published, or an import of an ``s3://`` prefix),
removing one, and showing them (list, one version with its files and jobs, the cache).

``DatasetRegistry`` is mixed into ``rota.server.storage.datasets.Datasets``, which holds
the state (the versions, the uploads under way, this machine's cache) and the fetching for
jobs; what this half uses of it is declared at the top of the class. The heavy work (the
files written, hashed, published) runs on threads, away from the loop.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import shutil
import tarfile
import uuid
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rota.config import Settings
from rota.errors import Conflict, Forbidden, InvalidSpec, NotFound, StorageError
from rota.server.storage import dataset_uploads
from rota.server.storage.dataset_names import NAME_RE, REF, key_of, ref_of, version_view
from rota.server.storage.dataset_uploads import UPLOAD_KEPT_S, Upload
from rota.storage import FileEntry, Manifest, ObjectStore, build_manifest, safe_relpath
from rota.storage.s3_transfers import download_prefix
from rota.store.repo import DatasetRecord, Store
from rota.units import format_memory

if TYPE_CHECKING:
    from rota.storage.cache import DatasetCache

log = logging.getLogger("rota.datasets")

#: the most bytes one upload chunk carries (under the smallest request bound worth having)
CHUNK_BYTES = 8 << 20
#: the most files one dataset version holds
MAX_FILES = 200_000


class DatasetRegistry:
    """Adding, removing and showing dataset versions, for the API (see the module's text)."""

    # what Datasets holds, that this half reads and changes
    settings: Settings
    store: Store
    clock: Callable[[], float]
    objects: Callable[[], ObjectStore]
    max_bytes: int
    uploads_dir: Path
    versions: dict[str, DatasetRecord]  # OWNER/NAME:vN -> its row
    ready: set[str]
    fetching: set[str]
    trouble: dict[str, str]
    uploads: dict[str, Upload]
    finished: dict[str, Upload]

    if TYPE_CHECKING:  # Datasets' own
        @property
        def cache(self) -> DatasetCache: ...

        def find(self, given: str, user: str, *, field: str = "dataset") -> DatasetRecord: ...

        def _slot(self, row: DatasetRecord) -> str: ...

    # --- registering (the API; heavy work on threads) ---------------------------------------
    def may_read(self, row: DatasetRecord, user: str, admin: bool) -> bool:
        return admin or row.shared or row.owner == user

    async def begin_upload(self, *, owner: str, name: str, shared: bool,
                           description: str | None, source: str, files: list[FileEntry]
                           ) -> dict[str, Any]:
        """An upload of these files (their sizes and sha256): a new one, or the one of the
        same content cut off earlier (kept UPLOAD_KEPT_S, across restarts), which says what
        it has; or the version that has this content already (nothing to send)."""
        _check_name(name)
        if len(files) > MAX_FILES:
            raise InvalidSpec(f"files: {len(files)} files, more than the {MAX_FILES} one "
                              "dataset may hold: pack them (tar, parquet, ...)", field="files")
        if not files:
            raise InvalidSpec("files: the dataset holds no file", field="files")
        try:
            manifest = Manifest(files=tuple(files), created_at=self.clock(),
                                meta={"source": source})
        except StorageError as e:
            raise InvalidSpec(f"files: {e}", field="files") from None
        paths = {f.path for f in files}
        folders = {p.rpartition("/")[0] for p in paths} - {""}
        folders |= {f.rsplit("/", n)[0] for f in folders for n in range(1, f.count("/") + 1)}
        clash = sorted(paths & folders)
        if clash:
            raise InvalidSpec(f"files: {clash[0]!r} is listed as a file and as a folder",
                              field="files")
        self._check_size(manifest.total_size, name)
        existing = [r for r in self.versions.values() if r.owner == owner and r.name == name
                    and r.digest == manifest.digest()]
        if existing:
            return {"upload": None, "version": version_view(existing[0]), "made": False}
        now = self.clock()
        self._drop_old_uploads(now)
        digest = manifest.digest()
        found = [up for up in self.uploads.values()
                 if (up.owner, up.name) == (owner, name) and up.manifest.digest() == digest]
        if found:  # the same content cut off: sent on from there
            up = found[0]
            up.shared, up.description, up.made_at = shared, description, now
        else:
            upload_id = uuid.uuid4().hex
            up = self.uploads[upload_id] = Upload(
                id=upload_id, owner=owner, name=name, shared=shared, description=description,
                source=source, manifest=manifest, dir=self.uploads_dir / upload_id,
                made_at=now)
        try:  # (in the table first: a second client of this content meanwhile shares it)
            await asyncio.to_thread(dataset_uploads.save, up)
        except OSError as e:
            if not found:
                self.uploads.pop(up.id, None)
            raise StorageError(f"dataset {name}: the upload cannot be recorded in "
                               f"{up.dir}: {e}") from e
        return {"upload": self.upload_view(up), "version": None, "made": False}

    def upload_view(self, up: Upload) -> dict[str, Any]:
        return {"id": up.id, "name": up.name, "files": len(up.manifest.files),
                "bytes": up.total, "received": up.done, "chunk_bytes": self.chunk_bytes(),
                "received_files": {p: n for p, n in up.received.items() if n}}

    def chunk_bytes(self) -> int:
        return max(1 << 16, min(CHUNK_BYTES, self.settings.max_request_bytes - (64 << 10)))

    def upload(self, upload_id: str, owner: str) -> Upload:
        up = self.uploads.get(upload_id) or self.finished.get(upload_id)
        if up is None or up.owner != owner:
            raise NotFound(f"no upload {upload_id!r} (uploads are kept "
                           f"{UPLOAD_KEPT_S / 3600:g} h): start it again")
        return up

    async def put_chunk(self, up: Upload, path: str, offset: int, data: bytes) -> int:
        """Write ``data`` at ``offset`` of the file: the next bytes, or bytes sent again
        (a retry); the file's bytes received so far."""
        entry = up.manifest.find(path)
        if entry is None:
            raise NotFound(f"upload {up.id}: {path!r} is not one of its files")
        if offset + len(data) > entry.size:
            raise InvalidSpec(f"upload {up.id}: {path}: {offset + len(data)} bytes, more than "
                              f"the {entry.size} its manifest said", field="offset")
        have = up.received.get(path, 0)
        if offset > have and not up.sealed:
            raise Conflict(f"upload {up.id}: {path}: {have} bytes received so far; send from "
                           f"there (offset {have})")
        return await asyncio.to_thread(self._write, up, entry, offset, data)

    async def put_files(self, up: Upload, tar: bytes) -> dict[str, int]:
        """Small files whole, many in one request: ``tar`` (an uncompressed tar) holds
        each as a regular file named by its manifest path, at its manifest size. What each
        file has now; InvalidSpec naming the first member that is not such a file, and
        then none of them is written."""
        return await asyncio.to_thread(self._write_files, up, tar)

    def _write_files(self, up: Upload, tar: bytes) -> dict[str, int]:
        try:
            with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
                members = archive.getmembers()
                wanted: list[tuple[FileEntry, tarfile.TarInfo]] = []
                for m in members:
                    entry = up.manifest.find(m.name)
                    if entry is None:
                        raise NotFound(f"upload {up.id}: {m.name!r} is not one of its files")
                    if not m.isreg() or m.size != entry.size:
                        raise InvalidSpec(f"upload {up.id}: {m.name}: not the whole file "
                                          f"({m.size} bytes; its manifest says {entry.size})"
                                          if m.isreg() else
                                          f"upload {up.id}: {m.name}: not a regular file",
                                          field="body")
                    wanted.append((entry, m))
                out = {}
                for entry, m in wanted:
                    f = archive.extractfile(m)
                    assert f is not None  # (a regular member)
                    out[entry.path] = self._write(up, entry, 0, f.read())
                return out
        except tarfile.TarError as e:
            raise InvalidSpec(f"upload {up.id}: the body is not a tar: {e}",
                              field="body") from None

    @staticmethod
    def _write(up: Upload, entry: FileEntry, offset: int, data: bytes) -> int:
        target = up.staged / safe_relpath(entry.path)
        with up.lock:
            if up.sealed:  # being published: what was checked stays as it was
                return entry.size
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:  # (bytes sent again overwrite theirs: the commit checks every sha256)
                os.pwrite(fd, data, offset)
            finally:
                os.close(fd)
            got = up.received[entry.path] = max(up.received.get(entry.path, 0),
                                                 offset + len(data))
            return got

    async def commit(self, up: Upload, by: str) -> dict[str, Any]:
        """Every file arrived and matches its manifest entry: the version is published
        and recorded (or found, when the same content arrived meanwhile)."""
        if up.committed is not None:  # another client of the same content committed it
            await up.committed.wait()
            if up.result is None:
                raise Conflict(f"upload {up.id}: its commit failed; add the dataset again")
            return {**up.result, "made": False}
        short = [f.path for f in up.manifest.files if up.received.get(f.path, 0) != f.size]
        if short:
            raise Conflict(f"upload {up.id}: {len(short)} files not complete yet, "
                           f"{short[0]!r} first")
        up.committed = asyncio.Event()
        await asyncio.to_thread(self._seal, up)
        self.uploads.pop(up.id, None)
        self.finished[up.id] = up
        try:
            await asyncio.to_thread(self._publish, up.staged, up.manifest, up.owner, up.name)
            up.result = self._record(up.owner, up.name, up.manifest, shared=up.shared,
                                     description=up.description, source=up.source, by=by)
        finally:
            up.committed.set()
            if up.result is None:  # failed: gone (a client waiting on it is told)
                self.finished.pop(up.id, None)
            await asyncio.to_thread(dataset_uploads.drop, up)
        return up.result

    @staticmethod
    def _seal(up: Upload) -> None:
        """No more writes: one under way ends first (the lock), later ones are dropped."""
        with up.lock:
            up.sealed = True

    def _publish(self, staged: Path, manifest: Manifest, owner: str, name: str) -> None:
        for entry in manifest.files:  # (empty files are never sent)
            target = staged / safe_relpath(entry.path)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                target.touch(mode=0o600)
        got = build_manifest(staged, now=self.clock())
        if got.digest() != manifest.digest():
            wrong = [f.path for f in manifest.files if got.find(f.path) != f]
            raise StorageError(f"the files received do not match what was announced "
                               f"({', '.join(wrong[:3]) or 'their list'}): the folder "
                               "changed while it was sent; add it again")
        self.objects().publish(key_of(owner, name, manifest.digest()), staged, manifest,
                               move=True)

    async def import_s3(self, *, owner: str, name: str, source: str, shared: bool,
                        description: str | None, by: str) -> dict[str, Any]:
        """Copy ``s3://bucket/prefix`` into the store as a version of the dataset."""
        _check_name(name)
        staged = self.uploads_dir / uuid.uuid4().hex
        try:
            manifest = await asyncio.to_thread(self._import, source, staged, owner, name)
        finally:
            await asyncio.to_thread(shutil.rmtree, staged, True)
        return self._record(owner, name, manifest, shared=shared, description=description,
                            source=source, by=by)

    def _import(self, source: str, staged: Path, owner: str, name: str) -> Manifest:
        staged.mkdir(parents=True, mode=0o700)
        skipped: list[str] = []
        try:
            download_prefix(source, staged, skipped=skipped.append, max_bytes=self.max_bytes)
        except StorageError as e:  # the source is what the user gave: theirs to fix
            if e.code == "NoSuchBucket":
                raise NotFound(f"{source}: no such bucket") from None
            if e.code == "AccessDenied":
                raise Forbidden(f"{source}: the daemon may not read it ({e})") from None
            raise
        manifest = build_manifest(staged, now=self.clock())
        if not manifest.files:
            raise NotFound(f"{source}: no object under that prefix")
        self._check_size(manifest.total_size, name)
        self.objects().publish(key_of(owner, name, manifest.digest()), staged, manifest,
                               move=True)
        return manifest

    def _record(self, owner: str, name: str, manifest: Manifest, *, shared: bool,
                description: str | None, source: str, by: str) -> dict[str, Any]:
        digest = manifest.digest()
        row, made = self.store.add_dataset_version(
            owner=owner, name=name, digest=digest, key=key_of(owner, name, digest),
            store_url=self.settings.storage_url, shared=shared, files=len(manifest.files),
            size=manifest.total_size, source=source, description=description, by=by,
            now=self.clock())
        self.versions[ref_of(row)] = row
        return {"upload": None, "version": version_view(row), "made": made}

    def _check_size(self, size: int, name: str) -> None:
        if size > self.max_bytes:
            raise InvalidSpec(f"dataset {name}: {format_memory(size)}, more than the "
                              f"{format_memory(self.max_bytes)} a dataset may hold here "
                              "([storage] max_dataset_bytes)", field="files")

    def _drop_old_uploads(self, now: float) -> None:
        for old in [u for u in self.uploads.values() if now - u.made_at > UPLOAD_KEPT_S]:
            del self.uploads[old.id]
            dataset_uploads.drop(old)
        for done in [u for u in self.finished.values() if now - u.made_at > UPLOAD_KEPT_S]:
            del self.finished[done.id]

    async def remove(self, *, owner: str, name: str, version: str | None, user: str,
                     admin: bool) -> list[dict[str, Any]]:
        """Remove one version, or every version of the dataset: refused while a job not
        ended reads one. Its files leave the store and this machine's cache."""
        if owner != user and not admin:
            raise Forbidden(f"dataset {owner}/{name} is {owner}'s: only they or an admin "
                            "remove it")
        rows = [r for r in self.versions.values() if r.owner == owner and r.name == name]
        if version is not None:
            rows = [self.find(f"{owner}/{name}:{version}", owner)]
        if not rows:
            raise NotFound(f"no dataset {owner}/{name}")
        refs = [ref_of(r) for r in rows]
        using = self.store.jobs_using(refs)
        if using:
            jobs = ", ".join(f"{j} ({s})" for j, _, s in using[:10])
            raise Conflict(f"dataset {owner}/{name}: jobs not ended read it: {jobs}; cancel "
                           "them or let them end first")
        self.store.remove_dataset_versions([r.id for r in rows], now=self.clock())
        for ref in refs:
            self.versions.pop(ref, None)
        keep = {self._slot(r) for r in self.versions.values()}
        await asyncio.to_thread(self._drop_files, [(r, self._slot(r)) for r in rows], keep)
        return [version_view(r) for r in rows]

    def _drop_files(self, rows: list[tuple[DatasetRecord, str]], keep: Collection[str]
                    ) -> None:
        for row, slot in rows:
            try:
                self.objects().delete(row.key)
            except (StorageError, NotFound) as e:
                log.warning("dataset %s: its files stay in the store: %s", ref_of(row), e)
            if slot not in keep:
                try:
                    self.cache.remove(slot)
                except (OSError, StorageError) as e:
                    log.warning("dataset %s: its cached copy stays: %s", ref_of(row), e)
                self.ready.discard(slot)

    # --- what people see ----------------------------------------------------------------
    def views(self, user: str, admin: bool) -> list[dict[str, Any]]:
        """Each dataset the user may read, with its latest version and every number."""
        by: dict[tuple[str, str], list[DatasetRecord]] = {}
        for row in self.versions.values():
            if self.may_read(row, user, admin):
                by.setdefault((row.owner, row.name), []).append(row)
        out = []
        for _, rows in sorted(by.items()):
            rows.sort(key=lambda r: r.version)
            latest = rows[-1]
            out.append({**version_view(latest), "versions": [r.version for r in rows],
                        "cached": self._slot(latest) in self.ready})
        return out

    async def show(self, given: str, user: str, admin: bool) -> dict[str, Any]:
        """One version with its files and the jobs that read it."""
        row = self.find(given, user) if not admin else self._find_any(given, user)
        manifest = await asyncio.to_thread(self.objects().manifest, row.key)
        files = [{"path": f.path, "size": f.size, "sha256": f.sha256}
                 for f in (manifest.files if manifest else ())]
        others = sorted(r.version for r in self.versions.values()
                        if r.owner == row.owner and r.name == row.name)
        jobs = [{"id": j, "state": s} for j, _, s in
                self.store.jobs_using([ref_of(row)], live=False)[-50:]]
        # on this machine as it was placed: a copy a job changed is not this version
        slot = self._slot(row)
        cached = slot in self.ready and await asyncio.to_thread(self.cache.intact, slot)
        return {**version_view(row), "versions": others, "contents": files,
                "cached": cached, "jobs": jobs,
                "in_store": manifest is not None}

    def _find_any(self, given: str, user: str) -> DatasetRecord:
        try:
            return self.find(given, user)
        except NotFound:
            m = REF.match(given)
            if m is None or not m["owner"]:
                raise
            row = next((r for r in self.versions.values()
                        if r.owner == m["owner"] and r.name == m["name"]), None)
            if row is None:
                raise
            return self.find(given, m["owner"])

    def cache_view(self) -> dict[str, Any]:
        try:
            entries = self.cache.entries()
        except (OSError, StorageError):
            entries = []
        by_slot: dict[str, list[str]] = {}
        for ref, row in self.versions.items():
            by_slot.setdefault(self._slot(row), []).append(ref)
        return {"path": str(self.cache.root), "limit": self.cache.limit,
                "bytes": sum(e.size for e in entries),
                "versions": [{"digest": e.digest, "bytes": e.size, "used_at": e.used_at,
                              "refs": by_slot.get(e.digest, [])} for e in entries],
                "fetching": sorted(self.fetching), "trouble": dict(self.trouble)}


def _check_name(name: str) -> None:
    if not re.fullmatch(NAME_RE, name):
        raise InvalidSpec(f"name: {name!r} is not a dataset name: lower-case letters, digits, "
                          "'.', '_' and '-', starting with a letter or digit, at most 64",
                          field="name")
