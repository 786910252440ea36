"""Jobs and their attempts: submitting, reading, moving them through their states.

A part of ``rota.store.repo.Store``: its methods run in the store's unit of work
(``StoreBase.transaction``)."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any

from sqlalchemy import (
    func,
    insert,
    select,
    text,
)
from sqlalchemy.exc import IntegrityError

from rota.core.job_names import command_name
from rota.core.lifecycle import TERMINAL, JobState, check_transition
from rota.core.snapshot import PendingJob, WorkspacelessJob
from rota.core.spec import JobSpec
from rota.errors import NotFound, StoreError
from rota.pools import LOCAL as LOCAL_POOL
from rota.store.base import (
    _ADD_ATTEMPTS,
    _ADD_ATTEMPTS_ANY_ORDER,
    _ADD_JOBS,
    _ADD_JOBS_ANY_ORDER,
    _GET_JOB,
    _JOB_ATTEMPTS,
    _LAUNCH_INFO,
    _LAUNCH_INFO_NO_SPEC,
    _MAX_ID,
    _RETRYABLE_HASH_STATES,
    _SET_ATTEMPT,
    _SET_JOB,
    _SET_PROGRESS,
    AttemptRecord,
    JobRecord,
    LaunchInfo,
    Queued,
    StoreBase,
    _attempts,
    _collector_paused,
    _id_list,
    _id_set,
    _id_tuple,
    _job_datasets,
    _jobs,
    _like_escaped,
    _list_statement,
    _queue_sql,
)


class JobsRepo(StoreBase):
    # --- jobs ----------------------------------------------------------------------------
    def add_jobs(self, specs: Sequence[JobSpec], *, user: str, source: str, now: float,
                 idempotency_key: str | None = None) -> list[JobRecord]:
        """Insert jobs as PENDING (or HELD) with a 'submitted' event, in one transaction."""
        params: list[dict[str, Any]] = []
        for n, spec in enumerate(specs):
            key = idempotency_key if n == 0 or idempotency_key is None \
                else f"{idempotency_key}#{n}"
            state = JobState.HELD if spec.hold else JobState.PENDING
            params.append({
                "name": spec.name, "user": user, "state": state.value,
                "spec": spec.model_dump(mode="json"), "priority": spec.priority,
                "gpus": spec.gpus, "gpu_mem": spec.gpu_mem, "content_hash": spec.content_hash(),
                "idempotency_key": key, "source": source, "created_at": now, "updated_at": now,
                "started_at": None, "ended_at": None, "attempts": 0, "failures": 0,
                "not_before": None, "exit_code": None, "end_reason": None,
                "estimate_note": None, "project": spec.project,
                "tags": f",{','.join(spec.tags)}," if spec.tags else "",
                "allowed_gpus": _id_list(spec.allowed_gpus), "after_ids": _id_list(spec.after),
                "mlflow": spec.mlflow, "time_limit": spec.time_limit,
                "workspace": None if spec.workspace else False,
                # what the name filter matches a job given no name by (JobRow.command_text)
                "command_text": command_name(spec.command),
                "pool": spec.pool if spec.pool != LOCAL_POOL else None})
        message = f"submitted by {user or 'unknown'} via {source}"
        try:
            with self.transaction() as c:
                if self._server:
                    rows = c.execute(_ADD_JOBS, params).all()
                else:
                    rows = sorted(c.execute(_ADD_JOBS_ANY_ORDER, params).all(),
                                  key=lambda r: int(r.id))
                    if any((r.name, r.content_hash) != (p["name"], p["content_hash"])
                           for r, p in zip(rows, params, strict=True)):
                        raise StoreError("the database gave the new jobs' ids out of order")
                for r in rows:
                    self._event(r.id, now, "submitted", message, None, r.state)
                uses = [{"job_id": r.id, "ref": ref}
                        for r, spec in zip(rows, specs, strict=True) for ref in spec.datasets]
                if uses:
                    c.execute(insert(_job_datasets), uses)
        except StoreError as e:
            cause = e.__cause__
            if isinstance(cause, IntegrityError):
                raise StoreError(f"could not store the job: {cause.orig}") from cause
            raise
        return list(rows)

    def job_by_idempotency_key(self, key: str) -> JobRecord | None:
        with self._reading() as c:
            return c.execute(select(_jobs).where(_jobs.c.idempotency_key == key)).first()

    def jobs_by_idempotency_key(self, key: str) -> list[JobRecord]:
        """The jobs one submit with ``key`` made, in its order (``add_jobs``: the first
        job has the key, the n-th after it ``KEY#n``); none when no submit had it."""
        first = self.job_by_idempotency_key(key)
        if first is None:
            return []
        with self._reading() as c:
            rest = c.execute(select(_jobs).where(
                _jobs.c.idempotency_key.startswith(f"{key}#", autoescape=True))).all()
        rank = {f"{key}#{n}": n for n in range(1, len(rest) + 1)}
        return [first, *sorted((r for r in rest if r.idempotency_key in rank),
                               key=lambda r: rank[r.idempotency_key])]

    def live_hashes(self, hashes: Iterable[str]) -> set[str]:
        """Hashes that already have a job that did not fail (failed jobs may be queued again)."""
        hs = list(set(hashes))
        found: set[str] = set()
        j = _jobs.c
        with self._reading() as c:
            for i in range(0, len(hs), 500):
                q = select(j.content_hash).where(j.content_hash.in_(hs[i:i + 500]),
                                                 j.state.not_in(_RETRYABLE_HASH_STATES))
                found.update(c.scalars(q))
        return found

    def jobs_from_file(self, path: str, hashes: Iterable[str]) -> dict[str, tuple[int, str]]:
        """For each of ``hashes`` that a line of the jobs file ``path`` already ran as (its
        source is ``path:LINE``), whatever became of it: the last such job and its state."""
        hs = list(set(hashes))
        found: dict[str, tuple[int, str]] = {}
        j = _jobs.c
        from_file = j.source.startswith(f"{path}:", autoescape=True)
        with self._reading() as c:
            for i in range(0, len(hs), 500):
                q = (select(j.content_hash, j.id, j.state)
                     .where(j.content_hash.in_(hs[i:i + 500]), from_file).order_by(j.id))
                for h, job_id, state in c.execute(q):
                    found[h] = (job_id, state)
        return found

    def get_job(self, job_id: int) -> JobRecord:
        row = None
        if 0 < job_id <= _MAX_ID:  # no row has any other id (and the driver refuses some)
            with self._reading() as c:
                row = c.execute(_GET_JOB, {"id_": job_id}).first()
        if row is None:
            raise NotFound(f"no job {job_id}")
        return row

    def launch_info(self, ids: Iterable[int], *,
                    spec_known: Container[int] = ()) -> dict[int, LaunchInfo]:
        """What starting these jobs needs from the store, for those still pending (a job
        left out is not to be started); the spec is not read for those in ``spec_known``
        (decoding it was ~4 % of a trivial job's daemon CPU)."""
        idl = list(ids)
        parts = ((_LAUNCH_INFO, [i for i in idl if i not in spec_known]),
                 (_LAUNCH_INFO_NO_SPEC, [i for i in idl if i in spec_known]))
        with self.transaction() as c:
            return {r.id: LaunchInfo(r.spec, r.attempts, r.failures, r.updated_at, r.created_at,
                                     r.progress, r.user)
                    for statement, some in parts
                    for i in range(0, len(some), 500)
                    for r in c.execute(statement, {"ids": some[i:i + 500]})}

    def jobs(self, ids: Iterable[int]) -> dict[int, JobRecord]:
        idl = list(ids)
        out: dict[int, JobRecord] = {}
        with self._reading() as c:
            for i in range(0, len(idl), 500):
                out.update((r.id, r) for r in c.execute(
                    select(_jobs).where(_jobs.c.id.in_(idl[i:i + 500]))))
        return out

    def list_jobs(self, *, states: Sequence[str] | None = None, user: str | None = None,
                  name: str | None = None, project: str | None = None, tag: str | None = None,
                  limit: int = 200, before_id: int | None = None) -> list[JobRecord]:
        """Newest first; ``before_id`` is the cursor (the last id of the previous page)."""
        given = {"states": list(states) if states else None, "user": user or None,
                 "name": _like_escaped(name) if name else None, "project": project or None,
                 "tag": _like_escaped(f",{tag},") if tag else None, "before_id": before_id}
        given = {k: v for k, v in given.items() if v is not None}
        with self._reading() as c:  # .all(): the rows in one fetch, not one call per row
            return list(c.execute(_list_statement(frozenset(given)),
                                  {**given, "limit": limit}).all())

    def active_jobs(self, *, waiting: bool = True) -> list[JobRecord]:
        """Every job that is not finished, oldest first: what a restarted daemon takes up.
        ``waiting=False`` leaves out pending and held jobs (``queued`` reads those)."""
        waits = (JobState.PENDING, JobState.HELD)
        states = [s.value for s in JobState if s not in TERMINAL and (waiting or s not in waits)]
        with self._reading() as c:  # IN, not NOT IN: ix_jobs_state finds the few that run
            return list(c.execute(select(_jobs).where(_jobs.c.state.in_(states))
                                  .order_by(_jobs.c.id)).all())

    def queued(self, *, mlflow_default: bool, chunk: int = 50_000,
               predicted: Callable[[list[str]], dict[str, float | None]] | None = None,
               ) -> Queued:
        """The waiting jobs as a restarted daemon takes them up: every pending one as a
        PendingJob, in queue order (:meth:`pending_page` after page); the ids of held
        ones; and, apart, the ids of the pending and held jobs that want an MLflow run
        (:meth:`waiting_apart`)."""
        held, tracked = self.waiting_apart(mlflow_default=mlflow_default)
        out = Queued([], held, tracked)
        after: tuple[int, int] | None = None
        while page := self.pending_page(after, chunk, mlflow_default=mlflow_default,
                                        predicted=predicted):
            out.pending.extend(page)
            after = (page[-1].priority, page[-1].id)
        return out

    def waiting_apart(self, *, mlflow_default: bool) -> tuple[list[int], list[int]]:
        """The ids of the held jobs that want no MLflow run, and of the pending and held
        ones that want one (``mlflow_default``: when the spec does not say), whose start
        waits for it; both in id order."""
        j = _jobs.c
        held: list[int] = []
        tracked: list[int] = []
        with self._reading() as c:
            tracked.extend(c.scalars(text(_queue_sql(c.dialect, mlflow_default,
                                                     tracked=True))))
            for job_id, mlflow in c.execute(select(j.id, j.mlflow).where(
                    j.state == JobState.HELD.value).order_by(j.id)):
                wants = mlflow if mlflow is not None else mlflow_default
                (tracked if wants else held).append(job_id)
        tracked.sort()
        return held, tracked

    def pending_page(self, after: tuple[int, int] | None, limit: int, *,
                     mlflow_default: bool,
                     predicted: Callable[[list[str]], dict[str, float | None]] | None = None,
                     ) -> list[PendingJob]:
        """Up to ``limit`` pending jobs that want no MLflow run, in queue order, after the
        job at ``(priority, id)``, as PendingJobs read from ix_jobs_queue alone (no spec: a
        queue may be a million jobs long). A job's expected run time is its time limit,
        else what ``predicted`` says of its name (asked once for the page's names of jobs
        without a time limit: rota.server.jobs.run_times), else unknown.

        The rows are read through the driver's own cursor: SQLAlchemy's Row cost more per
        row than the database's read of it (4.8 s for a million, against 1.6 s)."""
        # one object per owner, project and GPU share, not one per row (the driver makes a
        # new one for each: 20 MB more per 200,000 jobs for the strings, 32 MB per million
        # for the shares); a page's jobs submitted together share their submit time too
        one = self._strings.setdefault
        times: dict[float, float] = {}
        same_time = times.setdefault
        with self._reading() as c, _collector_paused():
            cursor = c.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                cursor.execute(_queue_sql(c.dialect, mlflow_default, tracked=False,
                                          after=after, limit=limit))
                rows = cursor.fetchall()
            finally:
                cursor.close()
            names = [r[12] for r in rows if r[11] is None and r[12]]
            guess = (predicted(names) if predicted is not None and names else {}).get
            return [
                (PendingJob if w is None else WorkspacelessJob)(
                    i, p, i, one(g, g), m, None, (), nb, pl, one(u, u), one(pr, pr),
                    same_time(t, t), tl if tl is not None else guess(nm))
                if a is None and f is None
                else (PendingJob if w is None else WorkspacelessJob)(
                    i, p, i, one(g, g), m, _id_set(a), _id_tuple(f), nb, pl, one(u, u),
                    one(pr, pr), same_time(t, t), tl if tl is not None else guess(nm))
                for i, p, g, m, a, f, nb, pl, u, pr, t, tl, nm, w in rows]

    def count_in_state(self, state: str) -> int:
        """How many jobs are in ``state`` (through ix_jobs_state: cheap for a rare state,
        where count_by_state reads every row)."""
        with self._reading() as c:
            return int(c.scalar(select(func.count()).select_from(_jobs)
                                .where(_jobs.c.state == state)) or 0)

    def count_by_state(self) -> dict[str, int]:
        with self._reading() as c:
            return {st: n for st, n in c.execute(
                select(_jobs.c.state, func.count()).group_by(_jobs.c.state))}

    def transition(self, job_id: int, src: JobState, dst: JobState, *, now: float,
                   message: str | None = None, kind: str | None = None,
                   **fields: Any) -> None:
        """Move a job from src to dst (checked against the table and the stored state)."""
        check_transition(job_id, src, dst)
        params = {"id_": job_id, "from_": src.value, "state": dst.value, "updated_at": now,
                  **fields}
        if self._conn is not None:  # in a batch: checked when it is written
            self._hold("job", job_id, _SET_JOB, params)
            self._event(job_id, now, kind or dst.value, message, src.value, dst.value)
            return
        with self.transaction() as c:
            res = c.execute(_SET_JOB, params)
            if res.rowcount != 1:
                current = c.scalar(select(_jobs.c.state).where(_jobs.c.id == job_id))
                if current is None:
                    raise NotFound(f"no job {job_id}")
                check_transition(job_id, JobState(current), dst)
                raise StoreError(f"job {job_id} is {current}, expected {src.value}")
            self._event(job_id, now, kind or dst.value, message, src.value, dst.value)

    def update_job(self, job_id: int, **fields: Any) -> None:
        self._update("job", _SET_PROGRESS, {"id_": job_id, **fields})

    def set_tracking(self, job_id: int, tracking: dict[str, Any]) -> None:
        """The job's runs in experiment trackers (rota.server.tracking.trackers)."""
        self.update_job(job_id, tracking=tracking)

    # --- attempts ------------------------------------------------------------------------
    def start_attempts(self, starts: Sequence[tuple[int, dict[str, Any], str]], *,
                       now: float) -> list[int]:
        """Write-ahead launch intents, (job id, attempt, event message) each: PENDING ->
        STARTING and the attempt row; the attempts' ids back, in order. All or none: a job
        that is not pending fails the batch (``launch_info`` in the same transaction leaves
        such jobs out)."""
        for job_id, _, _ in starts:
            check_transition(job_id, JobState.PENDING, JobState.STARTING)
        if not starts:
            return []
        with self.transaction() as c:
            res = c.execute(_SET_JOB, [{"id_": job_id, "from_": JobState.PENDING.value,
                                        "state": JobState.STARTING.value, "updated_at": now,
                                        "attempts": attempt["number"], "not_before": None}
                                       for job_id, attempt, _ in starts])
            if res.rowcount != len(starts):
                raise StoreError(f"{len(starts) - res.rowcount} of jobs "
                                 f"{sorted(s[0] for s in starts)} are no longer pending")
            values = [{**attempt, "job_id": job_id} for job_id, attempt, _ in starts]
            if self._server:
                ids: list[int] = list(c.execute(_ADD_ATTEMPTS, values).scalars())
            else:  # one statement (see _ADD_ATTEMPTS_ANY_ORDER); a job starts once a batch
                made = {job_id: attempt_id for attempt_id, job_id
                        in c.execute(_ADD_ATTEMPTS_ANY_ORDER, values)}
                ids = [made[job_id] for job_id, _, _ in starts]
            for job_id, _, message in starts:
                self._event(job_id, now, "starting", message, JobState.PENDING.value,
                            JobState.STARTING.value)
        return ids

    def update_attempt(self, attempt_id: int, **fields: Any) -> None:
        self._update("attempt", _SET_ATTEMPT, {"id_": attempt_id, **fields})

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        with self._reading() as c:
            return list(c.execute(_JOB_ATTEMPTS, {"job_id": job_id}).all())

    def job_with_attempts(self, job_id: int) -> tuple[JobRecord, list[AttemptRecord]]:
        """A job and its attempts, oldest first, read on one connection."""
        with self._reading() as c:
            row = c.execute(_GET_JOB, {"id_": job_id}).first()
            if row is None:
                raise NotFound(f"no job {job_id}")
            return row, list(c.execute(_JOB_ATTEMPTS, {"job_id": job_id}).all())

    def last_attempts(self, job_ids: Iterable[int]) -> dict[int, AttemptRecord]:
        idl = list(job_ids)
        out: dict[int, AttemptRecord] = {}
        a = _attempts.c
        with self._reading() as c:
            for i in range(0, len(idl), 500):
                for r in c.execute(select(_attempts).where(a.job_id.in_(idl[i:i + 500]))
                                   .order_by(a.number)):
                    out[r.job_id] = r
        return out
