"""Workspaces whose home is an S3 bucket (``[storage] workspace_url = "s3://bucket/prefix"``):
this machine's folder ``WORKSPACES/USER/PROJECT`` is a synced copy of the objects under
``prefix/USER/PROJECT/`` (plain objects: ``aws s3`` sees the files as they are), the way
SkyPilot's COPY storage mode copies a bucket to a node and back.

- Before a job of a workspace starts here, its copy is brought up to date from the bucket
  (rota.storage.sync.sync_down) unless it is known to be current: a job of it is starting
  or running here, or it was brought less than ``FRESH_S`` ago. Meanwhile the job waits,
  with a reason that says so (``Snapshot.held``, looked up lazily per job the pass
  considers: the queue is never walked for it), and the jobs behind it start.
- When the last job of a workspace here ends, what changed in its folder goes to the
  bucket (sync_up). After a restart (a SIGKILL included) every workspace with an index is
  sent up first, before any job of it starts: its changes since the last sync are found
  by comparing the folder with the index (``WORKSPACES/.sync/USER/PROJECT.json``).
  The folder is walked, read and pruned with its account's rights
  (rota.server.storage.workspace_owner); what comes down is written by the daemon through
  descriptors opened without following links, and given to the account.
- Walks and transfers run on worker threads, one sync of a workspace at a time; the
  outcome comes back to the loop. A sync that fails is tried again after RETRY_PASSING_S
  (the network, throttling, a 5xx) or RETRY_OTHER_S, its jobs waiting with the trouble
  as their reason; no local file is ever lost to a sync (rota.storage.sync's rules).

Machines that run jobs of one workspace at the same time each send their own changes: a
file changed on two of them is the last sender's, the other's version kept beside it as a
conflict copy (a copy is never overwritten by a sync down while it holds changes of its
own; rota.storage.sync). Jobs of cluster pools get the
workspaces their pool gives; where it gives none, each syncs its own copy with the bucket
on its node (:meth:`WorkspaceSync.job_plan`, rota.storage.job_workspace).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rota.backends.base import RunAs
from rota.config import Settings
from rota.core.plan import Reason, ReasonCode
from rota.core.snapshot import PendingJob
from rota.errors import StorageError
from rota.server.storage.workspace_owner import rights_in
from rota.storage.job_workspace import WorkspacePlan
from rota.storage.s3 import S3Store
from rota.storage.s3_transfers import split_uri
from rota.storage.sync import Counts, sync_down, sync_up
from rota.storage.sync_index import load_index, save_index
from rota.storage.sync_remote import Remote

if TYPE_CHECKING:
    from rota.server.jobs.running import Running

log = logging.getLogger("rota.workspaces")

#: a workspace brought from its bucket this recently is current enough to start a job on
#: (no job of it ran here since). Long, so that a job waiting for GPUs is seldom held back
#: to bring it again: while held it keeps no GPUs kept for it, and jobs behind it may take
#: them; short enough that another machine's changes since are brought before it starts
FRESH_S = 600.0
#: waits before a failed sync is tried again: passing trouble, then anything else
RETRY_PASSING_S = 30.0
RETRY_OTHER_S = 300.0
#: syncs of different workspaces under way at once
WORKERS = 4
SYNC_DIR = ".sync"  # in the workspaces' folder: the indexes, and downloads under way
STAGING = ".staging"  # (a user's name never starts with a dot)
DEFAULT_PROJECT = "default"

Key = tuple[str, str]  # (user, project)


def key_of(user: str, project: str | None) -> Key:
    return (user, project or DEFAULT_PROJECT)


class HeldJobs(Mapping[int, Reason]):
    """The jobs held back outside the pass: ``first``'s (datasets being fetched), then
    those whose workspace is not current here, found per job as the pass looks it up
    (a lookup, never a walk of the queue; ``len`` and iteration walk it, and nothing in a
    pass asks for them)."""

    def __init__(self, first: Mapping[int, Reason], reason: Callable[[int], Reason | None],
                 ids: Callable[[], Iterable[int]]) -> None:
        self.first, self.reason, self.ids = first, reason, ids

    def get(self, job_id: int, default: Any = None) -> Any:
        found = self.first.get(job_id) if self.first else None
        if found is None:
            found = self.reason(job_id)
        return default if found is None else found

    def __getitem__(self, job_id: int) -> Reason:
        found: Reason | None = self.get(job_id)
        if found is None:
            raise KeyError(job_id)
        return found

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, int) and self.get(job_id) is not None

    def __iter__(self) -> Iterator[int]:
        return (job_id for job_id in self.ids() if job_id in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:  # (a pass must look its jobs up; no walk to learn it)
        return True


class WorkspaceSync:
    def __init__(self, settings: Settings, url: str, clock: Callable[[], float],
                 post: Callable[..., None], kick: Callable[[], None],
                 later: Callable[[float, Callable[[], None]], None],
                 run_as: Callable[[str], RunAs | None] | None = None) -> None:
        self.clock, self.post, self.kick, self.later = clock, post, kick, later
        self.run_as = run_as
        self.bucket, self.prefix = split_uri(url)
        self.url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.endpoint_url, self.region = settings.storage.endpoint_url, settings.storage.region
        self.root = settings.workspaces_root
        self.index_dir = self.root / SYNC_DIR
        self.staging = self.index_dir / STAGING
        self.jobs: dict[int, Key] = {}  # jobs starting or running here -> their workspace
        self.active: Counter[Key] = Counter()  # workspace -> how many of those
        self.fresh_at: dict[Key, float] = {}  # brought from the bucket at
        self.dirty: set[Key] = set()  # to be sent up (its last job here ended; a restart)
        self.wanted: set[Key] = set()  # to be brought: a waiting job needs it
        self.busy: dict[Key, str] = {}  # a sync under way: "up", "down" or "up+down"
        self.trouble: dict[Key, tuple[str, float]] = {}  # why the last sync failed, retry at
        self.synced_at: dict[Key, float] = {}
        self._pump_soon = False
        self._closed = False
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="rota-workspace-sync")

    # --- life -----------------------------------------------------------------------------
    def start(self, running: Iterable[Running]) -> None:
        """After recovery: the jobs running here again, and every workspace with an index
        to be sent up (the changes a killed daemon did not send) before a job of it starts."""
        shutil.rmtree(self.staging, ignore_errors=True)  # downloads a stop cut short
        self.resume(running)
        self.dirty |= set(self._indexed())
        self._pump()

    def resume(self, running: Iterable[Running]) -> None:
        """The jobs running here, as the daemon took them up (again): a workspace none of
        them uses any more is sent up."""
        before = set(self.active)
        self.jobs = {run.job_id: key_of(run.user, run.spec.project) for run in running
                     if _uses_copy(run)}
        self.active = Counter(self.jobs.values())
        for key in before - set(self.active):
            self._idle(key)

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _indexed(self) -> Iterator[Key]:
        try:
            users = sorted(os.listdir(self.index_dir))
        except OSError:
            return
        for user in users:
            top = self.index_dir / user
            if user.startswith(".") or top.is_symlink() or not top.is_dir():
                continue
            with contextlib.suppress(OSError):
                for name in sorted(os.listdir(top)):
                    if name.endswith(".json") and not name.startswith("."):
                        yield (user, name.removesuffix(".json"))

    # --- jobs -----------------------------------------------------------------------------
    def started(self, runs: Iterable[Running | None]) -> None:
        """Jobs launched here: their workspace's copy is the live one while they run."""
        for run in runs:
            if run is None or not _uses_copy(run) or run.job_id in self.jobs:
                continue
            key = key_of(run.user, run.spec.project)
            self.jobs[run.job_id] = key
            self.active[key] += 1

    def ended(self, job_id: int) -> None:
        """A job here ended (or its launch failed): the last of its workspace sends it up."""
        key = self.jobs.pop(job_id, None)
        if key is None:
            return
        self.active[key] -= 1
        if self.active[key] <= 0:
            del self.active[key]
            self._idle(key)

    def changed(self, user: str, project: str) -> None:
        """Files of its copy here were removed outside a job (a cleanup): sent up now,
        unless a job of it runs here (then when the last one ends)."""
        key = key_of(user, project)
        if key not in self.active:
            self._idle(key)

    def _idle(self, key: Key) -> None:
        self.fresh_at.pop(key, None)  # others may change the bucket from now on
        self.dirty.add(key)
        self._pump()

    def held(self, first: Mapping[int, Reason], pending: Callable[[int], PendingJob | None],
             ids: Callable[[], Iterable[int]]) -> HeldJobs:
        """For the pass's Snapshot: ``first`` and the waiting jobs whose workspace is
        not current here (``pending``: a waiting job by id)."""
        now = self.clock()
        reasons: dict[Key, Reason | None] = {}

        def reason(job_id: int) -> Reason | None:
            job = pending(job_id)
            if job is None or job.pool is not None or not job.workspace:
                return None
            key = key_of(job.user, job.project)
            if key not in reasons:
                reasons[key] = self._reason(key, now)
            return reasons[key]

        return HeldJobs(first, reason, ids)

    def current(self, key: Key, now: float) -> bool:
        return key in self.active or (key not in self.busy and key not in self.dirty and
                                      now - self.fresh_at.get(key, -FRESH_S) < FRESH_S)

    def _reason(self, key: Key, now: float) -> Reason | None:
        if self.current(key, now):
            return None
        if key not in self.wanted:
            self.wanted.add(key)
            self._pump_later()
        name = f"{key[0]}/{key[1]}"
        text = f"waits for its workspace {name} to be brought from {self._remote_url(key)}"
        busy, trouble = self.busy.get(key), self.trouble.get(key)
        if busy is not None and "up" in busy:
            text += ": what its last jobs here changed is being sent there first"
        elif busy is None and trouble is not None:
            why, at = trouble
            text += f": {why} (tried again in {max(0, round(at - now))} s)"
        elif busy is None:
            text += " (queued)"
        return Reason(ReasonCode.DATA, text)

    def _remote_url(self, key: Key) -> str:
        return f"{self.url}/{key[0]}/{key[1]}"

    def known(self) -> set[str]:
        """USER/PROJECT of every workspace a sync concerned or concerns (one whose copy was
        never made here too: its trouble is worth showing)."""
        keys = set(self.synced_at) | set(self.trouble) | set(self.busy) | self.dirty \
            | self.wanted
        return {f"{user}/{project}" for user, project in keys}

    def view(self, user: str, project: str) -> dict[str, Any]:
        """How this machine's copy stands with the bucket, for ``rota workspace``."""
        key = key_of(user, project)
        now = self.clock()
        busy, trouble = self.busy.get(key), self.trouble.get(key)
        if busy is not None:
            state = {"up": "sending", "down": "bringing"}.get(busy, "sending, then bringing")
        elif trouble is not None:
            state = "failed"
        elif key in self.dirty:
            state = "to send"  # its last job here ended, or a restart found changes
        elif key in self.active:
            state = "in use"  # a job of it runs here: sent when the last one ends
        else:
            state = "synced" if key in self.synced_at else "not synced yet"
        out: dict[str, Any] = {"url": self._remote_url(key), "state": state,
                               "synced_at": self.synced_at.get(key)}
        if busy is None and trouble is not None:
            out.update(error=trouble[0], retry_in=max(0.0, round(trouble[1] - now, 1)))
        return out

    def job_plan(self, user: str, project: str | None) -> WorkspacePlan:
        """What a job on a cluster pool whose nodes share no folder with this machine
        syncs itself (rota.storage.job_workspace): the workspace's prefix, not this
        machine's copy."""
        key = key_of(user, project)
        return WorkspacePlan(self._remote_url(key), f"{key[0]}/{key[1]}",
                             endpoint_url=self.endpoint_url, region=self.region)

    # --- syncs, on worker threads ------------------------------------------------------------
    def _pump_later(self) -> None:
        if not self._pump_soon:
            self._pump_soon = True
            self.later(0.0, self._pump)

    def _pump(self) -> None:
        """Start the syncs due: sending up what changed, bringing what waiting jobs need;
        one at a time per workspace, none while a job of it runs here."""
        self._pump_soon = False
        if self._closed:
            return
        now = self.clock()
        for key in sorted(self.dirty | self.wanted):
            if key in self.busy or key in self.active:
                continue
            trouble = self.trouble.get(key)
            if trouble is not None and trouble[1] > now:
                continue
            up, down = key in self.dirty, key in self.wanted
            self.busy[key] = "+".join(w for w, on in (("up", up), ("down", down)) if on)
            try:
                self._pool.submit(self._sync, key, up, down, self._owner(key[0]))
            except RuntimeError:  # shut down meanwhile
                self.busy.pop(key, None)
                return

    def _owner(self, user: str) -> tuple[int, int] | None:
        """A root daemon gives what it brings to the workspace's account."""
        if os.geteuid() != 0 or self.run_as is None:
            return None
        try:
            got = self.run_as(user)
        except Exception:
            return None
        return (got.uid, got.gid) if got is not None else None

    def client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                self._client = S3Store(self.bucket, endpoint_url=self.endpoint_url,
                                       region=self.region).client
            return self._client

    def _sync(self, key: Key, up: bool, down: bool, owner: tuple[int, int] | None) -> None:
        user, project = key
        folder = self.root / user / project
        index_path = self.index_dir / user / f"{project}.json"
        remote = Remote(None, self.bucket, f"{self.prefix}/{user}/{project}".strip("/"))
        done: list[str] = []
        error: BaseException | None = None
        try:
            remote.client = self.client()
            index = load_index(index_path)
            files = rights_in(folder)  # its account's rights walk and read it
            try:
                if up:
                    counts = sync_up(remote, folder, index,
                                     owner_uid=owner[0] if owner else None, files=files)
                    done.append(f"sent up: {counts.text()}")
                    self._note(key, counts)
                if down:
                    counts = sync_down(remote, folder, index, staging=self.staging,
                                       owner=owner, files=files)
                    done.append(f"brought: {counts.text()}")
                    self._note(key, counts)
            finally:
                save_index(index_path, index)  # what was done, should the rest fail
        except Exception as e:  # told on the loop; never lose a worker over it
            error = e
        with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
            self.post(self._synced, key, up, down, error, "; ".join(done))

    @staticmethod
    def _note(key: Key, counts: Counts) -> None:
        for what in counts.kept:
            log.warning("workspace %s/%s: %s changed here and in the bucket: this "
                        "machine's copy is kept", key[0], key[1], what)
        for what, copy in counts.conflicts:
            log.warning("workspace %s/%s: %s changed here and in the bucket: the bucket's "
                        "is kept as %s", key[0], key[1], what, copy)
        if counts.skipped:
            log.info("workspace %s/%s: passed over: %s", key[0], key[1],
                     "; ".join(counts.skipped[:10]))

    def _synced(self, key: Key, up: bool, down: bool, error: BaseException | None,
                done: str) -> None:
        """A sync's outcome, on the loop."""
        self.busy.pop(key, None)
        now = self.clock()
        name = f"{key[0]}/{key[1]}"
        if error is None:
            self.trouble.pop(key, None)
            if up:
                self.dirty.discard(key)
            if down:
                self.wanted.discard(key)
                self.fresh_at[key] = now
            self.synced_at[key] = now
            log.info("workspace %s and %s: %s", name, self._remote_url(key), done)
            self.kick()
        else:
            passing = isinstance(error, StorageError) and error.passing
            wait = RETRY_PASSING_S if passing else RETRY_OTHER_S
            why = str(error) if isinstance(error, StorageError) \
                else f"{type(error).__name__}: {error}"
            why = why.removeprefix(f"{self._remote_url(key)}: ")  # (the reason names it)
            self.trouble[key] = (why, now + wait)
            what = " and ".join(w for w, on in (("sending it to", up),
                                                ("bringing it from", down)) if on)
            log.warning("workspace %s: %s %s failed (tried again in %g s): %s",
                        name, what, self._remote_url(key), wait, why)
            self.later(wait, self._pump)
            self.kick()  # its waiting jobs' reason names the trouble now
        self._pump()


def _uses_copy(run: Running) -> bool:
    """Whether the job works in this machine's copy of its workspace (one of a cluster
    pool syncs its own, and one that needs no workspace gets none)."""
    return run.spec.workspace and not run.backend.capabilities.engine
