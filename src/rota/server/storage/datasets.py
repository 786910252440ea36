"""Datasets: registered once, versioned by content, on every machine before the job starts.

``rota dataset add NAME PATH`` uploads a folder in chunks (the client sends a manifest of
sizes and sha256 first, then each file's bytes; nothing is published until every file
matches) and ``rota dataset add NAME s3://bucket/prefix`` copies a bucket's prefix; either
way the files go to the store (rota.storage) under ``datasets/OWNER/NAME/DIGEST`` and the
version is a row of ``datasets``: the same content added again is the same version.

A job names versions (``--dataset NAME[:VERSION]``); intake resolves each to
``OWNER/NAME:vN``, stored in the spec and in ``job_datasets``. On this machine a job whose
versions are not all in the cache (rota.storage.cache: verified, read-only, never half
present, with a size limit and least-recently-used eviction) waits with that reason while
a worker fetches them; it then sees each at ``ROTA_DATASET_<NAME>`` (a container at
``/datasets/<name>``, read-only). Read-only modes do not stop a root job, nor the account
that owns a private copy: each version is checked against its seal before a job is handed
it (once per loop turn, however many jobs start with it), and one that was changed is
fetched again while the job waits. A version a starting or running job reads is never
evicted. On a cluster pool the job fetches its versions itself (rota.storage.job_fetch).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import logging
import os
import re
import shutil
import tarfile
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rota.backends.base import RunAs
from rota.config import Settings
from rota.core.lifecycle import JobState
from rota.core.plan import Reason, ReasonCode
from rota.core.spec import DATASET_NAME, DATASET_OWNER, DATASET_REF_PARTS, JobSpec
from rota.errors import BackendError, Conflict, Forbidden, InvalidSpec, NotFound, StorageError
from rota.server.storage import dataset_uploads
from rota.server.storage.dataset_uploads import UPLOAD_KEPT_S, Upload
from rota.storage import FileEntry, Manifest, ObjectStore, build_manifest, job_fetch, safe_relpath
from rota.storage.cache import CacheFull, DatasetCache
from rota.storage.s3 import download_prefix
from rota.store.db import redact_url
from rota.store.repo import DatasetRecord, Store
from rota.units import format_memory

log = logging.getLogger("rota.datasets")

ENV_PREFIX = "ROTA_DATASET_"
CONTAINER_ROOT = "/datasets"
NAME_RE = DATASET_NAME
OWNER_RE = DATASET_OWNER
REF = DATASET_REF_PARTS  # what a job may name: [OWNER/]NAME[:VERSION]
#: the most bytes one upload chunk carries (under the smallest request bound worth having)
CHUNK_BYTES = 8 << 20
#: the most files one dataset version holds
MAX_FILES = 200_000
#: waits before a failed fetch is tried again: passing trouble, then anything else
RETRY_PASSING_S = 30.0
RETRY_OTHER_S = 300.0
#: the longest a version's check at a launch is taken for the next ones (one loop turn's)
CHECKED_KEPT_S = 1.0


class DatasetMissing(BackendError):
    """A version a job was to read left the cache before its launch: nothing started, and
    the job waits again (not a failure of the job's)."""


def env_name(name: str) -> str:
    """The variable a job finds a dataset's folder in: ROTA_DATASET_ and the name in
    capitals, other characters as ``_``."""
    return ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", name.upper())


def key_of(owner: str, name: str, digest: str) -> str:
    return f"datasets/{owner}/{name}/{digest}"


def ref_of(row: DatasetRecord) -> str:
    return f"{row.owner}/{row.name}:v{row.version}"


def split_ref(ref: str) -> tuple[str, str]:
    """(OWNER/NAME, vN) of a resolved reference."""
    dataset, _, version = ref.rpartition(":")
    return dataset, version


def version_view(row: DatasetRecord) -> dict[str, Any]:
    return {"ref": ref_of(row), "owner": row.owner, "name": row.name,
            "version": row.version, "digest": row.digest, "shared": bool(row.shared),
            "files": row.files, "bytes": row.bytes, "source": row.source,
            "description": row.description, "created_by": row.created_by,
            "created_at": row.created_at, "store": redact_url(row.store_url),
            "key": row.key}


class Datasets:
    def __init__(self, settings: Settings, store: Store, clock: Callable[[], float],
                 post: Callable[..., None], kick: Callable[[], None],
                 later: Callable[[float, Callable[[], None]], None],
                 objects: Callable[[], ObjectStore], state: Callable[[int], JobState | None],
                 run_as: Callable[[str], RunAs | None]) -> None:
        self.settings, self.store, self.clock = settings, store, clock
        self.post, self.kick, self.later = post, kick, later
        self.objects, self.state, self.run_as = objects, state, run_as
        st = settings.storage
        self.max_bytes = st.max_dataset_bytes
        self.cache_limit = st.dataset_cache_limit
        self._cache: DatasetCache | None = None  # made at its first use
        self.uploads_dir = settings.home / "staging" / "uploads"
        self.versions: dict[str, DatasetRecord] = {}  # OWNER/NAME:vN -> its row
        self.waiting: dict[int, tuple[str, ...]] = {}  # a waiting local job's versions
        self.pinned: dict[int, tuple[str, ...]] = {}  # a starting or running job's
        self.ready: set[str] = set()  # cache slots here (_slot: a digest, or a private copy's)
        self.fetching: set[str] = set()
        self.trouble: dict[str, str] = {}  # slot -> why its last fetch failed
        self.changed: set[str] = set()  # slots found changed in the cache, fetched again
        self._checked: dict[str, str] = {}  # slot -> why it cannot be used ("": it can),
        self._checked_at = 0.0  # found in this loop turn (time.monotonic() of the first)
        self.full: set[str] = set()  # of those, the ones the cache had no room for
        self.uploads: dict[str, Upload] = {}
        self.finished: dict[str, Upload] = {}  # committed: for a second client's commit
        self._slots: dict[int, tuple[str, tuple[int, int] | None]] = {}  # version id ->
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rota-datasets")
        self._closed = False

    @property
    def cache(self) -> DatasetCache:
        """This machine's cache, made at its first use: in the daemon's home, private,
        unless a root daemon's other accounts' jobs read from it (0711: passable)."""
        if self._cache is None:
            self._cache = DatasetCache(self.settings.dataset_cache_root, self.cache_limit,
                                       mode=0o711 if os.geteuid() == 0 else 0o700)
        return self._cache

    # --- life ---------------------------------------------------------------------------
    def start(self) -> None:
        """The versions, the cache's contents, and the jobs not ended that read some."""
        self.versions = {ref_of(r): r for r in self.store.dataset_versions()}
        # uploads a restart cut off go on (unless their content made a version meanwhile:
        # the daemon stopped in their commit)
        made = {(r.owner, r.name, r.digest) for r in self.versions.values()}
        for up in dataset_uploads.load(self.uploads_dir, self.clock()):
            if (up.owner, up.name, up.manifest.digest()) in made:
                dataset_uploads.drop(up)
            else:
                self.uploads[up.id] = up
        if self.settings.dataset_cache_root.is_dir():
            try:
                self.cache.clean_leftovers(self.clock())
                self.ready = {e.digest for e in self.cache.entries()
                              if self.cache.present(e.digest)}
            except (OSError, StorageError) as e:
                log.warning("the dataset cache %s could not be read: %s", self.cache.root, e)
        refs: dict[int, list[str]] = {}
        states: dict[int, str] = {}
        for job_id, ref, state, pool in self.store.live_dataset_uses():
            if pool is None:  # (a cluster pool's job fetches its own)
                refs.setdefault(job_id, []).append(ref)
                states[job_id] = state
        for job_id, got in refs.items():
            if states[job_id] in (JobState.PENDING.value, JobState.HELD.value):
                self.waiting[job_id] = tuple(got)
            else:
                self.pinned[job_id] = tuple(got)
        self._pump()

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- at submit ----------------------------------------------------------------------
    def resolve(self, spec: JobSpec, user: str, prefix: str, *, engine: str | None
                ) -> JobSpec:
        """The spec with each dataset it names as ``OWNER/NAME:vN``; InvalidSpec for one
        that does not exist or is not the user's to read, two that would share a
        variable, or one larger than this machine's cache (``engine``: a cluster pool's,
        whose jobs fetch their own; None for this machine)."""
        if not spec.datasets:
            return spec
        out: list[str] = []
        names: dict[str, str] = {}
        total = 0
        for given in spec.datasets:
            try:
                row = self.find(given, user, field=f"{prefix}datasets")
            except NotFound as e:  # (a submit's bad field, not a missing resource)
                raise InvalidSpec(str(e), field="datasets") from None
            var = env_name(row.name)
            if var in names and names[var] != given:
                raise InvalidSpec(f"{prefix}datasets: {names[var]!r} and {given!r} would "
                                  f"both be {var}", field="datasets")
            names[var] = given
            out.append(ref_of(row))
            total += row.bytes
        limit = self.cache_limit
        if engine is None and total > limit:
            raise InvalidSpec(f"{prefix}datasets: they hold {format_memory(total)}, more than "
                              f"this machine's dataset cache ({format_memory(limit)}, "
                              "[storage] dataset_cache_limit)", field="datasets")
        if engine == "kubernetes" and not self.settings.storage_url.startswith("s3://"):
            raise InvalidSpec(f"{prefix}datasets: a kubernetes pool's pods fetch datasets "
                              "from an S3 store, and this daemon's store is a local folder "
                              "([storage] url)", field="datasets")
        return spec.model_copy(update={"datasets": out})

    def find(self, given: str, user: str, *, field: str = "dataset") -> DatasetRecord:
        """The version ``[OWNER/]NAME[:VERSION]`` names that ``user`` may read: NAME
        alone is the user's own, else the one dataset of that name shared with all."""
        m = REF.match(given)
        if m is None:
            raise InvalidSpec(f"{field}: {given!r} is not [OWNER/]NAME[:VERSION] (VERSION: "
                              "vN, a digest's first hex digits, or latest)",
                              field=field.rpartition(": ")[2] or "datasets")
        owner, name, version = m["owner"], m["name"], m["version"] or "latest"
        rows = [r for r in self.versions.values() if r.name == name
                and (r.owner == owner if owner else True) and (r.owner == user or r.shared)]
        if not owner and any(r.owner == user for r in rows):
            rows = [r for r in rows if r.owner == user]
        owners = sorted({r.owner for r in rows})
        if not rows:
            raise NotFound(f"{field}: no dataset {given.partition(':')[0]!r} you may read "
                           "(`rota dataset list`)")
        if len(owners) > 1:
            raise InvalidSpec(f"{field}: {name!r} is shared by {', '.join(owners)}: name "
                              f"it as OWNER/{name}", field="datasets")
        rows.sort(key=lambda r: r.version)
        if version == "latest":
            return rows[-1]
        if version.startswith("v") and version[1:].isdigit():
            got = [r for r in rows if r.version == int(version[1:])]
        else:
            got = [r for r in rows if r.digest.startswith(version)]
        if len(got) != 1:
            have = ", ".join(f"v{r.version}" for r in rows)
            what = "no" if not got else "more than one"
            raise NotFound(f"{field}: {what} version {version!r} of {owners[0]}/{name} "
                           f"(it has {have})")
        return got[0]

    # --- waiting jobs ---------------------------------------------------------------------
    def want(self, jobs: Iterable[tuple[int, JobSpec]]) -> None:
        """Newly accepted local jobs that read datasets: their versions are fetched."""
        got = False
        for job_id, spec in jobs:
            if spec.datasets:
                self.waiting[job_id] = tuple(spec.datasets)
                got = True
        if got:
            self._pump()

    def held(self) -> dict[int, Reason]:
        """The waiting jobs whose versions are not all in the cache, with the reason
        (for the pass); jobs that left the queue meanwhile are dropped here."""
        out: dict[int, Reason] = {}
        for job_id in list(self.waiting):
            state = self.state(job_id)
            # (None: not read yet; a restart reads the pending jobs page by page)
            if state is not None and state not in (JobState.PENDING, JobState.HELD):
                del self.waiting[job_id]
                continue
            missing = [ref for ref in self.waiting[job_id] if self._slot_of(ref) not in self.ready]
            if missing:
                out[job_id] = Reason(ReasonCode.DATA, self._why(missing))
        return out

    def _why(self, missing: list[str]) -> str:
        parts = []
        for ref in missing:
            row = self.versions.get(ref)
            if row is None:
                parts.append(f"{ref} was removed")
                continue
            slot = self._slot(row)
            trouble = self.trouble.get(slot)
            size = format_memory(row.bytes)
            again = " again: it was changed in the cache since it was verified" \
                if slot in self.changed else " to this machine"
            parts.append(f"{ref} ({size}) cannot be fetched yet: {trouble}" if trouble
                         else f"{ref} ({size}) is being fetched{again}"
                         if slot in self.fetching else f"{ref} ({size}) is queued "
                         f"to be fetched{again}")
        return "waits for its datasets: " + "; ".join(parts)

    def _slot_of(self, ref: str) -> str | None:
        row = self.versions.get(ref)
        return self._slot(row) if row is not None else None

    def _slot(self, row: DatasetRecord) -> str:
        """The version's name in the cache: its digest, or, for a root daemon's private
        dataset (a copy only its owner reads), the digest and the owner's uid hashed: the
        same content in another's private dataset, or a shared one, is another copy."""
        got = self._slots.get(row.id)
        if got is None:
            owner = self._owner_of(row)
            slot = row.digest if owner is None else hashlib.sha256(
                f"{row.digest}:{owner[0]}".encode()).hexdigest()
            got = self._slots[row.id] = (slot, owner)
        return got[0]

    def _pump(self) -> None:
        """Fetch what waiting jobs need, one version at a time, in the order they came."""
        if self._closed or self.fetching:
            return
        for refs in list(self.waiting.values()):
            for ref in refs:
                row = self.versions.get(ref)
                if row is None:
                    continue
                slot = self._slot(row)
                if slot in self.ready or slot in self.trouble:
                    continue
                self.fetching.add(slot)
                self._pool.submit(self._fetch, row, slot, self._kept(), self._slots[row.id][1])
                return

    def _kept(self) -> set[str]:
        """Digests never evicted now: those of starting and running jobs, and those
        waiting jobs will read that are here already."""
        keep = {d for refs in self.pinned.values() for r in refs if (d := self._slot_of(r))}
        keep |= {d for refs in self.waiting.values() for r in refs
                 if (d := self._slot_of(r)) in self.ready}
        return keep

    def _owner_of(self, row: DatasetRecord) -> tuple[int, int] | None:
        """A root daemon's private dataset is its owner's alone in the cache."""
        if row.shared or os.geteuid() != 0:
            return None
        try:
            run_as = self.run_as(row.owner)
        except Exception:
            return None
        return (run_as.uid, run_as.gid) if run_as is not None else None

    def _fetch(self, row: DatasetRecord, slot: str, keep: set[str],
               owner: tuple[int, int] | None) -> None:
        """On the worker; the outcome goes to the loop."""
        try:
            self.cache.fetch(self.objects(), row.key, row.digest, keep=keep, now=self.clock(),
                             owner=owner, slot=slot,
                             changed=lambda _slot: log.warning(
                                 "dataset %s was changed in the cache since it was "
                                 "verified; fetched again", ref_of(row)))
        except CacheFull as e:  # tried again when a job lets go of its versions
            self.post(self._fetched, slot, str(e), None, True)
        except (StorageError, NotFound, OSError) as e:
            passing = bool(getattr(e, "passing", False))
            self.post(self._fetched, slot, str(e),
                      RETRY_PASSING_S if passing else RETRY_OTHER_S)
        except Exception as e:  # never lose the daemon over one fetch
            log.exception("fetching dataset %s failed", ref_of(row))
            self.post(self._fetched, slot, f"{type(e).__name__}: {e}", RETRY_OTHER_S)
        else:
            self.post(self._fetched, slot, None, None)

    def _fetched(self, slot: str, error: str | None, retry: float | None,
                 full: bool = False) -> None:
        self.fetching.discard(slot)
        self.full.discard(slot)
        if error is None:
            self.changed.discard(slot)
            self._checked.pop(slot, None)  # (placed since: checked afresh)
            self.ready.add(slot)
            self.trouble.pop(slot, None)
            self._evicted()
            self.kick()
        else:
            log.warning("dataset version %s not fetched: %s", slot[:12], error)
            self.trouble[slot] = error
            if full:
                self.full.add(slot)
            elif retry is not None:
                self.later(retry, lambda: self._retry(slot))
        self._pump()

    def _retry(self, slot: str) -> None:
        self.trouble.pop(slot, None)
        self._pump()

    def _evicted(self) -> None:
        """What the cache holds now (a fetch may have made room)."""
        with contextlib.suppress(OSError, StorageError):
            self.ready = {e.digest for e in self.cache.entries()}

    # --- launch and end -----------------------------------------------------------------
    def launch(self, job_id: int, spec: JobSpec) -> dict[str, str]:
        """The job's variables for its versions (their folders in the cache, or under
        /datasets in a container), pinned until it ends; BackendError when one is not
        here (the launch fails, and the job is tried again)."""
        if not spec.datasets:
            return {}
        out: dict[str, str] = {}
        for ref in spec.datasets:
            row = self.versions.get(ref)
            if row is None:
                raise DatasetMissing(f"its dataset {ref} is not on this machine (any more); "
                                     "it waits for it again")
            slot = self._slot(row)
            why = self._unusable(slot, ref)
            if why:  # gone from the cache, or changed: fetched again
                self.ready.discard(slot)
                self.waiting[job_id] = tuple(spec.datasets)
                self._pump()
                raise DatasetMissing(f"its dataset {ref} {why}; it waits for it again")
            out[env_name(row.name)] = str(self.cache.path(slot))
        self.waiting.pop(job_id, None)
        self.pinned[job_id] = tuple(spec.datasets)
        now = self.clock()
        slots = [self._slot(self.versions[r]) for r in spec.datasets]
        self._pool.submit(self._touch, slots, now)
        return out

    def _unusable(self, slot: str, ref: str) -> str:
        """Why the cached version cannot be handed to a job ("": it can): not here, or
        changed since it was placed (a root job, or the owner of a private copy, wrote
        into it). Checked once per loop turn: the jobs a pass starts together share it."""
        now = time.monotonic()
        if now - self._checked_at > CHECKED_KEPT_S:  # (should the loop's clear not come)
            self._checked.clear()
        got = self._checked.get(slot)
        if got is not None:
            return got
        if not self._checked:
            self._checked_at = now
            self.later(0.0, self._checked.clear)
        if not self.cache.present(slot):
            got = "is not on this machine (any more)"
        elif not self.cache.intact(slot):  # one lstat per file (docs/storage.md)
            entry = self.cache.entry(slot)
            why = "was changed in the cache since it was verified" if entry and entry.seal \
                else "has no seal in the cache to verify it by (an older Rota placed it)"
            log.warning("dataset %s %s; fetched again", ref, why)
            self.changed.add(slot)
            got = f"{why}: it is fetched again"
        else:
            got = ""
        self._checked[slot] = got
        return got

    def _touch(self, slots: list[str], now: float) -> None:
        """A use, for least-recently-used eviction (on the worker)."""
        for slot in slots:
            with contextlib.suppress(OSError, StorageError):
                self.cache.touch(slot, now)

    def mounts(self, found: Mapping[str, str]) -> dict[str, str]:
        """A container's read-only mounts for ``launch``'s variables: its path -> ours."""
        return {f"{CONTAINER_ROOT}/{var.removeprefix(ENV_PREFIX).lower()}": path
                for var, path in found.items()}

    def ended(self, job_id: int, spec: JobSpec, *, waits: bool) -> None:
        """The attempt ended: the job lets go of its versions, and wants them again when
        it ``waits`` in the queue once more."""
        if waits and spec.datasets:
            self.waiting[job_id] = tuple(spec.datasets)
        if self.pinned.pop(job_id, None) is not None and self.full:
            for slot in self.full:  # room may be there now
                self.trouble.pop(slot, None)
            self.full.clear()
            self._pump()

    def engine_env(self, spec: JobSpec) -> dict[str, str]:
        """A cluster pool's job: what rota.storage.job_fetch reads to fetch its versions
        before its command."""
        if not spec.datasets:
            return {}
        st = self.settings.storage
        doc = {"store": self.settings.storage_url, "endpoint_url": st.endpoint_url,
               "region": st.region,
               "datasets": [{"env": env_name(self.versions[r].name), "key": self.versions[r].key,
                             "digest": self.versions[r].digest, "ref": r}
                            for r in spec.datasets if r in self.versions]}
        return {job_fetch.FETCH_ENV: json.dumps(doc, separators=(",", ":"))}

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
