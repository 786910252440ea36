"""The daemon's side of the API's ports (rota.server.ports): the one module outside the
daemon that reads its attributes, so a change inside the daemon touches the API here only.

Every method runs on the daemon's loop thread (the API's handlers are coroutines there).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from prometheus_client import Histogram

from rota.backends.engine import PoolHealth
from rota.core.job_secrets import check_secret_name
from rota.core.lifecycle import JobState
from rota.core.quota import Quota
from rota.core.spec import JobSpec
from rota.core.tiers import Tier, default_prices
from rota.errors import Conflict, NotFound
from rota.pipeline.config import PipelineConfig
from rota.pools import LOCAL
from rota.server.access.auth import Authenticator, Principal
from rota.server.api.pool_reads import (
    containers_answer,
    pools_answer,
    render_answer,
    render_spec_answer,
)
from rota.server.daemon_reads import gpu_views, live_facts, queue_answer
from rota.server.daemon_users import DaemonUsers
from rota.server.intake import Intake
from rota.server.loop.daemon import Daemon
from rota.server.loop.forwarding import engine_ids
from rota.server.policy.shares_view import (
    WEEK_S,
    priority_answer,
    shares_answer,
)
from rota.server.ports import Fault, Submitted
from rota.server.storage import cards
from rota.server.storage.artifacts import chosen, tar_of
from rota.server.storage.datasets import Datasets
from rota.server.storage.share_links import Shared
from rota.server.storage.workspace_cleanup import remove_listed, stale_files
from rota.server.tracking.metrics import Totals
from rota.storage import FileEntry, Manifest
from rota.storage.owner_files import OwnerFiles
from rota.store.repo import AlertRecord, JobRecord, PipelineRecord, ScheduleRecord, Store


class DaemonPorts(DaemonUsers):
    """Commands and Reads (rota.server.ports) over a running daemon and its intake (users
    and tokens: DaemonUsers)."""

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
        found = cards.facts(d.store, job_id, d.clock(), outputs,
                            default_prices=default_prices(d.settings.tier_set))
        account = cards.account_of(d.launcher.run_as, found.job["user"])  # (git as its owner)
        facts = await asyncio.to_thread(cards.with_git, found, account)
        if fmt == "json":
            return json.dumps(cards.as_json(facts)), "application/json"
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
