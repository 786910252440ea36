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

Here: the versions, resolved at submit, fetched for the jobs that wait and handed to the
ones that start. Adding, removing and showing them (the API's) is ``dataset_registry``,
mixed into ``Datasets``; how a version is named (its variable, key, reference), ``dataset_names``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from rota.backends.base import RunAs
from rota.config import Settings
from rota.core.lifecycle import JobState
from rota.core.plan import Reason, ReasonCode
from rota.core.spec import JobSpec
from rota.errors import BackendError, InvalidSpec, NotFound, StorageError
from rota.server.storage import dataset_uploads
from rota.server.storage.dataset_names import CONTAINER_ROOT, ENV_PREFIX, REF, env_name, ref_of
from rota.server.storage.dataset_registry import DatasetRegistry
from rota.server.storage.dataset_uploads import Upload
from rota.storage import ObjectStore, job_fetch
from rota.storage.cache import CacheFull, DatasetCache
from rota.store.repo import DatasetRecord, Store
from rota.units import format_memory

log = logging.getLogger("rota.datasets")

#: waits before a failed fetch is tried again: passing trouble, then anything else
RETRY_PASSING_S = 30.0
RETRY_OTHER_S = 300.0
#: the longest a version's check at a launch is taken for the next ones (one loop turn's)
CHECKED_KEPT_S = 1.0


class DatasetMissing(BackendError):
    """A version a job was to read left the cache before its launch: nothing started, and
    the job waits again (not a failure of the job's)."""


class Datasets(DatasetRegistry):
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
