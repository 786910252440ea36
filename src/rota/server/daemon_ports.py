"""The daemon's side of the API's ports (rota.server.ports): the one module outside the
daemon that reads its attributes, so a change inside the daemon touches the API here only.

Every method runs on the daemon's loop thread (the API's handlers are coroutines there).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from itertools import chain, islice
from pathlib import Path
from typing import IO, Any

from prometheus_client import Histogram

from rota.backends.engine import PoolHealth
from rota.core.fairshare import passed_by
from rota.core.lifecycle import JobState
from rota.core.plan import ReasonCode
from rota.core.quota import Quota
from rota.core.snapshot import PendingJob
from rota.core.spec import JobSpec, check_secret_name
from rota.core.tiers import Tier
from rota.errors import Conflict, NotFound
from rota.pipeline.config import PipelineConfig
from rota.pools import LOCAL
from rota.server.access.accounts import check_unix_account
from rota.server.access.auth import (
    Authenticator,
    Principal,
    check_user_name,
    new_token,
    token_digest,
)
from rota.server.api.pool_reads import (
    containers_answer,
    pools_answer,
    render_answer,
    render_spec_answer,
)
from rota.server.api.views import HELD, job_view, tracked, with_gpu_type
from rota.server.intake import Intake
from rota.server.jobs.running import Running
from rota.server.loop.daemon import Daemon
from rota.server.loop.forwarding import engine_ids
from rota.server.policy.shares_view import (
    WEEK_S,
    fair_share_wait,
    priority_answer,
    shares_answer,
)
from rota.server.ports import Fault, Submitted, UserRemoved
from rota.server.storage import cards
from rota.server.storage.artifacts import chosen, tar_of
from rota.server.storage.datasets import Datasets
from rota.server.storage.share_links import Shared
from rota.server.storage.workspace_cleanup import remove_listed, stale_files
from rota.server.tracking.metrics import Totals
from rota.storage import FileEntry, Manifest
from rota.storage.owner_files import OwnerFiles
from rota.store.db import redact_url
from rota.store.repo import AlertRecord, JobRecord, PipelineRecord, ScheduleRecord, Store
from rota.store.tables import TokenRow, UserRow

#: the states of a job that has not ended: a removed user's jobs in them are cancelled first
ACTIVE = ("pending", "held", "starting", "running", "preempted")


def live_facts(d: Daemon, row: JobRecord) -> dict[str, Any]:
    """What the daemon's memory knows of a job: its state (ahead of the store by at most a
    batch), its GPUs, why it waits, its tracker runs."""
    r = row._mapping
    job_id, spec = r["id"], r["spec"]
    known = d.live.states.get(job_id)
    state: str = r["state"] if known is None else known.value
    run = d.live.running.get(job_id)
    out: dict[str, Any] = {"state": state, "gpu_indices": list(run.gpus) if run else []}
    if tracked(r, d.settings.mlflow):
        tracking = d.tracking.view(job_id, spec, r["tracking"], r["progress"])
        if tracking:
            out["tracking"] = tracking
    if run is not None and run.backend.capabilities.engine:
        out.update(engine_facts(run))
    if run is not None and (idle := d.idle.facts(run, d.clock())) is not None:
        out["idle"] = idle
    if state == "held":
        out["reason"] = dict(HELD)
    elif state == "pending" and job_id in d.tracking.parked:
        out["reason"] = {"code": "tracker", "message": "waits for its MLflow run to be "
                         f"created in {redact_url(d.tracking.uri())}"}
    elif state == "pending" and (never := d.queue.never_reason(job_id)) is not None:
        out["reason"] = {"code": "unsatisfiable", "message": never}  # kept out of passes
    elif state == "pending":
        reason = d.last_plan.reason(job_id)
        if reason is None:
            out["reason"] = {"code": "not_scheduled", "message": "not yet looked at by a pass"}
        else:
            out["reason"] = {"code": str(reason.code),
                             "message": d.last_plan.reason_text(job_id),
                             "until": reason.until, "blocker": reason.blocker}
            # absolute time, or None: unknown (rota.core.backfill.start_estimates)
            out["estimated_start"] = d.last_plan.start_estimates.get(job_id)
            if d.fair.on and reason.code in _ORDER_WAITS:
                _name_fair_share(d, job_id, out["reason"])
    if state == "pending" and spec.get("gpu_type"):
        out["reason"] = with_gpu_type(out["reason"], spec)
    return out


#: the waits the queue's order can explain (not a dependency, a backoff or a drain)
_ORDER_WAITS = frozenset({ReasonCode.RESOURCES, ReasonCode.PRIORITY})


def _name_fair_share(d: Daemon, job_id: int, reason: dict[str, Any]) -> None:
    """Put fair share first in a waiting job's reason when it is why a job submitted later
    by someone else goes ahead of it."""
    job = d.queue.get(job_id)
    if job is None:
        return
    order = d.fair.ordered(d.queue, len(d.readings), d.running.keys())
    ahead = [*islice(iter(order), _place(order, job_id)),
             *(r.pending for r in d.running.values())]
    standing = d.fair.standing(d.running.keys())
    other = passed_by(job, ahead, standing)
    if other is None:
        return
    now = d.clock()
    week = sum(r.gpus * (min(r.ended_at or now, now) - max(r.started_at, now - WEEK_S))
               for r in d.store.usage(now - WEEK_S, now) if r.user == job.user) / 3600.0
    reason["message"] = f"{fair_share_wait(job, other, standing, week)}; {reason['message']}"


def _place(order: list[PendingJob], job_id: int) -> int:
    for n, j in enumerate(order):
        if j.id == job_id:
            return n
    return len(order)


def engine_facts(run: Running) -> dict[str, Any]:
    """What a cluster pool's engine last said of a job it holds: its id and state, and, while
    it waits there or ran its course, why, in the engine's words."""
    backend, handle = run.backend, run.handle
    status = getattr(backend, "status", None)
    last = status(handle) if status is not None and handle is not None else None
    engine_id = handle.extra.get("engine_id") if handle is not None else None
    out: dict[str, Any] = {"engine": {
        "backend": backend.name, "id": engine_id,
        "state": None if last is None else str(last.state),
        "reason": None if last is None else last.reason}}
    where = f"handed to {backend.name}" + (f" as job {engine_id}" if engine_id else "")
    if last is None or str(last.state) == "queued":
        said = f": {last.reason}" if last is not None and last.reason else ""
        out["reason"] = {"code": "engine", "message": f"{where}; it waits there{said}"}
    elif str(last.state) == "running":
        nodes = f" on {', '.join(last.nodes)}" if last.nodes else ""
        out["reason"] = {"code": "engine", "message": f"{where}; it runs there{nodes}"}
    return out


def gpu_views(d: Daemon) -> list[dict[str, Any]]:
    views = {v.index: v for v in d.gpu_views()}
    jobs: dict[int, list[int]] = {}
    for r in d.live.running.values():
        for i in r.gpus:
            jobs.setdefault(i, []).append(r.job_id)
    out = []
    for i, g in sorted(d.readings.items()):
        v = views[i]
        out.append({"index": i, "uuid": g.uuid, "name": g.name,
                    "memory_total": g.memory_total, "memory_used": g.memory_used,
                    "memory_external": v.memory_external, "utilization": g.utilization,
                    "allocated": v.allocated_milli / 1000, "reserved_memory": v.reserved_memory,
                    "jobs": sorted(jobs.get(i, [])), "paused": i in d.paused,
                    "healthy": g.healthy, "temperature_c": g.temperature_c,
                    "history": [list(pt) for pt in d.history.get(i, ())]})
    return out


def queue_answer(d: Daemon, *, limit: int, offset: int, counts: bool) -> dict[str, Any]:
    """The queue as the scheduler holds it: totals, and with ``limit`` the jobs that hold
    GPUs, then ``limit`` waiting ones from ``offset`` in the order they will start (this
    machine's, then each cluster pool's; those that never can, and those waiting for
    their MLflow run, last), then the oldest held.
    The ``counts`` per state read the whole jobs table (0.1-0.5 s for a million rows);
    the rest reads only the rows it shows."""
    engines = d.queue.engine_queues()
    waiting = (d.queue.ordered(), *(engines[p] for p in sorted(engines)), d.queue.aside(),
               [d.tracking.parked[i] for i in sorted(d.tracking.parked)])
    total = sum(map(len, waiting))
    out: dict[str, Any] = {
        "pending": total, "running": len(d.live.running),
        "held": d.store.count_in_state(JobState.HELD.value),
        "reservations": [{"job": r.job_id, "gpus": list(r.gpu_indices)}
                         for r in d.last_plan.reservations],
        "offset": offset, "limit": limit,
        "next_offset": offset + limit if limit and offset + limit < total else None}
    if counts:
        out["counts"] = d.store.count_by_state()
    if not limit:
        return out
    page = [j.id for j in islice(chain.from_iterable(  # slices of at most limit each
        seq[max(0, offset - skip):max(0, offset - skip) + limit]
        for seq, skip in _starts(waiting)), limit)]
    held = d.store.list_jobs(states=["held"], limit=limit)[::-1]  # oldest first
    rows = d.store.jobs([*d.live.running, *page])
    views = [job_view(r, live_facts(d, r)) for r in [*rows.values(), *held]]
    by_id = {v["id"]: v for v in views}
    out["running_jobs"] = [by_id[i] for i in sorted(d.live.running) if i in by_id]
    out["waiting_jobs"] = [by_id[i] for i in page if i in by_id]
    out["held_jobs"] = views[len(rows):]
    return out


def _starts(seqs: Sequence[Sequence[Any]]) -> list[tuple[Sequence[Any], int]]:
    """Each sequence with the number of items before it in their concatenation."""
    out, before = [], 0
    for seq in seqs:
        out.append((seq, before))
        before += len(seq)
    return out


class DaemonPorts:
    """Commands and Reads (rota.server.ports) over a running daemon and its intake."""

    def __init__(self, daemon: Daemon, intake: Intake, *,
                 on_shutdown: Callable[[], None] | None = None) -> None:
        self._d, self._intake, self._on_shutdown = daemon, intake, on_shutdown
        self._auth = Authenticator(daemon.store, daemon.settings.user, daemon.clock)

    @property
    def datasets(self) -> Datasets:
        return self._d.datasets

    # --- Reads ---------------------------------------------------------------------------
    @property
    def store(self) -> Store:
        return self._d.store

    @property
    def requests(self) -> Histogram:
        return self._d.metrics.requests

    def principal(self, via: str, authorization: str | None,
                  peer_uid: int | None = None) -> Principal:
        return self._auth.principal(via, authorization, peer_uid)

    def now(self) -> float:
        return self._d.clock()

    async def facts(self, rows: Sequence[JobRecord]) -> list[dict[str, Any]]:
        return [live_facts(self._d, r) for r in rows]

    def job_state(self, job_id: int) -> JobState:
        return self._d.job_state(job_id)

    def shares(self) -> dict[str, Any]:
        d, p = self._d, self._d.settings.priority
        now = d.clock()
        return shares_answer(d.fair.standing(d.running.keys()),
                             d.store.usage(now - WEEK_S, now), now=now,
                             fair_share=p.fair_share, half_life=p.half_life)

    def priority(self, job_id: int) -> dict[str, Any]:
        d = self._d
        job = d.queue.get(job_id)
        if job is None:
            state = d.job_state(job_id)  # NotFound for no such job
            raise Conflict(f"job {job_id} is {state.value}: only a waiting job has a "
                           "priority")
        factors = d.fair.factors(job, len(d.readings), d.running.keys())
        return priority_answer(job.id, job.user, job.project, factors, d.fair.weights,
                               fair_share=d.fair.on)

    def health(self) -> dict[str, Any]:
        d = self._d
        return {"devices": d.devices.kind, "gpus": len(d.readings), "pending": len(d.queue),
                "running": len(d.live.running), "draining": d.draining}

    def gpus(self) -> dict[str, Any]:
        return {"devices": self._d.devices.kind, "gpus": gpu_views(self._d),
                "draining": self._d.draining}

    def queue(self, *, limit: int = 0, offset: int = 0, counts: bool = True) -> dict[str, Any]:
        return queue_answer(self._d, limit=limit, offset=offset, counts=counts)

    def stats(self) -> dict[str, Any]:
        p = sorted(self._d.pass_seconds)
        return {"passes": len(p), "pass_p50_ms": 1000 * p[len(p) // 2] if p else None,
                "pass_max_ms": 1000 * p[-1] if p else None}

    def sessions(self) -> list[dict[str, Any]]:
        out = []
        for r in self._d.live.running.values():
            if r.handle is not None and r.backend.capabilities.attachable:
                out.append({"job": r.job_id, "session": r.handle.session_name,
                            "backend": r.handle.backend, "gpus": list(r.gpus),
                            "attach": r.backend.attach_argv(r.handle)})
        return out

    def attach_argv(self, job_id: int) -> list[str] | None:
        run = self._d.live.running.get(job_id)
        if run is None or run.handle is None:
            state = self._d.job_state(job_id)  # NotFound if unknown
            raise Conflict(f"job {job_id} is {state.value}, not running: there is no session "
                           "to attach to")
        return run.backend.attach_argv(run.handle)

    def log_path(self, job_id: int) -> Path:
        self._d.job_state(job_id)  # NotFound if unknown
        # built from the integer id only: no client text reaches the filesystem
        return self._d.settings.logs_dir / f"{int(job_id)}.log"

    def user_files(self, user: str) -> OwnerFiles:
        return self._d.launcher.files_of(user)

    def job_files(self, job_id: int) -> OwnerFiles:
        return self.user_files(self._d.store.get_job(job_id).user)

    async def artifact_manifest(self, job_id: int) -> Manifest:
        # the store may be a bucket: read off the loop
        return await asyncio.to_thread(self._d.artifacts.manifest, job_id)

    async def artifact_file(self, job_id: int,
                            path: str) -> tuple[FileEntry, AsyncIterator[bytes]]:
        manifest = await self.artifact_manifest(job_id)
        entry = manifest.find(path)
        if entry is None:
            raise NotFound(f"job {job_id} saved no file {path!r}; `rota artifacts "
                           f"{job_id}` lists them")
        stream = await asyncio.to_thread(self._d.artifacts.open, job_id, entry.path)
        return entry, _chunks(stream)

    def workspaces(self, user: str | None) -> list[dict[str, Any]]:
        return self._d.workspaces.views(user)

    def workspace_default_quota(self) -> int:
        return self._d.workspaces.default_quota

    async def cleanup_plan(self, name: str, days: float | None) -> dict[str, Any]:
        ws = self._d.workspaces
        root, days, now = ws.folder(name), days or ws.cleanup_days, self._d.clock()
        files = await asyncio.to_thread(stale_files, root, now - days * 86400)
        return ws.keep_plan(name, root, days, files).view()

    def cleanup_workspace_of(self, plan_id: str) -> str:
        return self._d.workspaces.plan(plan_id).workspace

    async def apply_cleanup(self, plan_id: str) -> dict[str, Any]:
        ws = self._d.workspaces
        plan = ws.plan(plan_id)
        del ws.plans[plan_id]  # once: a second apply would find the same files gone
        removed, kept = await asyncio.to_thread(remove_listed, plan.root, plan.files)
        ws.scan()  # its size, measured again
        if ws.sync is not None and removed:  # the bucket is its home: removed there too
            user, _, project = plan.workspace.partition("/")
            ws.sync.changed(user, project)
        return plan.done(removed, kept)

    def share_links(self, *, job_id: int | None = None,
                    user: str | None = None) -> list[dict[str, Any]]:
        links = self._d.share_links
        return [links.view(r) for r in self._d.store.share_links(job_id=job_id, user=user)]

    async def shared(self, token: str) -> tuple[Shared, AsyncIterator[bytes]]:
        links = self._d.share_links
        link = links.find(token)
        manifest = await self.artifact_manifest(link.job_id)
        what = links.serve(link, manifest)
        arts = self._d.artifacts
        if what.single:
            stream = await asyncio.to_thread(arts.open, what.job_id, what.files[0].path)
            return what, _chunks(stream)
        pieces = tar_of(what.files, lambda path: arts.open(what.job_id, path),
                        manifest.created_at)
        return what, _off_loop(pieces)

    async def card(self, job_id: int, fmt: str) -> tuple[str, str]:
        d = self._d
        row = d.store.artifacts(job_id)
        outputs = []
        if row is not None and row.state == "saved":
            manifest = await self.artifact_manifest(job_id)
            outputs = [{"path": f.path, "size": f.size, "sha256": f.sha256}
                       for f in manifest.files]
        found = cards.facts(d.store, job_id, d.clock(), outputs)
        account = cards.account_of(d.launcher.run_as, found.job["user"])  # (git as its owner)
        facts = await asyncio.to_thread(cards.with_git, found, account)
        if fmt == "html":
            return cards.html_page(facts), "text/html; charset=utf-8"
        if fmt == "svg":
            name = cards.curve_metric(facts.metrics)
            if name is None:
                raise NotFound(f"job {job_id} has no metrics to draw")
            return cards.curve_svg(name, facts.metrics[name]), "image/svg+xml"
        return cards.markdown(facts, curve_file=None), "text/markdown; charset=utf-8"

    async def artifact_archive(self, job_id: int, prefix: str | None
                               ) -> tuple[list[FileEntry], AsyncIterator[bytes]]:
        manifest = await self.artifact_manifest(job_id)
        wanted, _ = chosen(manifest, prefix)
        arts = self._d.artifacts
        pieces = tar_of(wanted, lambda path: arts.open(job_id, path), manifest.created_at)
        return wanted, _off_loop(pieces)

    def jobs_file(self) -> dict[str, Any]:
        return vars(self._intake.jobs_file)

    def metrics_text(self) -> bytes:
        return self._d.metrics.render()

    def tiers(self) -> Mapping[str, Tier]:
        return self._d.settings.tier_set

    async def pools(self) -> dict[str, Any]:
        d = self._d
        gpus = gpu_views(d)
        free = sum(1 for g in gpus if not g["jobs"] and not g["paused"] and g["healthy"])
        local = PoolHealth(reachable=True, nodes=1, gpus_total=len(gpus), gpus_free=free,
                           message=f"this machine: {len(gpus)} GPUs ({d.devices.kind})"
                                   + (", draining" if d.draining else ""))
        answer = await pools_answer(d.settings.pool_set, d.settings.home, local)
        containers = await containers_answer(d.backends.containers)
        for p in answer["pools"]:
            p["containers"] = containers if p["engine"] == LOCAL else None
        return answer

    async def render(self, job_id: int, pool: str | None) -> dict[str, Any]:
        row = self._d.store.get_job(job_id)
        s = self._d.settings
        # the engine ids of its parents in flight on that pool, as a launch now would pass
        after = engine_ids(row.spec.get("after") or (), pool or s.pool_set.default,
                           self._d.table)
        return await asyncio.to_thread(render_answer, s.pool_set, s.home, row, pool,
                                       self._d.backends.install, tuple(after.values()))

    async def render_spec(self, spec: JobSpec, user: str, pool: str) -> dict[str, Any]:
        s = self._d.settings
        return await asyncio.to_thread(render_spec_answer, s.pool_set, s.home, spec, user,
                                       pool, self._d.backends.install)

    # --- Commands ------------------------------------------------------------------------
    def submit(self, jobs: Sequence[JobSpec | dict[str, Any]], *, user: str, source: str,
               idempotency_key: str | None = None, dedup: bool = False,
               force: bool = False) -> Submitted:
        rows = self._intake.submit(jobs, user=user, source=source,
                                   idempotency_key=idempotency_key, dedup=dedup, force=force)
        return Submitted(rows, self._intake.warnings(rows))

    def cancel(self, job_id: int) -> JobState:
        return self._d.cancel(job_id)

    def hold(self, job_id: int) -> None:
        self._d.hold(job_id)

    def release(self, job_id: int) -> None:
        self._d.release(job_id)

    def preempt(self, job_id: int) -> JobState:
        self._d.preempt(job_id)
        return self._d.job_state(job_id)

    def requeue(self, job_id: int) -> JobRecord:
        row = self._d.store.get_job(job_id)
        if self._d.job_state(job_id).terminal:
            [new] = self._intake.submit([{**row.spec, "hold": False}], user=row.user,
                                        source=f"requeue of job {job_id}", force=True)
            return new
        self._d.requeue(job_id)
        return self._d.store.get_job(job_id)

    async def wait_for_end(self, job_id: int, timeout: float | None) -> JobState:
        return await self._d.wait_for_end(job_id, timeout)

    def set_paused(self, index: int, paused: bool) -> None:
        self._d.set_paused(index, paused)

    def simulate(self, index: int, fault: Fault) -> None:
        d = self._d
        dev: Any = d.devices
        if d.devices.kind != "simulated":
            raise Conflict("only simulated GPUs take injected faults (this daemon reads "
                           f"{d.devices.kind} GPUs)")
        if not 0 <= index < dev.gpu_count:
            raise NotFound(f"no simulated GPU {index}; this daemon simulates "
                           f"{dev.gpu_count} (indices 0-{dev.gpu_count - 1})")
        if fault.present is True:
            dev.restore(index)
        if fault.present is False:
            dev.remove(index)
        if fault.healthy is not None:
            dev.set_health(index, fault.healthy)
        if fault.external_mem is not None or fault.external_util is not None:
            dev.set_external(index, fault.external_mem or 0, fault.external_util or 0.0)
        if fault.utilization is not None:
            dev.set_utilization(index, fault.utilization)
        d.read_devices()
        d.kick()

    def set_draining(self, on: bool) -> None:
        self._d.set_draining(on)

    def set_quota(self, quota: Quota, *, by: str) -> None:
        self._d.store.set_quota(quota, by=by, now=self._d.clock())
        self._d.quotas_changed()

    def lift_quota(self, kind: str, name: str, what: str | None, *, until: float) -> int:
        n = self._d.store.lift_quota(kind, name, what, until=until, now=self._d.clock())
        self._d.quotas_changed()
        return n

    def remove_quota(self, kind: str, name: str, what: str | None) -> int:
        n = self._d.store.remove_quota(kind, name, what)
        self._d.quotas_changed()
        return n

    def reload_jobs_file(self, again: Sequence[int] = ()) -> dict[str, Any]:
        return vars(self._intake.poll_jobs_file(force=True, again=again))

    def set_share(self, kind: str, name: str, shares: float) -> None:
        # a name no one has yet is taken: a share may be set before the user's first job
        self._d.store.set_share(kind, name, shares, now=self._d.clock())
        self._d.fair.changed()
        self._d.kick()  # the queue's order may change

    def add_user(self, name: str, *, admin: bool, unix_account: str | None = None) -> UserRow:
        if unix_account is not None:
            check_unix_account(unix_account)
        return self._d.store.add_user(check_user_name(name), admin=admin, now=self._d.clock(),
                                      unix_account=unix_account)

    def remove_user(self, name: str, *, cancel_jobs: bool, by: str) -> UserRemoved:
        d = self._d
        if name == by:
            raise Conflict(f"{name} cannot remove themself; another admin can")
        if name == d.settings.user:
            raise Conflict(f"{name} owns this daemon and cannot be removed")
        d.store.user(name)  # NotFound names the user
        active = [r.id for r in d.store.list_jobs(states=ACTIVE, user=name, limit=1 << 62)]
        active = [i for i in active if not d.job_state(i).terminal]
        if active and not cancel_jobs:
            raise Conflict(f"{name} has {len(active)} active job{'s' * (len(active) != 1)} "
                           f"({', '.join(map(str, active[:10]))}"
                           f"{', ...' if len(active) > 10 else ''}); cancel them first, or "
                           "remove the user with cancel_jobs=true")
        for job_id in active:
            d.cancel(job_id)
        revoked = d.store.remove_user(name)
        self._auth.forget()
        return UserRemoved(name, revoked, len(active))

    def add_token(self, user: str, *, note: str | None) -> tuple[TokenRow, str]:
        token = new_token()
        row = self._d.store.add_token(user, digest=token_digest(token), prefix=token[:12],
                                      note=note, now=self._d.clock())
        return row, token

    def revoke_token(self, token_id: int) -> TokenRow:
        store = self._d.store
        if store.token(token_id).revoked_at is not None:
            raise Conflict(f"token {token_id} is already revoked")
        store.revoke_token(token_id, now=self._d.clock())
        self._auth.forget()
        return store.token(token_id)

    async def create_share_link(self, job_id: int, path: str | None, expires_s: float, *,
                                presigned: bool, by: str) -> dict[str, Any]:
        links = self._d.share_links
        links.check(job_id)
        manifest = await self.artifact_manifest(job_id)
        return links.create(job_id, manifest, path, expires_s, presigned=presigned, by=by)

    def set_workspace_quota(self, name: str, limit: int | None, *, by: str) -> None:
        self._d.workspaces.set_quota(name, limit, by=by)

    def revoke_share_link(self, link_id: int) -> dict[str, Any]:
        link = self._d.store.share_link(link_id=link_id)
        if link is None:
            raise NotFound(f"no link {link_id}")
        return self._d.share_links.revoke(link)

    def put_secret(self, user: str, name: str, value: str) -> bool:
        return self._d.secrets.put(user, name, value)

    def delete_secret(self, user: str, name: str) -> None:
        self._d.secrets.delete(user, check_secret_name(name))

    def add_eval_schedule(self, **fields: Any) -> ScheduleRecord:
        return self._d.store.add_eval_schedule(now=self._d.clock(), **fields)

    def remove_eval_schedule(self, schedule_id: int) -> None:
        self._d.store.remove_eval_schedule(schedule_id)

    def add_pipelines(self, configs: list[PipelineConfig], *, user: str, text: str,
                      path: str) -> list[PipelineRecord]:
        return self._d.pipelines.add(configs, user=user, text=text, path=path)

    def pause_pipeline(self, name: str, reason: str) -> PipelineRecord:
        return self._d.pipelines.pause(name, reason)

    def resume_pipeline(self, name: str) -> PipelineRecord:
        return self._d.pipelines.resume(name)

    def run_pipeline_now(self, name: str) -> PipelineRecord:
        return self._d.pipelines.run_now(name)

    def remove_pipeline(self, name: str) -> int | None:
        return self._d.pipelines.remove(name)

    def test_alert(self, by: str, text: str | None) -> AlertRecord:
        d = self._d
        name = d.settings.alerts.webhook_secret
        if name is None:
            raise Conflict("no webhook is set: name the stored secret that holds its URL as "
                           "webhook_secret under [alerts] in rota.toml")
        if d.alerts.url() is None:
            owner = d.settings.alerts.webhook_user or d.settings.user
            raise Conflict(f"the webhook secret {name} of {owner} is not stored; store the "
                           f"URL with `rota secret set {name}`")
        now = d.clock()
        key = f"test:{now:.6f}:{secrets.token_hex(4)}"
        d.alerts.alert(key, text or f"Test alert from Rota, sent by {by}", kind="test",
                       user=by)
        (row,) = d.store.alerts_by_key([key])
        return row

    def report_worker_requests(self, slot: int, pid: int, totals: Totals) -> None:
        self._d.metrics.worker_requests.report(slot, pid, totals)

    def shutdown(self) -> None:
        if self._on_shutdown is not None:
            asyncio.get_running_loop().call_soon(self._on_shutdown)


async def _chunks(stream: IO[bytes], size: int = 1 << 20) -> AsyncIterator[bytes]:
    """A stored file's bytes, each read off the loop; closed at the end or when the
    client leaves."""
    try:
        while chunk := await asyncio.to_thread(stream.read, size):
            yield chunk
    finally:
        await asyncio.to_thread(stream.close)


async def _off_loop(pieces: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A blocking generator's pieces, each made on a worker thread."""
    done = object()
    try:
        while (piece := await asyncio.to_thread(next, pieces, done)) is not done:
            yield piece  # type: ignore[misc]
    finally:
        await asyncio.to_thread(pieces.close)  # type: ignore[attr-defined]
