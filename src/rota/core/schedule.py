"""schedule(snapshot, policy, now) -> plan. Pure: the daemon and the simulator share it.

One pass walks the pending queue in priority order (lower number first, FIFO among equals)
and places each job on the proposed state of the GPUs. A job that cannot start gets a reason.
The first job blocked on resources gets a reservation: the GPUs closest to holding it are kept
from later jobs, so big jobs are not starved by a stream of small ones; later jobs may still
use the other GPUs, and the kept ones too when they are expected to end by the reservation's
shadow time, the time the kept GPUs are expected to have room for it (EASY backfill, see
rota.core.backfill). Jobs of a shape that already failed in this pass fail again
without a search, since capacity only shrinks during a pass: that keeps a pass over 100k
pending jobs near linear.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice
from operator import attrgetter

from rota.core import packing
from rota.core.backfill import Occupant, shadow_time, start_estimates
from rota.core.feasibility import need_text, never_runnable
from rota.core.lifecycle import JobState
from rota.core.plan import Plan, Preemption, Reason, ReasonCode, Reservation, Start
from rota.core.pool import GpuPool
from rota.core.preempt import victims_for
from rota.core.quota import QuotaGate
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy, Snapshot
from rota.units import format_gpu_set, format_memory

_FAILED_DEPS = frozenset({JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT})


queue_order = attrgetter("priority", "seq")
_milli_of = attrgetter("gpus_milli")
WORKLOAD_SAMPLE = 10_000  # queued jobs FGD learns the workload from


def schedule(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    if snapshot.presorted:  # the pass reads it only: no copy of a list
        pending = snapshot.pending if isinstance(snapshot.pending, list) \
            else list(snapshot.pending)
    else:
        pending = sorted(snapshot.pending, key=queue_order)
    if policy.draining:
        plan = Plan()
        drain = Reason(ReasonCode.DRAINING, "the machine is draining: nothing new starts")
        plan.reasons = dict.fromkeys((j.id for j in pending), drain)
        return plan
    return _Pass(snapshot, policy, now).run(pending)


class _Pass:
    """The scratch state of one scheduling pass."""

    def __init__(self, snapshot: Snapshot, policy: Policy, now: float) -> None:
        self.snapshot, self.policy, self.now = snapshot, policy, now
        self.plan = Plan()
        workload = _workload(snapshot, policy)
        self.pool = snapshot.pool.copy(policy, workload) if snapshot.pool is not None \
            else GpuPool(snapshot.gpus, policy, workload=workload)
        self.all_gpus = self.pool.all_gpus
        self.failed_shapes: dict[tuple[int, int | None, frozenset[int] | None], Reason] = {}
        self.never_by_shape: dict[tuple[int, int | None, frozenset[int] | None],
                                  Reason | None] = {}
        self.full: dict[int, Reason] = {}  # gpus_milli -> reason once no GPU has room for it
        self.node_of = self.pool.node_of if self.pool.multi else None
        self.mem_desc = self.pool.mem_desc()
        self.smallest = self.pool.least_memory()
        self.shadow: float | None = None  # the reservation's, once there is one
        self.started: list[Occupant] = []  # this pass's starts, with their expected ends
        self.quota = None if snapshot.over_quota is None and snapshot.gpu_allowance is None \
            and not snapshot.held else QuotaGate(snapshot.over_quota or {},
                                                 snapshot.gpu_allowance or {},
                                                 snapshot.held or {})

    def run(self, pending: list[PendingJob]) -> Plan:
        plan, full = self.plan, self.full
        reasons, positions = plan.reasons, plan.queue_position
        waiting = 0  # jobs blocked on resources so far: the queue position of the next one
        # the least any waiting job needs of one GPU: a whole-GPU job needs a free GPU, and no
        # GPU has more than 1000 thousandths free, so cap it there
        least = self.snapshot.smallest_milli
        smallest = min(min(map(_milli_of, pending), default=0) if least is None else least,
                       MILLI)
        checked_at = -1  # pool version at the last saturation check
        quota = self.quota  # None unless some owner has a quota
        for n, job in enumerate(pending):
            if job.after or job.not_before is not None:
                blocked = gate(job, self.snapshot.dependency_states, self.now)
                if blocked is not None:
                    reasons[job.id] = blocked
                    continue
            if quota is not None:
                blocked = quota.check(job)
                if blocked is not None:
                    reasons[job.id] = blocked
                    continue
            reason = full.get(job.gpus_milli) if job.gpus_milli else None
            if reason is not None:
                reason = self._never(job) or reason
            else:
                reason = self._try(job)
                if reason is None:
                    if quota is not None:
                        quota.spend(job)
                    continue
            reasons[job.id] = reason
            positions[job.id] = waiting
            waiting += 1
            if not self.policy.backfill and reason.code is not ReasonCode.UNSATISFIABLE:
                _block_rest(plan, pending, job, self.snapshot, self.now, self._never,
                            self.quota)
                break
            if smallest and checked_at != self.pool.version:
                checked_at = self.pool.version
                if self.pool.max_free_share() < smallest:
                    rest = pending[n + 1:]
                    if self._kept_room(smallest):
                        rest = self._backfill_tail(rest, smallest)
                    self._cut(rest, waiting)
                    break
        if self.policy.preemption and any(r.preemptible or r.stopping
                                          for r in self.snapshot.running):
            self._preempt_for_first_blocked(pending)
        if self.policy.estimate_jobs:
            plan.start_estimates = start_estimates(
                self.snapshot.gpus, pending, plan, self._occupants(), self.policy, self.now,
                self.policy.estimate_jobs)
        return plan

    def _occupants(self) -> list[Occupant]:
        """What holds GPUs, and until when: running jobs and this pass's starts."""
        return [*((r.expected_end, r.gpu_indices, r.milli, r.gpu_mem)
                  for r in self.snapshot.running), *self.started]

    def _kept_room(self, smallest: int) -> bool:
        """Could a short job still backfill onto the GPUs kept for the reservation?"""
        return self.shadow is not None and any(self.pool.free_milli[i] >= smallest
                                               for i in self.pool.reserved_for)

    def _backfill_tail(self, rest: list[PendingJob], smallest: int) -> list[PendingJob]:
        """Only kept GPUs have room left: start the jobs of ``rest`` that end by the shadow
        time there, looking at those alone (a filter, not a pass over each job: the rest
        may be 100k long); the others wait in the lazy tail. The rest less those started."""
        assert self.shadow is not None
        horizon = self.shadow - self.now
        failed: set[tuple[int, int | None, frozenset[int] | None]] = set()
        started: set[int] = set()
        checked_at = self.pool.version
        for job in [j for j in rest if j.expected is not None and j.expected <= horizon]:
            if checked_at != self.pool.version:
                checked_at = self.pool.version
                if not self._kept_room(smallest):
                    break
            if job.shape in failed:
                continue
            gated = job.after or job.not_before is not None
            if gated and gate(job, self.snapshot.dependency_states, self.now) is not None:
                continue
            if self.quota is not None and self.quota.check(job) is not None:
                continue  # held, or its owner at a quota: the lazy tail gives its reason
            if self._never(job) is None and self._backfill(job):
                started.add(job.id)
                if self.quota is not None:
                    self.quota.spend(job)
            else:
                failed.add(job.shape)  # capacity only shrinks: the shape fails from now on
        return [j for j in rest if j.id not in started] if started else rest

    def _may_backfill(self, job: PendingJob) -> bool:
        """A job may use kept GPUs when it is expected to end by the shadow time."""
        return (self.shadow is not None and job.expected is not None
                and self.now + job.expected <= self.shadow)

    def _preempt_for_first_blocked(self, pending: list[PendingJob]) -> None:
        """Make room for the first job that waits for GPUs, if stopping preemptible jobs of
        lower priority would; one job per pass, so stops do not cascade."""
        plan = self.plan
        for job in pending:
            reason = plan.reason(job.id)
            if reason is None or reason.code is not ReasonCode.RESOURCES:
                continue
            victims = victims_for(job, self.pool.current_views(), self.snapshot.running,
                                  self.policy)
            if victims:
                plan.preemptions = [Preemption(v, job.id) for v in victims]
                plan.reasons[job.id] = Reason(
                    ReasonCode.RESOURCES, f"{reason.message}; preempting job"
                    f"{'s' if len(victims) > 1 else ''} {', '.join(map(str, victims))} "
                    "to make room")
            return

    def _cut(self, tail: list[PendingJob], waiting: int) -> None:
        """No GPU can hold even the smallest pending job: the rest waits for the same reason."""
        plan, snapshot, now = self.plan, self.snapshot, self.now
        kept, full = "", "every GPU is fully allocated"
        if plan.reservations:  # what is free on the kept GPUs is not the tail's to take
            gpus = plan.reservations[0].gpu_indices
            if any(self.pool.free_milli[i] for i in gpus):
                full = "no GPU has room it may use"
            kept = (f" ({_gpus(set(gpus))} with {_free_text(gpus, self.pool.free_milli)} "
                    f"{'is' if len(gpus) == 1 else 'are'} kept for job "
                    f"{plan.reservations[0].job_id}, which is ahead)")
        plan.tail, plan.tail_position, plan.by_id = tail, waiting, snapshot.by_id
        plan.tail_reason = Reason(ReasonCode.RESOURCES, f"waits for GPUs: {full}{kept}"
                                  f"{_unusable_note(self.pool)}")
        # what the lazy reasons need, and not the whole pass (the plan may outlive it)
        views, all_gpus, mem_desc, smallest, node_of = (
            self.pool.views, self.all_gpus, self.mem_desc, self.smallest, self.node_of)
        quota = self.quota

        def own_reason(job: PendingJob) -> Reason | None:
            blocked = (gate(job, snapshot.dependency_states, now)
                       if job.after or job.not_before else None)
            if blocked is None and quota is not None:
                blocked = quota.check(job)
            return blocked or _never(job, views, all_gpus, mem_desc, smallest, node_of)

        plan.gate = own_reason

    def _try(self, job: PendingJob) -> Reason | None:
        """Start the job on the proposed state, or say why it cannot start."""
        pool = self.pool
        if job.gpus_milli == 0:
            self.plan.starts.append(Start(job.id, (), 0, None))
            return None
        if job.allowed is not None and len(job.allowed) >= len(self.all_gpus) \
                and job.allowed >= self.all_gpus:
            job = _unrestricted(job)
        shape = job.shape
        reason = self.failed_shapes.get(shape)
        if reason is not None:
            if reason.code is ReasonCode.PRIORITY and self._may_backfill(job):
                return None if self._backfill(job) else reason
            return reason
        never = self._never(job)
        if never is not None:
            self.failed_shapes[shape] = never
            return never
        if pool.cannot_fit_anywhere(job):
            reason = self.full[job.gpus_milli] = _machine_full(job, pool)
            self._reserve_for(job)
            return self._kept_for(job, reason)
        if job.allowed is not None and job.allowed.isdisjoint(pool.reserved_for):
            reason = _restricted_quick_check(job, pool)
        if reason is None:
            found = pool.find(job)
            if found is not None:
                self._start(job, found)
                return None
            reason = _explain(job, pool)
            if reason.code is ReasonCode.PRIORITY and self._may_backfill(job):
                self.failed_shapes[shape] = reason
                return None if self._backfill(job) else reason
            if reason.code is ReasonCode.RESOURCES:
                self._reserve_for(job)
        self.failed_shapes[shape] = reason
        return self._kept_for(job, reason)

    def _start(self, job: PendingJob, found: tuple[int, ...]) -> None:
        milli = min(job.gpus_milli, MILLI)
        self.pool.take(found, milli, job.gpu_mem)
        self.plan.starts.append(Start(job.id, found, milli, job.gpu_mem))
        end = None if job.expected is None else self.now + job.expected
        self.started.append((end, found, milli, job.gpu_mem))

    def _backfill(self, job: PendingJob) -> bool:
        """Start a job that ends by the shadow time on GPUs kept for the reservation (it
        cannot delay the reserved job); whether it started."""
        found = self.pool.find_ignoring_reservations(job)
        if found is not None:
            self._start(job, found)
        return found is not None

    def _never(self, job: PendingJob) -> Reason | None:
        """UNSATISFIABLE, checked in O(1) for jobs that may use any GPU; once per shape."""
        shape = job.shape
        if shape in self.never_by_shape:
            return self.never_by_shape[shape]
        reason = self.never_by_shape[shape] = _never(job, self.pool.views, self.all_gpus,
                                                     self.mem_desc, self.smallest, self.node_of)
        return reason

    def _kept_for(self, job: PendingJob, reason: Reason) -> Reason:
        """The reason of the job GPUs were just kept for says which, and what is free on
        them now (when it may start is the start estimate's to say); other jobs of its
        shape keep the shape's reason."""
        res = self.plan.reservations
        if not res or res[0].job_id != job.id or reason.code is not ReasonCode.RESOURCES:
            return reason
        kept, free = res[0].gpu_indices, self.pool.free_milli
        text = f"{_gpus_kept(set(kept))} for it ({_free_text(kept, free)} now)"
        return Reason(reason.code, f"{reason.message}; {text}")

    def _reserve_for(self, job: PendingJob) -> None:
        """Only the first job blocked on resources keeps GPUs (EASY-backfill style)."""
        if self.policy.reserve_for_blocked and not self.plan.reservations:
            pool = self.pool
            kept = pool.reserve(job)
            if kept:
                self.shadow = shadow_time(job, kept, pool.free_milli, pool.free_mem,
                                          self._occupants(), self.now)
                self.plan.reservations.append(Reservation(job.id, kept, self.shadow))


def _workload(snapshot: Snapshot, policy: Policy) -> packing.Workload | None:
    """FGD's expected shapes, when the policy names none: those of the head of the queue
    (the jobs placed next; a sample keeps a million-job queue cheap)."""
    if policy.packing != "fgd" or policy.workload:
        return None
    head = islice(snapshot.pending, WORKLOAD_SAMPLE)
    return packing.workload_of((j.gpus_milli, 0, 0) for j in head) or None


def _restricted_quick_check(job: PendingJob, pool: GpuPool) -> Reason | None:
    """A job limited to some GPUs: reject it by one set test when none of them has room."""
    assert job.allowed is not None
    cands = pool.candidates(job.gpus_milli, job.gpu_mem)
    need = max(1, job.gpus_milli // MILLI)
    if need == 1:
        if not cands.isdisjoint(job.allowed):
            return None
    elif len(cands & job.allowed) >= need:
        return None
    notes = [f"GPU {i} {pool.unusable[i]}" for i in sorted(job.allowed) if i in pool.unusable]
    note = f" ({'; '.join(notes[:4])})" if notes else ""
    return Reason(ReasonCode.RESOURCES,
                  f"waits for {_need_text(job)}; not enough room on its "
                  f"{len(job.allowed)} allowed GPUs {{{format_gpu_set(job.allowed)}}}{note}")


def _machine_full(job: PendingJob, pool: GpuPool) -> Reason:
    need = _need_text(job)
    if job.gpus_milli >= MILLI:
        text = f"waits for {need}; {pool.whole_free()} free on the machine"
        if pool.multi:  # a job of k GPUs needs them on one node
            text += f" (at most {pool.most_whole_on_a_node()} on one node)"
    else:
        text = (f"waits for {need}; no GPU has that much free "
                f"(the most free is {pool.max_free_share() / MILLI:g})")
    return Reason(ReasonCode.RESOURCES, text + _unusable_note(pool))


def _unusable_note(pool: GpuPool) -> str:
    """Name the GPUs that take no new work (paused, unhealthy, busy outside Rota)."""
    notes = [f"GPU {i} {why}" for i, why in sorted(pool.unusable.items())]
    if not notes:
        return ""
    more = f"; {len(notes) - 4} more" if len(notes) > 4 else ""
    return f" ({'; '.join(notes[:4])}{more})"


def _unrestricted(job: PendingJob) -> PendingJob:
    return job._replace(allowed=None)


def gate(job: PendingJob, dependency_states: Mapping[int, JobState],
         now: float) -> Reason | None:
    """Reasons that do not depend on GPUs: dependencies and retry backoff (the same for
    every pool)."""
    for dep in job.after:
        state = dependency_states.get(dep)
        if state is JobState.COMPLETED:
            continue
        if state in _FAILED_DEPS:
            return Reason(ReasonCode.DEPENDENCY_FAILED,
                          f"job {dep} it depends on ended {state.value}; it can never start",
                          blocker=dep)
        shown = state.value if state is not None else "unknown"
        return Reason(ReasonCode.DEPENDENCY, f"waits for job {dep} ({shown}) to complete",
                      blocker=dep)
    if job.not_before is not None and job.not_before > now:
        return Reason(ReasonCode.BACKOFF,
                      # a retry's backoff, or the wait after a lost launch or a dependency
                      # that moved: its last event says which
                      f"waits before it is tried again: may start in "
                      f"{job.not_before - now:.0f}s",
                      until=job.not_before)
    return None


def _block_rest(plan: Plan, pending: list[PendingJob], blocker: PendingJob,
                snapshot: Snapshot, now: float,
                never: Callable[[PendingJob], Reason | None],
                quota: QuotaGate | None = None) -> None:
    """Strict priority (no backfill): everything behind the first blocked job waits for it.

    A job's own reasons come first: a gate, what holds it or a quota, or UNSATISFIABLE
    (waiting behind the blocker would not help it), as they would in the lazy tail.
    """
    behind = Reason(ReasonCode.PRIORITY, f"waits behind job {blocker.id}, first in the queue",
                    blocker=blocker.id)
    started = {s.job_id for s in plan.starts}
    for j in pending:
        if j.id not in plan.reasons and j.id not in started:
            plan.reasons[j.id] = (gate(j, snapshot.dependency_states, now)
                                  or (quota.check(j) if quota is not None else None)
                                  or (never(j) if j.gpus_milli else None) or behind)


def _need_text(job: PendingJob) -> str:
    return need_text(job.gpus_milli, job.gpu_mem)


def _never(job: PendingJob, views: Mapping[int, GpuView], all_gpus: frozenset[int],
           mem_desc: list[int], smallest: int,
           node_of: Mapping[int, int] | None = None) -> Reason | None:
    """_unsatisfiable, with an O(1) answer for the common case of a job that fits.

    ``mem_desc`` is every GPU's memory, largest first (on several nodes, most_memory);
    ``smallest`` the least of them; ``node_of`` the GPUs' nodes when there are several.
    """
    need = max(1, job.gpus_milli // MILLI)
    if job.allowed is None:
        if need <= len(mem_desc) and (not job.gpu_mem or job.gpu_mem <= mem_desc[need - 1]):
            return None
    elif len(job.allowed & all_gpus) >= need and (not job.gpu_mem or job.gpu_mem <= smallest) \
            and (need == 1 or node_of is None):
        return None
    return _unsatisfiable(job, views, node_of)


def _unsatisfiable(job: PendingJob, views: Mapping[int, GpuView],
                   node_of: Mapping[int, int] | None = None) -> Reason | None:
    """The job cannot fit on this machine however long it waits (as the machine is now), in
    the words intake refuses such a job with (rota.core.feasibility)."""
    why = never_runnable(job.gpus_milli, job.gpu_mem, job.allowed,
                         {i: v.memory_total for i, v in views.items()}, node_of)
    return None if why is None else Reason(ReasonCode.UNSATISFIABLE, why)


def _explain(job: PendingJob, pool: GpuPool) -> Reason:
    """Why a job that can run here (the caller checked: see _never) found no GPUs now, in
    words, with the figures a person needs."""
    scope = sorted(job.allowed) if job.allowed is not None else sorted(pool.views)
    present = [i for i in scope if i in pool.views]
    where = f"allowed GPUs {{{format_gpu_set(job.allowed)}}}" if job.allowed else "GPUs"
    need = _need_text(job)
    whole = job.gpus_milli // MILLI
    behind = pool.find_ignoring_reservations(job)
    if behind is not None:
        owner = pool.reserved_for.get(behind[0]) or next(iter(pool.reserved_for.values()))
        return Reason(ReasonCode.PRIORITY,
                      f"needs {need}; GPUs are kept for job {owner}, which is ahead of it",
                      blocker=owner)
    notes = [f"GPU {i} {pool.unusable[i]}" for i in present if i in pool.unusable][:4]
    if whole:
        free = sum(1 for i in present if pool.usable(i, MILLI, job.gpu_mem))
        state = f"{free} free among {where}"
    else:
        best = max((pool.free_milli[i] for i in present if i not in pool.unusable
                    and i not in pool.reserved_for), default=0)
        state = f"the most free on one of the {where} is {best / MILLI:g}"
        if job.gpu_mem:
            most_mem = max((pool.free_mem[i] for i in present if i not in pool.unusable),
                           default=0)
            state += f", with {format_memory(max(most_mem, 0))} free memory"
    text = f"waits for {need}; {state}"
    if notes:
        text += f" ({'; '.join(notes)})"
    return Reason(ReasonCode.RESOURCES, text)


def _free_text(gpus: tuple[int, ...], free_milli: Mapping[int, int]) -> str:
    """'0.5 free', '1.25 free' (in GPUs, summed), or 'nothing free'."""
    total = sum(free_milli[i] for i in gpus)
    return f"{total / MILLI:g} free" if total else "nothing free"


def _gpus(gpus: set[int]) -> str:
    """'GPU 0', 'GPUs 0-2'."""
    return f"GPU{'s' if len(gpus) > 1 else ''} {format_gpu_set(gpus)}"


def _gpus_kept(gpus: set[int]) -> str:
    """'GPU 0 is kept', 'GPUs 0-2 are kept'."""
    return f"{_gpus(gpus)} {'is' if len(gpus) == 1 else 'are'} kept"
