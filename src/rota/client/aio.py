"""``rota.AsyncClient``: the typed SDK for asyncio code; the same methods as
``rota.Client``, as coroutines and async iterators."""

from __future__ import annotations

import asyncio
import builtins
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import date, datetime
from types import TracebackType
from typing import Any, TypeVar, overload

from httpx_sse import EventSource

from rota.answers import QuotaAnswer
from rota.client import _calls as calls
from rota.client import _submits
from rota.client._calls import JobRef, States
from rota.client._times import When
from rota.client._transport import DEFAULT_TIMEOUT, AsyncTransport, Endpoint, TimeoutTypes
from rota.client.models import (
    Alert,
    Checkpoints,
    EvalRun,
    EvalSchedule,
    Event,
    Gpu,
    Health,
    Identity,
    Job,
    JobDetail,
    LogChunk,
    Metrics,
    Page,
    Pipeline,
    PipelineDetail,
    Priority,
    QueuePage,
    Report,
    Shares,
    Tier,
    Why,
)
from rota.errors import DaemonUnavailable, WaitTimeout

T = TypeVar("T")


class AsyncClient:
    """A connection to one Rota daemon, for asyncio code.

    Connects as :class:`rota.Client` does. Use ``async with``, or ``await`` :meth:`aclose`.
    """

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, *,
                 url: str | None = None, token: str | None = None,
                 timeout: TimeoutTypes = DEFAULT_TIMEOUT) -> None:
        self._t = AsyncTransport(Endpoint.resolve(socket_path, url=url, token=token), timeout)

    @property
    def endpoint(self) -> Endpoint:
        return self._t.endpoint

    async def aclose(self) -> None:
        await self._t.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<rota.AsyncClient {self._t.endpoint.where}>"

    async def _send(self, call: calls.Call[T]) -> T:
        return call.parse(await self._t.request(call.method, call.path, **call.kwargs()))

    # --- jobs ----------------------------------------------------------------------------
    @overload
    async def submit(self, spec: Mapping[str, Any] | None = None, /, *,
                     idempotency_key: str | None = None, force: bool = False,
                     **fields: Any) -> Job: ...
    @overload
    async def submit(self, spec: Sequence[Mapping[str, Any]], /, *,
                     idempotency_key: str | None = None,
                     force: bool = False) -> builtins.list[Job]: ...

    async def submit(self, spec: Any = None, /, *, idempotency_key: str | None = None,
                     force: bool = False, **fields: Any) -> Job | builtins.list[Job]:
        """Queue one job (a spec dict, or its fields as keywords) or several (a list of
        dicts, all or none). It carries ``idempotency_key`` (else a new random one), and
        is sent again with it when the connection fails (``rota.client._submits``): the
        daemon answers a key it has seen with the job(s) it made then, never a copy.
        A job this machine can never run as it is now (more GPUs or memory than it has) is
        refused (:class:`rota.errors.InvalidSpec`) unless ``force``: then it waits until
        the GPUs change."""
        specs, single = calls.submit_body(spec, fields)
        jobs = await _submits.send_async(
            lambda key: self._send(calls.submit(specs, key, force)), idempotency_key,
            asyncio.sleep)
        return jobs[0] if single else jobs

    async def get(self, job_id: JobRef) -> JobDetail:
        """One job with its spec and attempts."""
        return await self._send(calls.get(job_id))

    async def list(self, state: States = None, *, user: str | None = None,
                   name: str | None = None, project: str | None = None,
                   tag: str | None = None, limit: int = 200,
                   before: int | None = None) -> Page[Job]:
        """One page of jobs, newest first; ``page.next`` is the ``before`` of the next."""
        return await self._send(calls.list_jobs(state, limit, before, user=user, name=name,
                                                project=project, tag=tag))

    async def iter_jobs(self, state: States = None, *, user: str | None = None,
                        name: str | None = None, project: str | None = None,
                        tag: str | None = None, page_size: int = 200) -> AsyncIterator[Job]:
        """Every matching job, newest first, fetching pages as needed."""
        before: int | None = None
        while True:
            page = await self.list(state, user=user, name=name, project=project, tag=tag,
                                   limit=page_size, before=before)
            for job in page.items:
                yield job
            if page.next is None:
                return
            before = page.next

    async def why(self, job_id: JobRef) -> Why:
        """Why a job is not running (or what it is doing)."""
        return await self._send(calls.why(job_id))

    async def events(self, job_id: JobRef) -> builtins.list[Event]:
        """A job's history, oldest first."""
        return await self._send(calls.events(job_id))

    async def cancel(self, job_id: JobRef) -> JobDetail:
        """Cancel a job (a running one is signalled); answers the job as it is now."""
        await self._send(calls.action(job_id, "cancel"))
        return await self.get(job_id)

    async def hold(self, job_id: JobRef) -> JobDetail:
        """Keep a pending job from starting until :meth:`release`."""
        await self._send(calls.action(job_id, "hold"))
        return await self.get(job_id)

    async def release(self, job_id: JobRef) -> JobDetail:
        """Let a held job be scheduled again."""
        await self._send(calls.action(job_id, "release"))
        return await self.get(job_id)

    async def preempt(self, job_id: JobRef) -> JobDetail:
        """Stop a running job through the stop handshake and queue it again in its place;
        it resumes from its newest checkpoint (docs/ml.md). Answers the job as it is now."""
        await self._send(calls.action(job_id, "preempt"))
        return await self.get(job_id)

    async def metrics(self, job_id: JobRef, *, names: Sequence[str] = (),
                attempt: int | None = None, after: int = 0) -> Metrics:
        """Metric samples read from the job's output (every page from ``after`` on); poll
        with ``after=answer.next`` for what came since."""
        out: Metrics | None = None
        while True:
            page = await self._send(calls.metrics(job_id, names, attempt, after))
            out = calls.merge_metrics(out, page)
            if not page.more:
                return out
            after = page.next

    async def checkpoints(self, job_id: JobRef) -> Checkpoints:
        """The job's checkpoints and the one a retry would resume from."""
        return await self._send(calls.checkpoints(job_id))

    async def requeue(self, job_id: JobRef) -> Job:
        """Run a job again. A running job is stopped and queued again (same id); an
        ended one is submitted anew with its spec (a new id). Answers the job that will run."""
        return await self._send(calls.requeue(job_id))

    async def wait(self, job_id: JobRef, timeout: float | None = None) -> JobDetail:
        """Wait until the job ends and answer it (state, exit_code, ...).

        Raises :class:`rota.errors.WaitTimeout` (a ``TimeoutError``) if it has not ended
        after ``timeout`` seconds; the job itself goes on.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            hold = calls.wait_hold(deadline)
            res = await self._send(calls.wait_once(job_id, hold, self._t.timeout))
            if res["done"]:
                return await self.get(job_id)
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(calls.job_id(job_id), res["state"], timeout or 0.0)

    async def read_log(self, job_id: JobRef, offset: int = 0, limit: int | None = None, *,
                       since: When | None = None, until: When | None = None) -> LogChunk:
        """Up to ``limit`` bytes of a job's log from ``offset`` (one request); with
        ``since``/``until``, of the lines written in that time (as ``logs``)."""
        window = calls.log_window(since, until)
        return await self._send(calls.read_log(job_id, offset, limit, window))

    async def logs(self, job_id: JobRef, *, follow: bool = False, offset: int = 0,
                   since: When | None = None, until: When | None = None,
                   ) -> AsyncIterator[str]:
        """A job's output as text chunks: what is there now, or with ``follow=True`` also
        what comes, until the job ends. ``since``/``until`` keep the lines written in that
        time (as ``Client.logs``). Errors surface when iteration starts."""
        window = calls.log_window(since, until)
        if follow:
            async for text in self._follow(calls.follower(job_id, offset, window)):
                yield text
            return
        while True:
            chunk = await self._send(calls.read_log(job_id, offset, None, window))
            if chunk.next == chunk.offset:
                return
            yield chunk.data
            offset = chunk.next

    async def _follow(self, f: calls.LogFollower) -> AsyncIterator[str]:
        """As ``Client._follow``: server-sent events, resumed after a dropped connection."""
        while not f.ended:
            try:
                async with self._t.stream("GET", f.path, params=f.params()) as resp:
                    async for ev in EventSource(resp).aiter_sse():
                        text = f.take(ev.event, ev.data)
                        if text:
                            yield text
            except DaemonUnavailable as e:
                await asyncio.sleep(f.pause_after(e))
            else:
                if not f.ended:  # closed before the end: the daemon is going away
                    await asyncio.sleep(f.pause_after(calls.stream_cut()))

    # --- machine -------------------------------------------------------------------------
    async def gpus(self) -> builtins.list[Gpu]:
        return await self._send(calls.gpus())

    async def pause_gpu(self, index: int) -> Gpu:
        """Start nothing new on this GPU (running jobs stay)."""
        await self._send(calls.gpu_action(index, "pause"))
        return calls.pick_gpu(await self.gpus(), index)

    async def resume_gpu(self, index: int) -> Gpu:
        await self._send(calls.gpu_action(index, "resume"))
        return calls.pick_gpu(await self.gpus(), index)

    async def queue(self, limit: int = 0, *, offset: int = 0, counts: bool = True) -> QueuePage:
        """The queue's totals (jobs per state, the GPUs kept for jobs that wait for them);
        with ``limit``, also the jobs on GPUs, ``limit`` waiting jobs from ``offset`` in the
        order they will start, and the oldest held ones. ``counts=False`` leaves out the
        counts per state (they read every job's row)."""
        return await self._send(calls.queue(limit, offset, counts))

    async def tiers(self) -> builtins.list[Tier]:
        """Every tier with its limits and price per GPU-hour, cheapest first."""
        return await self._send(calls.tiers())

    async def report(self, *, by: str = "user", period: str = "day",
               since: datetime | date | float | str | None = None,
               until: datetime | date | float | str | None = None) -> Report:
        """GPU-hours and cost per ``by`` (user, project, pool, tier) and ``period`` (day,
        week, month: UTC, weeks from Monday); the caller's own usage unless an admin asks."""
        return await self._send(calls.report(by, period, since, until))

    async def health(self) -> Health:
        return await self._send(calls.health())

    async def shares(self) -> Shares:
        """Every user's and project's fair share, usage and factor (``rota share``)."""
        return await self._send(calls.shares())

    async def set_share(self, name: str, shares: float, *, project: bool = False) -> Shares:
        """Give a user (or, ``project=True``, a project) a fair share; admins only."""
        return await self._send(calls.set_share(name, shares, project=project))

    async def priority(self, job: JobRef) -> Priority:
        """A waiting job's priority factors and their sum (``rota priority``)."""
        return await self._send(calls.priority(job))

    async def whoami(self) -> Identity:
        """The user the daemon takes this client for (the token's, or the local user)."""
        return await self._send(calls.whoami())

    # --- evaluations ---------------------------------------------------------------------
    async def eval_results(self, *, name: str | None = None, model: str | None = None,
                           task: str | None = None,
                           limit: int = 50) -> builtins.list[EvalRun]:
        """Evaluation runs (`rota eval submit`), newest first, each with the last value of
        every metric it reported: of config ``name``, of ``model`` (as the config names
        it), and with ``task`` only metrics named ``TASK/...`` (and runs that have some)."""
        return await self._send(calls.eval_results(name, model, task, limit))

    async def schedule_eval(self, config: str, *, every: str | float | None = None,
                      after_job: JobRef | None = None, on_checkpoint: JobRef | None = None,
                      pool: str | None = None, path: str = "") -> EvalSchedule:
        """Evaluate ``config`` (an evaluation config's YAML) by itself from now on: every
        ``every`` (seconds, or "1d"), once after job ``after_job`` completes, or on each new
        checkpoint of job ``on_checkpoint`` (exactly one of them)."""
        return await self._send(calls.schedule_eval(calls.schedule_body(
            config, path=path, every=every, after_job=after_job, on_checkpoint=on_checkpoint,
            pool=pool)))

    # --- quotas and budgets ---------------------------------------------------------------
    async def quotas(self) -> builtins.list[QuotaAnswer]:
        """Quotas with what their owners use now: yours and the projects' (an admin's:
        all)."""
        return await self._send(calls.quotas())

    async def set_quota(self, kind: str, name: str, what: str, limit: float, *,
                  period: str = "none", hard: bool = False) -> QuotaAnswer:
        """Set an owner's quota (admin): ``kind`` user|project, ``what``
        gpus|gpu_hours|money, ``period`` none|day|week|month (UTC calendar)."""
        return await self._send(calls.set_quota(kind, name, what, limit, period, hard))

    async def lift_quota(self, kind: str, name: str, seconds: float,
                   what: str | None = None) -> int:
        """Do not enforce the owner's quota (or all of them) for ``seconds`` (admin)."""
        return await self._send(calls.lift_quota(kind, name, seconds, what))

    async def remove_quota(self, kind: str, name: str, what: str | None = None) -> int:
        """Remove the owner's quota (or all of them) (admin)."""
        return await self._send(calls.remove_quota(kind, name, what))

    # --- pipelines (rota pipeline) ---------------------------------------------------------
    async def add_pipeline(self, config: str, *, path: str = "",
                       task: str | None = None) -> builtins.list[Pipeline]:
        """Add the pipelines of ``config`` (a pipeline file's YAML: Rota's form, or a
        Gradients config.yaml, of which ``task`` picks one), all or none; relative paths
        are read from ``path``'s folder. The first round of each is due now."""
        return await self._send(calls.add_pipeline(config, path=path, task=task))

    async def pipelines(self) -> builtins.list[Pipeline]:
        """Your pipelines (an admin's: everyone's), oldest first."""
        return await self._send(calls.pipelines())

    async def pipeline(self, name: str, *, limit: int = 50) -> PipelineDetail:
        """One pipeline and its last ``limit`` rounds (newest first)."""
        return await self._send(calls.pipeline(name, limit))

    async def pause_pipeline(self, name: str, reason: str = "paused") -> Pipeline:
        """No new round begins until resumed (an open round finishes)."""
        return await self._send(calls.pipeline_action(name, "pause", {"reason": reason}))

    async def resume_pipeline(self, name: str) -> Pipeline:
        return await self._send(calls.pipeline_action(name, "resume"))

    async def run_pipeline_now(self, name: str) -> Pipeline:
        """The next round now (Conflict while one is open)."""
        return await self._send(calls.pipeline_action(name, "run-now"))

    async def remove_pipeline(self, name: str) -> int | None:
        """Remove it; an open round's jobs are cancelled (its number back)."""
        return await self._send(calls.remove_pipeline(name))

    async def eval_schedules(self) -> builtins.list[EvalSchedule]:
        """Your evaluation schedules (an admin's: everyone's), oldest first."""
        return await self._send(calls.eval_schedules())

    async def unschedule_eval(self, schedule_id: int) -> None:
        """Remove a schedule of yours: no run of it is submitted from now on."""
        await self._send(calls.unschedule_eval(schedule_id))

    async def alerts(self, *, user: str | None = None, limit: int = 100) -> builtins.list[Alert]:
        """Alerts sent to the webhook, newest first: yours (an admin's: everyone's, or
        ``user``'s)."""
        return await self._send(calls.alerts(user, limit))

    async def test_alert(self, text: str | None = None) -> Alert:
        """Send a test alert to the daemon's webhook (admin); it goes out like any alert."""
        return await self._send(calls.test_alert(text))
