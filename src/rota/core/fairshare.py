"""Fair share and multifactor priority: pure functions of usage, shares and time.

The formulas follow Slurm's multifactor priority plugin (docs/policy.md cites them):

- **Usage** is GPU-seconds decayed with a half-life (Slurm's PriorityDecayHalfLife): a
  GPU-second used ``t`` seconds ago counts ``0.5 ** (t / half_life)``. An account's usage
  is one number and the time it was last brought up to date (``Usage``), so it is stored
  as two columns and survives restarts without keeping every attempt around.
- **Fair-share factor** (Slurm's classic formula): ``F = 2 ** (-U / S)``, where ``U`` is
  the account's share of everyone's decayed usage and ``S`` its share of the shares
  (normalised). An account that used exactly its share gets 0.5; one that used nothing
  gets 1; one that used twice its share gets 0.25.
- **A job's priority** is the weighted sum of factors in [0, 1] (explicit priority, age,
  size, fair share), as ``sprio`` shows them; a higher sum starts first, submission order
  breaking ties.

Nothing here reads a clock or a store: the daemon and the simulator pass ``now``, the
usage and the shares in, so a trace replays the very decisions the daemon makes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Protocol

from rota.core.snapshot import PendingJob

#: Slurm's default PriorityDecayHalfLife
DEFAULT_HALF_LIFE_S = 7 * 86_400.0
#: the age at which the age factor reaches 1 (Slurm's PriorityMaxAge)
DEFAULT_MAX_AGE_S = 7 * 86_400.0
#: a job's explicit priority spans this (JobSpec.priority: lower runs first)
PRIORITY_RANGE = (-1_000_000, 1_000_000)


@dataclass(frozen=True, slots=True)
class Usage:
    """An account's decayed GPU-seconds as of ``at`` (unix time)."""

    gpu_seconds: float = 0.0
    at: float = 0.0

    def decayed(self, now: float, half_life: float = DEFAULT_HALF_LIFE_S) -> Usage:
        """The same usage seen from ``now`` (never from before ``at``: time runs forward)."""
        if now <= self.at:
            return self
        return Usage(self.gpu_seconds * decay(now - self.at, half_life), now)

    def charged(self, gpu_seconds: float, used_at: float, now: float,
                half_life: float = DEFAULT_HALF_LIFE_S) -> Usage:
        """This usage plus ``gpu_seconds`` used at ``used_at`` (an attempt's middle, or a
        sample's time), seen from ``now``."""
        if gpu_seconds < 0 or not math.isfinite(gpu_seconds):
            raise ValueError(f"GPU-seconds must be a finite number >= 0, not {gpu_seconds}")
        base = self.decayed(now, half_life)
        return Usage(base.gpu_seconds + gpu_seconds * decay(now - used_at, half_life),
                     base.at)


def decay(elapsed: float, half_life: float = DEFAULT_HALF_LIFE_S) -> float:
    """What one unit of usage ``elapsed`` seconds old counts now (1 when not yet old)."""
    if half_life <= 0:
        raise ValueError(f"the half-life must be > 0 seconds, not {half_life}")
    return 0.5 ** (max(0.0, elapsed) / half_life)


@dataclass(frozen=True, slots=True)
class FairShare:
    """One account as ``rota share`` shows it."""

    account: str
    shares: float  # as the admin set them (default 1)
    norm_shares: float  # its part of all accounts' shares, 0..1
    usage: float  # decayed GPU-seconds
    norm_usage: float  # its part of all accounts' decayed usage, 0..1
    factor: float  # 2 ** (-norm_usage / norm_shares), 0..1

    @property
    def effective_share(self) -> float:
        """Its usage against its share: 1 = used exactly its share (Slurm's EffectvUsage
        over NormShares)."""
        return self.norm_usage / self.norm_shares if self.norm_shares else math.inf


def fair_shares(shares: Mapping[str, float], usage: Mapping[str, float],
                default_share: float = 1.0) -> dict[str, FairShare]:
    """Every account that has a share or a usage, with its fair-share factor. Accounts
    with no share set get ``default_share`` (equal shares unless an admin says else)."""
    accounts = sorted(set(shares) | set(usage))
    given = {a: float(shares.get(a, default_share)) for a in accounts}
    for a, s in given.items():
        if s < 0 or not math.isfinite(s):
            raise ValueError(f"the share of {a} must be a finite number >= 0, not {s}")
    total_shares = sum(given.values())
    total_usage = sum(max(0.0, usage.get(a, 0.0)) for a in accounts)
    out = {}
    for a in accounts:
        used = max(0.0, usage.get(a, 0.0))
        ns = given[a] / total_shares if total_shares else 0.0
        nu = used / total_usage if total_usage else 0.0
        out[a] = FairShare(a, given[a], ns, used, nu, factor(nu, ns))
    return out


def factor(norm_usage: float, norm_shares: float) -> float:
    """Slurm's classic fair-share factor ``2 ** (-U / S)``; no share at all: 0."""
    if norm_shares <= 0:
        return 0.0
    return 2.0 ** (-norm_usage / norm_shares)


@dataclass(frozen=True, slots=True)
class Weights:
    """How much each factor counts (``[priority]`` in rota.toml; Slurm's PriorityWeight*)."""

    priority: float = 1000.0
    age: float = 100.0
    size: float = 0.0
    fair_share: float = 1000.0
    max_age_s: float = DEFAULT_MAX_AGE_S
    favor_small: bool = False  # size factor: larger jobs first unless set (Slurm's default)

    def __post_init__(self) -> None:
        for name in ("priority", "age", "size", "fair_share", "max_age_s"):
            v = getattr(self, name)
            if v < 0 or not math.isfinite(v):
                raise ValueError(f"priority weight {name} must be a finite number >= 0, "
                                 f"not {v}")


@dataclass(frozen=True, slots=True)
class Factors:
    """A job's priority factors (each 0..1) and their weighted sum, as ``rota priority``
    shows them."""

    priority: float
    age: float
    size: float
    fair_share: float
    total: float


def job_factors(*, priority: int, age_s: float, gpus_milli: int, largest_milli: int,
                fair_share: float, weights: Weights) -> Factors:
    """The factors of one waiting job. ``priority``: its explicit one (lower runs first,
    over PRIORITY_RANGE); ``largest_milli``: the most GPUs a job can ask for here (the
    size factor's scale); ``fair_share``: its account's factor (``fair_shares``)."""
    low, high = PRIORITY_RANGE
    p = (high - min(max(priority, low), high)) / (high - low)
    age = min(1.0, max(0.0, age_s) / weights.max_age_s) if weights.max_age_s else 1.0
    size = min(1.0, gpus_milli / largest_milli) if largest_milli > 0 else 0.0
    if weights.favor_small:
        size = 1.0 - size
    fs = min(1.0, max(0.0, fair_share))
    total = (weights.priority * p + weights.age * age + weights.size * size
             + weights.fair_share * fs)
    return Factors(p, age, size, fs, total)


def combined(user: FairShare | None, project: FairShare | None) -> float:
    """A job's fair-share factor from its user's and its project's: their geometric mean
    (either alone when the job has no project), so a user who is under their share in a
    project over its share, or the reverse, lands between the two."""
    got = [f.factor for f in (user, project) if f is not None]
    if not got:
        return 1.0  # nobody has used anything yet
    return math.prod(got) ** (1 / len(got))


# --- usage from the attempts, and the queue in fair-share order ----------------------------
#: attempts older than this many half-lives are not read: they count < 0.1 % of new ones
HORIZON_HALF_LIVES = 10


def decayed_gpu_seconds(gpus: float, started: float, ended: float, now: float,
                        half_life: float = DEFAULT_HALF_LIFE_S) -> float:
    """GPU-seconds of a run over [started, ended], each second decayed by its own age at
    ``now``: the integral of ``gpus * 0.5 ** ((now - t) / half_life)``, so a long running
    job is charged as it goes, not all at its end."""
    if half_life <= 0:
        raise ValueError(f"the half-life must be > 0 seconds, not {half_life}")
    end = min(ended, now)
    if end <= started or gpus <= 0:
        return 0.0
    k = math.log(2) / half_life
    return gpus * (math.exp(-k * (now - end)) - math.exp(-k * (now - started))) / k


_SEQ = attrgetter("seq")
_SUBMITTED = attrgetter("submitted")
#: a job's group: within it the weighted total differs only by the age term
group_of = attrgetter("user", "project", "priority", "gpus_milli")


class Run(Protocol):
    """What decayed usage reads of an attempt (rota.core.usage.UsageRecord has it)."""

    @property
    def user(self) -> str: ...
    @property
    def project(self) -> str | None: ...
    @property
    def gpus(self) -> float: ...
    @property
    def started_at(self) -> float: ...
    @property
    def ended_at(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class Accounts:
    """Every user's and project's decayed GPU-seconds: what ``Standing`` is built from."""

    users: dict[str, float]
    projects: dict[str, float]


def account_usage(runs: Iterable[Run], now: float,
                  half_life: float = DEFAULT_HALF_LIFE_S) -> Accounts:
    """Decayed GPU-seconds by user and by project; a running attempt counts up to now."""
    users: dict[str, float] = {}
    projects: dict[str, float] = {}
    for r in runs:
        end = r.ended_at if r.ended_at is not None else now
        used = decayed_gpu_seconds(r.gpus, r.started_at, end, now, half_life)
        if not used:
            continue
        users[r.user] = users.get(r.user, 0.0) + used
        if r.project:
            projects[r.project] = projects.get(r.project, 0.0) + used
    return Accounts(users, projects)


def _plus(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) + v
    return out


class EndedUsage:
    """The decayed GPU-seconds of ended runs by user and project, brought up to date as time
    passes (multiplied by the decay since the last time), so a caller adds each run once
    as it ends rather than summing every run again. The daemon (rota.server.policy.fair_order)
    feeds it the attempts read from its store, the simulator its trace's ended jobs."""

    def __init__(self, half_life: float = DEFAULT_HALF_LIFE_S) -> None:
        decay(0.0, half_life)  # refuses a half-life <= 0
        self.half_life = half_life
        self.users: dict[str, float] = {}
        self.projects: dict[str, float] = {}
        self.at: float | None = None  # the time the sums are decayed to

    def advance(self, now: float) -> None:
        """Decay the sums to ``now`` (never back in time)."""
        if self.at is not None and now > self.at:
            k = decay(now - self.at, self.half_life)
            for table in (self.users, self.projects):
                for name in table:
                    table[name] *= k
        if self.at is None or now > self.at:
            self.at = now

    def add(self, run: Run, now: float) -> None:
        """One ended run, its seconds decayed by their age at ``now`` (as advanced to)."""
        assert run.ended_at is not None
        used = decayed_gpu_seconds(run.gpus, run.started_at, run.ended_at, now,
                                   self.half_life)
        if not used:
            return
        self.users[run.user] = self.users.get(run.user, 0.0) + used
        if run.project:
            self.projects[run.project] = self.projects.get(run.project, 0.0) + used

    def with_running(self, running: Iterable[Run], now: float) -> Accounts:
        """These sums plus the running runs' use up to ``now``: what ``Standing`` takes."""
        live = account_usage(running, now, self.half_life)
        return Accounts(_plus(self.users, live.users), _plus(self.projects, live.projects))


@dataclass(frozen=True, slots=True)
class Standing:
    """Every user's and project's fair share (``fair_shares``), as the queue is ordered by
    it. A user or project with no usage and no share set is not in them: factor 1."""

    users: Mapping[str, FairShare]
    projects: Mapping[str, FairShare]

    @classmethod
    def of(cls, accounts: Accounts, user_shares: Mapping[str, float],
           project_shares: Mapping[str, float]) -> Standing:
        return cls(fair_shares(user_shares, accounts.users),
                   fair_shares(project_shares, accounts.projects))

    def factor(self, user: str, project: str | None) -> float:
        """A job's fair-share factor: its user's and project's combined (``combined``)."""
        return combined(self.users.get(user),
                        self.projects.get(project) if project else None)


def priority_of(job: PendingJob, standing: Standing, weights: Weights, now: float,
                largest_milli: int) -> Factors:
    """One waiting job's factors and their weighted sum, as ``rota priority`` shows them."""
    return job_factors(priority=job.priority, age_s=now - job.submitted if job.submitted
                       else 0.0, gpus_milli=job.gpus_milli, largest_milli=largest_milli,
                       fair_share=standing.factor(job.user, job.project), weights=weights)


def order_queue(pending: Iterable[PendingJob], standing: Standing, weights: Weights,
                now: float, largest_milli: int | None = None) -> list[PendingJob]:
    """The queue in multifactor order: the highest weighted total first, then submission
    order (seq). ``largest_milli``: the size factor's scale (default: the largest job's).
    The daemon and the simulator both order by exactly this.

    Why it is cheap: a job's total is its group's constant (explicit priority, size and fair
    share depend only on (user, project, priority, gpus_milli)) plus its age term, so the
    factors are worked out once per group (hundreds) and a job costs one dict look-up and
    one age term. Jobs are put in seq order first (a near-linear sort of ints: the queue
    mostly comes in seq order) and then sorted stably by the negated total alone, a float
    key read in C: equal totals keep seq order, which is the (-total, seq) order.
    """
    jobs = sorted(pending, key=_SEQ)
    if not jobs:
        return jobs
    scale = largest_milli if largest_milli is not None else \
        max(j.gpus_milli for j in jobs)
    groups = list(map(group_of, jobs))
    keys = set(groups)
    # the constant's three parts each over its own few values, then one sum per group
    pt = {p: priority_term(p, weights) for p in {g[2] for g in keys}}
    ft = {o: weights.fair_share * min(1.0, max(0.0, standing.factor(*o)))
          for o in {(g[0], g[1]) for g in keys}}
    st = {m: size_term(m, weights, scale) for m in {g[3] for g in keys}}
    consts = {g: pt[g[2]] + ft[g[0], g[1]] + st[g[3]] for g in keys}
    wa, max_age = weights.age, weights.max_age_s
    if not max_age:  # every dated job is fully aged: only the group constant differs
        neg = [-(consts[g] + (wa if t else 0.0))
               for g, t in zip(groups, map(_SUBMITTED, jobs), strict=True)]
    else:
        # age_term inlined (one comprehension, no call per job); the same arithmetic
        neg = [-(consts[g] + (0.0 if not t else wa * (1.0 if x >= 1.0 else x if x > 0.0
                                                      else 0.0)))
               for g, t in zip(groups, map(_SUBMITTED, jobs), strict=True)
               for x in ((now - t) / max_age,)]
    if len(jobs) == 1:
        return jobs
    # itemgetter picks them all in C (a list comprehension was a fifth of the time)
    return list(itemgetter(*sorted(range(len(jobs)), key=neg.__getitem__))(jobs))


def group_constant(group: tuple[str, str | None, int, int], standing: Standing,
                   weights: Weights, scale: int) -> float:
    """The part of a job's weighted total that is the same for every job of its group
    (user, project, priority, gpus_milli): all but the age term (order_queue's sum)."""
    user, project, priority, milli = group
    fs = weights.fair_share * min(1.0, max(0.0, standing.factor(user, project)))
    return priority_term(priority, weights) + fs + size_term(milli, weights, scale)


def priority_term(priority: int, weights: Weights) -> float:
    """The weighted explicit-priority factor (lower priority numbers count more)."""
    low, high = PRIORITY_RANGE
    return weights.priority * ((high - min(max(priority, low), high)) / (high - low))


def size_term(milli: int, weights: Weights, scale: int) -> float:
    """The weighted size factor of a job asking for ``milli`` GPUs (``scale``: the most)."""
    if weights.size <= 0 or scale <= 0:
        return 0.0
    size = min(1.0, milli / scale)
    return weights.size * ((1.0 - size) if weights.favor_small else size)


def age_term(submitted: float, now: float, weights: Weights) -> float:
    """The weighted age factor of a job submitted at ``submitted`` (0: unknown, no age)."""
    if not submitted:
        return 0.0
    if not weights.max_age_s:
        return weights.age
    return weights.age * min(1.0, max(0.0, now - submitted) / weights.max_age_s)


def passed_by(job: PendingJob, ahead: Iterable[PendingJob],
              standing: Standing) -> PendingJob | None:
    """The earliest-submitted job of another owner, submitted after ``job`` yet ahead of it
    (waiting before it in the order, or running), because its owner's fair-share factor is
    higher: what ``rota why`` names. None when fair share is not why ``job`` waits."""
    mine = standing.factor(job.user, job.project)
    best: PendingJob | None = None
    for other in ahead:
        if (other.seq > job.seq and other.user != job.user
                and (best is None or other.seq < best.seq)
                and standing.factor(other.user, other.project) > mine):
            best = other
    return best
