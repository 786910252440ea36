"""Quotas in the daemon: read usage from the store, hand the pass its quota facts, send
alerts, stop jobs over a hard budget.

Usage for GPU-hours and money quotas is read from the attempts (Store.usage) at most every
``quota_check`` seconds, when the quotas change, and when a period resets; GPUs held at
once are counted from the running jobs at every pass. The decisions are rota.core.quota's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

from rota.core.plan import Reason
from rota.core.quota import (
    Owner,
    Quota,
    Standing,
    alert_key,
    crossed,
    describe,
    gpu_allowance,
    hard_over,
    over_reasons,
    owners_of,
    period_window,
    standings,
)
from rota.core.snapshot import MILLI
from rota.errors import Conflict
from rota.server.jobs.running import Running
from rota.server.ports import StoreReads
from rota.store.repo import Store


class Quotas:
    def __init__(self, store: Store, clock: Callable[[], float],
                 running: Mapping[int, Running], preempt: Callable[[int, str], None],
                 every: float, alert: Callable[..., bool]) -> None:
        self.store, self.clock, self.running, self.preempt = store, clock, running, preempt
        self.alert = alert  # Daemon.alert: the webhook outbox, once per key
        self.every = every
        self.quotas: list[Quota] = []
        self.over: dict[Owner, Reason] = {}
        self._usage: list[Standing] = []  # GPU-hours and money quotas, as last read
        self._next_read = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # set when the daemon starts
        self.kick: Callable[[], None] = lambda: None  # runs a pass (which reads usage)

    def load(self) -> None:
        """(Re)read the quotas; the next pass reads usage again."""
        self.quotas = self.store.quotas()
        self._next_read = 0.0

    def running_gpus(self) -> dict[Owner, float]:
        held: dict[Owner, float] = {}
        for run in self.running.values():
            gpus = len(run.gpus) * run.milli / MILLI if run.gpus else 0.0
            for owner in owners_of(run.pending.user, run.pending.project):
                held[owner] = held.get(owner, 0.0) + gpus
        return held

    def for_pass(self, now: float) -> tuple[dict[Owner, Reason] | None,
                                            dict[Owner, tuple[int, float]] | None]:
        """(over_quota, gpu_allowance) for the Snapshot; (None, None) with no quotas."""
        if not self.quotas:
            return None, None
        if now >= self._next_read:
            self._read(now)
        at_once = [q for q in self.quotas if q.what == "gpus"]
        allowance = gpu_allowance(standings(at_once, [], self.running_gpus(), now)) \
            if at_once else {}
        return self.over, allowance

    def _read(self, now: float) -> None:
        usage_quotas = [q for q in self.quotas if q.what != "gpus"]
        since = min((period_window(q.period, now)[0] for q in usage_quotas), default=now)
        records = self.store.usage(since, now + 1.0) if usage_quotas else []
        self._usage = standings(usage_quotas, records, {}, now)
        self.over = over_reasons(self._usage)
        resets = [s.resets_at for s in self._usage if s.resets_at is not None]
        lifts = [q.lifted_until for q in self.quotas
                 if q.lifted_until is not None and q.lifted_until > now]
        self._next_read = min([now + self.every, *resets, *lifts])
        self._arm(now)
        self._alerts(now)
        self._stop_over_hard_budgets(hard_over(self._usage))

    def _arm(self, now: float) -> None:
        """A pass at the next read, so a running job's use is seen without other events."""
        if self._timer is not None:
            self._timer.cancel()
        if self.loop is not None:
            self._timer = self.loop.call_later(max(0.0, self._next_read - now) + 0.005,
                                               self.kick)

    def _alerts(self, now: float) -> None:
        for s in self._usage:
            q = s.quota
            for threshold in crossed(s):
                text = f"{q.kind} {q.name} reached {threshold} % of a quota: {describe(s)}"
                # the outbox keeps each key once: a restart or the next read sends nothing
                if self.alert(alert_key(s, threshold), text, kind="quota",
                              user=q.name if q.kind == "user" else None, owner_kind=q.kind,
                              owner=q.name, measure=q.what, percent=threshold):
                    self.store.add_event(job_id=None, kind="quota_alert", now=now,
                                         message=text)

    def _stop_over_hard_budgets(self, over: Mapping[Owner, str]) -> None:
        """Every running job of an owner at 100 % of a hard budget is stopped as a
        preemption is: the stop handshake (its grace to save a checkpoint), then queued again
        in its place; the quota gate keeps it waiting, with the reason, until the budget is
        raised, lifted or resets, and then it resumes from its checkpoint."""
        if not over:
            return
        for run in list(self.running.values()):
            if run.stop_reason is not None or run.handle is None:
                continue  # being stopped already; or not started yet (the next read)
            for owner in owners_of(run.pending.user, run.pending.project):
                why = over.get(owner)
                if why is not None:
                    # not running (yet): the next read sees it again
                    with contextlib.suppress(Conflict):
                        self.preempt(run.job_id, f"stopped over a hard budget: {why}")
                    break


def quota_views(store: StoreReads, quotas: list[Quota], now: float) -> list[dict[str, object]]:
    """The quotas with what their owners use now, read from the attempts (the API's
    answer: rota.answers.QuotaAnswer)."""
    usage_quotas = [q for q in quotas if q.what != "gpus"]
    since = min((period_window(q.period, now)[0] for q in usage_quotas), default=now)
    records = store.usage(since, now + 1.0)
    held: dict[Owner, float] = {}
    for r in records:
        if r.ended_at is None:
            for owner in owners_of(r.user, r.project):
                held[owner] = held.get(owner, 0.0) + r.gpus
    current = {s.quota: s for s in standings(quotas, records, held, now)}
    out: list[dict[str, object]] = []
    for q in quotas:
        s = current.get(q)
        if s is None:  # lifted: shown with its own usage all the same
            s = standings([q._replace(lifted_until=None)], records, held, now)[0]
        out.append({**q._asdict(), "used": round(s.used, 6), "percent": round(s.percent, 2),
                    "resets_at": s.resets_at, "text": describe(s)})
    return out
