"""Workspaces: a folder per user and project that each of their jobs sees, with a quota.

Every job on this machine gets ``ROTA_WORKSPACE``: ``ROOT/USER/PROJECT`` (``default`` for
a job without a project), made at its launch when missing and owned by the job's account
(mode 0700). A container job sees it mounted at ``/workspace``. It outlives the jobs: what
one job leaves there, the next one of the same user and project finds. One that no job
wrote into is removed when the last of its jobs ends, so a job that never uses its
workspace leaves no empty folder behind.

With ``[storage] workspace_url`` (an S3 prefix) the bucket is each workspace's home and
this folder a synced copy: brought before a job starts, sent back when the last one ends
(rota.server.storage.workspace_sync).

Sizes are measured every ``[storage] workspace_scan`` seconds on a worker thread (the
regular files' sizes, links not followed), with the rights of the workspace's account
(rota.server.storage.workspace_owner), as are its cleanups and syncs. A workspace over its quota
(its own, set by an admin, else ``[storage] workspace_quota``) holds its jobs in the queue
with that reason until it is back under; running jobs go on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rota.backends.base import RunAs
from rota.config import Settings
from rota.core.plan import Reason, ReasonCode
from rota.core.quota import Owner, workspace_owner
from rota.core.snapshot import PendingJob
from rota.errors import BackendError, NotFound, StorageError
from rota.server.storage.workspace_cleanup import Plan, Stale
from rota.server.storage.workspace_owner import rights_in
from rota.server.storage.workspace_sync import WorkspaceSync
from rota.store.repo import Store
from rota.units import format_memory

if TYPE_CHECKING:
    from rota.server.jobs.running import Running

log = logging.getLogger("rota.workspaces")

WORKSPACE_ENV = "ROTA_WORKSPACE"
CONTAINER_PATH = "/workspace"
DEFAULT_PROJECT = "default"
#: how long a cleanup's dry run can be applied
PLAN_KEPT_S = 3600.0


def workspace_name(user: str, project: str | None) -> str:
    return f"{user}/{project or DEFAULT_PROJECT}"


def folder_size(top: str) -> int:
    """Bytes of the regular files under ``top``, read with the rights of the account the
    workspace is its (``rights_in``); links are not followed, a folder swapped for one
    meanwhile is not entered (``os.fwalk`` opens each from its parent's descriptor and
    checks it is the folder listed), and what vanishes or cannot be read is passed over."""
    return rights_in(top).run(_size, top)


def _size(top: str) -> int:
    """(Under the owner's rights: I/O only.)"""
    total = 0
    for _, _, files, fd in os.fwalk(top, follow_symlinks=False):
        for name in files:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


class Workspaces:
    def __init__(self, settings: Settings, store: Store, clock: Callable[[], float],
                 post: Callable[..., None], kick: Callable[[], None],
                 later: Callable[[float, Callable[[], None]], None],
                 run_as: Callable[[str], RunAs | None] | None = None) -> None:
        self.settings, self.store, self.clock = settings, store, clock
        self.post, self.kick, self.later = post, kick, later
        self.root = settings.workspaces_root
        self.default_quota = settings.storage.workspace_quota
        self.every = settings.storage.workspace_scan
        self.cleanup_days = settings.storage.cleanup_days
        self.ready: set[str] = set()  # made (and handed over) in this daemon's life
        self.jobs_in: dict[str, set[int]] = {}  # name -> the running jobs it was given to
        self.sizes: dict[str, int] = {}  # name -> bytes, as last measured
        self.scanned_at: float | None = None
        self.quotas: dict[str, int] = {}  # their own, set by an admin
        self.over: dict[Owner, Reason] = {}
        self._scanning = False
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rota-workspaces")
        self.plans: dict[str, Plan] = {}  # cleanup dry runs, until applied or PLAN_KEPT_S
        url = settings.storage.workspace_url
        self.sync = WorkspaceSync(settings, url, clock, post=post, kick=kick, later=later,
                                  run_as=run_as) if url else None

    def start(self, running: Iterable[Running] = ()) -> None:
        """After recovery (``running``: the jobs it took up again)."""
        running = list(running)
        self._given(running)
        self.quotas = self.store.workspace_quotas()
        self.scan()
        if self.sync is not None:
            self.sync.start(running)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.sync is not None:
            self.sync.close()

    # --- a bucket's copies: jobs starting and ending here (rota.server.storage.workspace_sync) ----
    def held(self, first: Mapping[int, Reason], pending: Callable[[int], PendingJob | None],
             ids: Callable[[], Iterable[int]]) -> Mapping[int, Reason] | None:
        """What the pass holds back: ``first`` (datasets), and with a bucket, the waiting
        jobs whose workspace copy is not current here."""
        if self.sync is None:
            return first or None
        return self.sync.held(first, pending, ids)

    def started(self, runs: Iterable[Running | None]) -> None:
        if self.sync is not None:
            self.sync.started(runs)

    def ended(self, job_id: int) -> None:
        if self.sync is not None:
            self.sync.ended(job_id)
        for name, jobs in list(self.jobs_in.items()):
            if job_id in jobs:
                jobs.discard(job_id)
                if not jobs:
                    del self.jobs_in[name]
                    if self.sync is None:  # a bucket's copy is the sync's to keep
                        self._remove_if_empty(name)

    def _remove_if_empty(self, name: str) -> None:
        """The workspace's last job ended: an empty one goes (made again at the next
        launch), with its user's folder when that is empty too. rmdir never follows a link
        nor removes a folder with anything in it; the folders above are the daemon's."""
        path = self.root / name
        try:
            os.rmdir(path)
        except OSError:  # something in it (it is used), or already gone
            return
        self.ready.discard(name)
        self.sizes.pop(name, None)
        with contextlib.suppress(OSError):
            os.rmdir(path.parent)

    def resume(self, running: Iterable[Running]) -> None:
        """The jobs running here after the daemon took its work up again."""
        running = list(running)
        self._given(running)
        if self.sync is not None:
            self.sync.resume(running)

    def _given(self, running: Iterable[Running]) -> None:
        """Which running jobs were given which workspace, from the jobs themselves."""
        self.jobs_in = {}
        for run in running:
            if run.spec.workspace and \
                    self.settings.workspace_kind(run.spec.pool) in ("here", "shared"):
                self.jobs_in.setdefault(workspace_name(run.user, run.spec.project),
                                        set()).add(run.job_id)

    # --- at launch (on the loop: cheap once made) -------------------------------------------
    def job_sync_env(self, user: str, project: str | None) -> dict[str, str]:
        """A cluster job that syncs its own copy with the bucket: what tells it which."""
        if self.sync is None:
            raise StorageError("no [storage] workspace_url: no bucket to sync a workspace "
                               "with")
        return self.sync.job_plan(user, project).env()

    def ensure(self, user: str, project: str | None, run_as: RunAs | None,
               job_id: int) -> Path:
        """The job's workspace, made when missing and given to its account."""
        name = workspace_name(user, project)
        path = self.root / name
        self.jobs_in.setdefault(name, set()).add(job_id)
        if name in self.ready:
            return path
        try:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            if path.is_symlink() or not path.is_dir():
                raise BackendError(f"its workspace {path} is not a folder")
            if run_as is not None:  # a root daemon: the account's own, passable above it
                # (traversable, not listable: a root daemon's home is 0711 too; home_lock)
                os.chmod(self.root, 0o711)
                os.chmod(path.parent, 0o711)
                st = os.lstat(path)
                if (st.st_uid, st.st_gid) != (run_as.uid, run_as.gid):
                    os.chown(path, run_as.uid, run_as.gid, follow_symlinks=False)
        except OSError as e:  # its launch fails with this reason (the pass goes on)
            raise BackendError(f"cannot make its workspace {path}: "
                               f"{e.strerror or e}") from None
        self.ready.add(name)
        return path

    # --- sizes and quotas -------------------------------------------------------------------
    def quota_of(self, name: str) -> int:
        return self.quotas.get(name, self.default_quota)

    def set_quota(self, name: str, limit: int | None, *, by: str) -> None:
        self.store.set_workspace_quota(name, limit, by=by, now=self.clock())
        self.quotas = self.store.workspace_quotas()
        self._judge()

    def scan(self) -> None:
        """Measure every workspace on the worker; the sizes come back to the loop."""
        if self._scanning:
            return
        self._scanning = True
        self._pool.submit(self._measure)

    def _measure(self) -> None:
        try:
            sizes = {name: folder_size(str(path)) for name, path in self._folders()}
        except Exception:  # never lose the daemon over a measurement
            log.exception("measuring the workspaces failed")
            sizes = None
        self.post(self._measured, sizes)

    def _folders(self) -> Iterator[tuple[str, Path]]:
        if not self.root.is_dir():
            return
        for user in sorted(os.listdir(self.root)):
            top = self.root / user
            if user.startswith(".") or top.is_symlink() or not top.is_dir():  # (.sync)
                continue
            for project in sorted(os.listdir(top)):
                path = top / project
                if not path.is_symlink() and path.is_dir():
                    yield f"{user}/{project}", path

    def _measured(self, sizes: dict[str, int] | None) -> None:
        self._scanning = False
        if sizes is not None:
            self.sizes, self.scanned_at = sizes, self.clock()
            self._judge()
        self.later(self.every, self.scan)

    def _judge(self) -> None:
        over: dict[Owner, Reason] = {}
        for name, used in self.sizes.items():
            limit = self.quota_of(name)
            if used > limit:
                user, _, project = name.partition("/")
                over[workspace_owner(user, None if project == DEFAULT_PROJECT else project)] \
                    = Reason(ReasonCode.QUOTA,
                             f"waits: its workspace {name} holds {format_memory(used)}, over "
                             f"its quota of {format_memory(limit)}: free some space there, "
                             "or an admin raises it (rota workspace quota)")
        if over != self.over:
            self.over = over
            self.kick()  # jobs held by a workspace now under its quota start

    # --- cleanup: a dry run, then only what it listed -------------------------------------
    def folder(self, name: str) -> Path:
        """A workspace that exists (NotFound otherwise)."""
        user, _, project = name.partition("/")
        path = self.root / user / project
        if not project or "/" in project or user.startswith(".") or path.is_symlink() \
                or not path.is_dir():
            raise NotFound(f"no workspace {name}: `rota workspace` lists them")
        return path

    def keep_plan(self, name: str, root: Path, days: float, files: list[Stale]) -> Plan:
        """A dry run's list, kept to be applied (older ones than PLAN_KEPT_S dropped)."""
        now = self.clock()
        for old in [k for k, p in self.plans.items() if now - p.made_at > PLAN_KEPT_S]:
            del self.plans[old]
        plan = Plan(id=secrets.token_hex(8), workspace=name, root=root, days=days,
                    made_at=now, files=files)
        self.plans[plan.id] = plan
        return plan

    def plan(self, plan_id: str) -> Plan:
        found = self.plans.get(plan_id)
        if found is None:
            raise NotFound(f"no cleanup plan {plan_id!r} (plans are kept "
                           f"{PLAN_KEPT_S / 3600:g} h, and not across a restart): run the "
                           "dry run again")
        return found

    def views(self, user: str | None) -> list[dict[str, Any]]:
        """Each workspace with its size and quota (``user``'s only, unless None)."""
        names = set(self.sizes) | self.ready | (self.sync.known() if self.sync else set())
        out = []
        for name in sorted(names):
            owner, _, project = name.partition("/")
            if user is not None and owner != user:
                continue
            used = self.sizes.get(name)
            limit = self.quota_of(name)
            out.append({"name": name, "user": owner, "project": project,
                        "path": str(self.root / name), "bytes": used, "quota": limit,
                        "own_quota": name in self.quotas,
                        "over": used is not None and used > limit,
                        "measured_at": self.scanned_at,
                        "sync": None if self.sync is None else self.sync.view(owner, project)})
        return out
