"""The store: every read and write of durable state. Only the daemon writes through it."""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    Connection,
    Dialect,
    Engine,
    Integer,
    Row,
    Select,
    Table,
    Update,
    and_,
    bindparam,
    delete,
    func,
    insert,
    null,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from rota.core.lifecycle import TERMINAL, JobState, check_transition
from rota.core.quota import Quota
from rota.core.snapshot import MILLI, PendingJob, WorkspacelessJob
from rota.core.spec import JobSpec
from rota.core.usage import UsageRecord
from rota.errors import Conflict, NotFound, StoreError
from rota.pools import LOCAL as LOCAL_POOL
from rota.store.db import make_engine, migrate
from rota.store.failures import store_error
from rota.store.tables import (
    AlertRow,
    ArtifactRow,
    AttemptRow,
    DaemonSettingRow,
    DatasetRow,
    EvalScheduleRow,
    EventRow,
    GpuSettingRow,
    JobDatasetRow,
    JobRow,
    MetricRow,
    PipelineRoundRow,
    PipelineRow,
    QuotaRow,
    SecretRow,
    ShareLinkRow,
    ShareRow,
    TokenRow,
    UserRow,
    WorkspaceQuotaRow,
)

log = logging.getLogger(__name__)

SHARE_KINDS = ("user", "project")
_RETRYABLE_HASH_STATES = [s.value for s in (JobState.FAILED, JobState.CANCELLED,
                                            JobState.TIMEOUT)]
_jobs = cast(Table, JobRow.__table__)
_attempts = cast(Table, AttemptRow.__table__)
_events = cast(Table, EventRow.__table__)
_metrics = cast(Table, MetricRow.__table__)
_schedules = cast(Table, EvalScheduleRow.__table__)
_pipelines = cast(Table, PipelineRow.__table__)
_rounds = cast(Table, PipelineRoundRow.__table__)
_quotas = cast(Table, QuotaRow.__table__)

_alerts = cast(Table, AlertRow.__table__)
_artifacts = cast(Table, ArtifactRow.__table__)
_links = cast(Table, ShareLinkRow.__table__)
_ws_quotas = cast(Table, WorkspaceQuotaRow.__table__)
_datasets = cast(Table, DatasetRow.__table__)
_job_datasets = cast(Table, JobDatasetRow.__table__)

# The hot-path statements, built once: building a statement costs several times what
# executing it does. Without .values(), the SET clause comes from the parameters' keys.
_SET_JOB = update(_jobs).where(_jobs.c.id == bindparam("id_"),
                               _jobs.c.state == bindparam("from_"))
_SET_ATTEMPT = update(_attempts).where(_attempts.c.id == bindparam("id_"))
_ADD_JOBS = insert(_jobs).returning(*_jobs.c, sort_by_parameter_order=True)
_ADD_ATTEMPTS = insert(_attempts).returning(_attempts.c.id, sort_by_parameter_order=True)
# SQLAlchemy inserts one row a statement on SQLite when asked for RETURNING in parameter
# order (SQLite does not promise it): these insert all rows in one statement, and the
# caller puts the rows back in order (ids are given in VALUES order; checked)
_ADD_JOBS_ANY_ORDER = insert(_jobs).returning(*_jobs.c)
_ADD_ATTEMPTS_ANY_ORDER = insert(_attempts).returning(_attempts.c.id, _attempts.c.job_id)
_ADD_EVENTS = insert(_events)
_ADD_METRICS = insert(_metrics)
_SET_PROGRESS = update(_jobs).where(_jobs.c.id == bindparam("id_"))
_GET_JOB = select(_jobs).where(_jobs.c.id == bindparam("id_"))
_LAUNCH_INFO = select(_jobs.c.id, _jobs.c.spec, _jobs.c.attempts, _jobs.c.failures,
                      _jobs.c.updated_at, _jobs.c.created_at, _jobs.c.progress,
                      _jobs.c.user).where(_jobs.c.id.in_(bindparam("ids", expanding=True)),
                                          _jobs.c.state == JobState.PENDING.value)
_LAUNCH_INFO_NO_SPEC = select(_jobs.c.id, null().label("spec"), _jobs.c.attempts,
                              _jobs.c.failures, _jobs.c.updated_at, _jobs.c.created_at,
                              _jobs.c.progress, _jobs.c.user).where(
    _jobs.c.id.in_(bindparam("ids", expanding=True)), _jobs.c.state == JobState.PENDING.value)
_JOB_ATTEMPTS = (select(_attempts).where(_attempts.c.job_id == bindparam("job_id"))
                 .order_by(_attempts.c.number))
_JOB_EVENTS = (select(_events).where(_events.c.job_id == bindparam("job_id"))
               .order_by(_events.c.id))


def _like_escaped(text: str) -> str:
    """``text`` matched literally inside a LIKE pattern whose escape character is '/'."""
    return text.replace("/", "//").replace("%", "/%").replace("_", "/_")


@functools.cache
def _list_statement(filters: frozenset[str]) -> Select[Any]:
    """The job list statement for one set of filters, their values bound: built once per
    set (a list is the API's most frequent big read)."""
    j = _jobs.c
    q = select(_jobs).order_by(j.id.desc()).limit(bindparam("limit"))
    if "states" in filters:
        q = q.where(j.state.in_(bindparam("states", expanding=True)))
    if "user" in filters:
        q = q.where(j.user == bindparam("user"))
    if "name" in filters:
        q = q.where(j.name.contains(bindparam("name"), escape="/"))
    if "project" in filters:
        q = q.where(j.project == bindparam("project"))
    if "tag" in filters:
        q = q.where(j.tags.contains(bindparam("tag"), escape="/"))
    if "before_id" in filters:
        q = q.where(j.id < bindparam("before_id"))
    return q

@functools.cache
def _queue_sql(dialect: Dialect, mlflow_default: bool, *, tracked: bool,
               after: tuple[int, int] | None = None, limit: int | None = None) -> str:
    """Pending jobs in queue order, (priority, id), from ix_jobs_queue alone: those that
    want no MLflow run as (id, priority, gpus in thousandths, gpu_mem, allowed GPUs,
    after ids, not_before, pool, user, project, submitted, time limit, name, workspace:
    false or NULL), ``limit`` of
    them after the job at ``after`` (priority, id); or, ``tracked``, the ids of those that
    want one."""
    j = _jobs.c
    wants = or_(j.mlflow.is_(True), j.mlflow.is_(None)) if mlflow_default \
        else j.mlflow.is_(True)
    q = (select(j.id, j.priority, sql_cast(func.round(j.gpus * MILLI), Integer), j.gpu_mem,
                j.allowed_gpus, j.after_ids, j.not_before, j.pool, j.user, j.project,
                j.created_at, j.time_limit, j.name, j.workspace)
         if not tracked else select(j.id))
    q = (q.where(j.state == JobState.PENDING.value, wants if tracked else ~wants)
         .order_by(j.priority, j.id))
    if after is not None:  # a row-value range: the index's own order, where it left off
        q = q.where(tuple_(j.priority, j.id) > tuple_(int(after[0]), int(after[1])))
    if limit is not None:
        q = q.limit(int(limit))
    sql = str(q.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
    if dialect.name == "sqlite":  # its planner, with no statistics, prefers ix_jobs_state
        # and reads every row (SQLAlchemy renders no table hint for SQLite)
        sql = sql.replace("FROM jobs", "FROM jobs INDEXED BY ix_jobs_queue", 1)
    return sql


_MAX_ID = 2**63 - 1  # what every database's integer columns hold


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a million tuples are made: they hold no
    cycles, and the collections their allocations set off took longer than making them
    (a million pending jobs read in 6.5 s with it, 2.8 s without)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _id_list(ids: Sequence[int] | None) -> str | None:
    return ",".join(map(str, ids)) if ids else None


def _id_tuple(text: Any) -> tuple[int, ...]:
    return tuple(map(int, text.split(","))) if text else ()


def _id_set(text: Any) -> frozenset[int] | None:
    return frozenset(_id_tuple(text)) if text else None


class Queued(NamedTuple):
    """The waiting jobs a restarted daemon takes up (see Store.queued)."""
    pending: list[PendingJob]
    held: list[int]
    tracked: list[int]  # pending or held, and wanting an MLflow run


#: An evaluation schedule as read (EvalScheduleRow's columns)
ScheduleRecord = Row[Any]
PipelineRecord = Row[Any]
RoundRecord = Row[Any]
AlertRecord = Row[Any]
ArtifactRecord = Row[Any]
ShareLinkRecord = Row[Any]
DatasetRecord = Row[Any]
#: A job, attempt or event as read: a row whose attributes are the table's columns (the
#: same names as JobRow's, AttemptRow's, EventRow's). Reads of these tables are Core
#: statements: building ORM objects cost more than the API request around them.
JobRecord = Row[Any]
AttemptRecord = Row[Any]
EventRecord = Row[Any]
MetricRecord = Row[Any]


class LaunchInfo(NamedTuple):
    spec: dict[str, Any] | None  # None: not read (the caller has it)
    attempts: int
    failures: int
    updated_at: float  # when it last became pending: its queue wait starts there
    created_at: float
    progress: dict[str, Any] | None  # the last attempt's (its reported checkpoint)
    user: str


class _Write(NamedTuple):
    """A row update held until its batch commits (see Store.transaction)."""
    statement: Update
    params: dict[str, Any]


def _merged(prior: _Write, statement: Update, params: dict[str, Any]) -> _Write | None:
    """One update of a row that does what ``prior`` and then this one would (later values
    win), or None. A job's move (_SET_JOB, checked against the state it moves from) joins
    a move from the state ``prior`` moved it to, keeping the state checked first; a plain
    update (_SET_PROGRESS, _SET_ATTEMPT) joins one of its own statement or a move."""
    if statement is _SET_JOB:
        if prior.statement is _SET_PROGRESS:
            return _Write(_SET_JOB, {**prior.params, **params})
        if prior.statement is _SET_JOB and params["from_"] == prior.params["state"]:
            return _Write(_SET_JOB, {**prior.params, **params, "from_": prior.params["from_"]})
        return None
    if statement is _SET_PROGRESS and prior.statement is _SET_JOB:
        return _Write(_SET_JOB, {**prior.params, **params})
    if statement is prior.statement:
        return _Write(statement, {**prior.params, **params})
    return None


class Store:
    """Jobs, attempts and events through SQLAlchemy Core; users, tokens and settings
    (cold paths) through ORM sessions.

    Job reads and writes are on the daemon's hot paths (several writes per job, reads per
    API request), where the ORM's objects cost far more than SQLite does, so they are plain
    statements; writes join the ambient ``transaction()`` when the daemon opens one, so
    that a batch of exits or of starts is one commit rather than several per job.

    Inside such a batch, job and attempt updates and events are held and written at its
    end with one ``executemany`` per statement shape: a statement's overhead in SQLAlchemy
    is several times SQLite's own, so this is what a batch of N jobs saves, not the commit.
    Held updates are written before any read in the batch (reads see them) and before a
    second update of the same row (rows change in call order).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session = sessionmaker(engine, expire_on_commit=False)
        self._conn: Connection | None = None  # the open batch transaction, if any
        self._write_conn: Connection | None = None
        self._server = engine.dialect.name != "sqlite"  # a database server, not a file
        self._events: list[dict[str, Any]] = []  # written with one executemany at commit
        self._held: dict[tuple[str, int], _Write] = {}  # row updates of the open batch
        # what the open transaction's callers changed in memory ahead of its commit: undone
        # should it not commit, or completed once it has (see on_rollback, after_commit)
        self._undo: list[Callable[[], object]] = []
        self._after: list[Callable[[], None]] = []
        # the owner and project strings and GPU shares of queued jobs, one of each
        # (pending_page)
        self._strings: dict[Any, Any] = {}

    @classmethod
    def open(cls, url: str) -> Store:
        engine = make_engine(url)
        migrate(engine)
        return cls(engine)

    def close(self) -> None:
        self._drop_writer()
        self.engine.dispose()

    def session(self) -> Session:
        """A session for reads; inside a batch it sees the batch's uncommitted writes."""
        if self._conn is not None:
            self._flush_held()
            return Session(bind=self._conn, expire_on_commit=False)
        return self._session()

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A connection for Core reads; inside a batch, the batch's (it sees its writes)."""
        if self._conn is not None:
            self._flush_held()
            yield self._conn
            return
        try:
            with self.engine.connect() as c:
                yield c
        except SQLAlchemyError as e:
            raise store_error("could not read the database", e, self.engine.url) from e

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One commit for every write made inside; nested uses join the outer one (after
        the updates it holds, so that statements meet rows in call order)."""
        if self._conn is not None:
            self._flush_held()
            yield self._conn
            return
        committed = False
        try:
            try:
                conn = self._writer()
            except SQLAlchemyError as e:
                raise store_error("could not reach the database", e, self.engine.url) from e
            try:
                with conn.begin():
                    self._conn = conn
                    try:
                        yield conn
                        self._flush(conn)
                    finally:
                        self._conn = None
                        self._events.clear()
                        self._held.clear()
                committed = True
            except (SQLAlchemyError, StoreError) as e:
                if getattr(e, "connection_invalidated", False) or conn.invalidated:
                    self._drop_writer()  # the next transaction connects again
                if isinstance(e, StoreError):
                    raise
                raise store_error("could not write to the database", e, self.engine.url) from e
            finally:
                if self._server:
                    self._drop_writer()  # back to the pool
        finally:
            self._settle(committed)

    def on_rollback(self, undo: Callable[[], object]) -> None:
        """Inside a transaction: ``undo`` runs should it not commit, so that memory changed
        ahead of the commit goes back to what the store still holds (undos run newest
        first). Outside one a write has committed already: nothing to undo."""
        if self._conn is not None:
            self._undo.append(undo)

    def after_commit(self, then: Callable[[], None]) -> None:
        """``then`` runs once what was written so far is committed: at once outside a
        transaction, else after its commit (never, should it not commit)."""
        if self._conn is None:
            then()
        else:
            self._after.append(then)

    def _settle(self, committed: bool) -> None:
        undo, after, self._undo, self._after = self._undo, self._after, [], []
        for fn in after if committed else reversed(undo):
            try:
                fn()
            except Exception:  # one caller's hook must not stop the others'
                log.exception("after a transaction: %r failed", fn)

    def _writer(self) -> Connection:
        """The connection writes go through. SQLite's is kept open: a pool checkout and its
        reset per batch would cost more than the batch's statements. A server's is checked
        out per batch: the pool pings it first, as the server may have ended it meanwhile
        (a restart), and a write on it would fail."""
        if self._write_conn is None or self._write_conn.closed:
            self._write_conn = self.engine.connect()
        return self._write_conn

    def _drop_writer(self) -> None:
        if self._write_conn is not None:
            with suppress(SQLAlchemyError):
                self._write_conn.close()
            self._write_conn = None

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
        without a time limit: rota.server.run_times), else unknown.

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

    def gpu_hours(self, *, now: float) -> dict[str, dict[str, float]]:
        """GPU-hours of every attempt (running ones up to now), by user and by project."""
        j, a = _jobs.c, _attempts.c
        hours = j.gpus * (func.coalesce(a.ended_at, now) - a.started_at) / 3600.0
        out: dict[str, dict[str, float]] = {"by_user": {}, "by_project": {}}
        with self._reading() as c:
            for col, key in ((j.user, "by_user"), (j.project, "by_project")):
                q = select(col, func.sum(hours)).join(_attempts, a.job_id == j.id)
                out[key] = {str(k) if k is not None else "": round(float(v or 0), 6)
                            for k, v in c.execute(q.group_by(col))}
        return out

    def usage(self, since: float, until: float) -> list[UsageRecord]:
        """Every attempt that ran some time inside [since, until), running ones included
        (ended_at None), for accounting (rota.core.usage)."""
        a = _attempts.c
        return self._usage_rows(and_(a.started_at < until,
                                     or_(a.ended_at.is_(None), a.ended_at > since)))

    def usage_after(self, last_id: int, ids: Collection[int]) -> list[UsageRecord]:
        """The attempts stored after attempt ``last_id`` and those of ``ids`` (read again:
        they were running), for a sum kept up to date (rota.server.fair_order)."""
        a = _attempts.c
        return self._usage_rows(or_(a.id > last_id, a.id.in_(list(ids))) if ids
                                else a.id > last_id)

    def job_usage(self, job_id: int) -> list[UsageRecord]:
        """One job's attempts, for accounting (its cost, on its card)."""
        return self._usage_rows(_attempts.c.job_id == job_id)

    def _usage_rows(self, where: Any) -> list[UsageRecord]:
        j, a = _jobs.c, _attempts.c
        q = (select(a.job_id, a.number, j.user, j.project, j.pool, a.backend, j.gpus,
                    a.started_at, a.ended_at, a.tier, a.price, a.idle_seconds, a.gpu_type,
                    a.id)
             .join(_jobs, a.job_id == j.id).where(where).order_by(a.started_at, a.id))
        with self._reading() as c:
            return [UsageRecord._make(row) for row in c.execute(q)]

    def idle_gpu_hours(self, *, since: float | None = None,
                       until: float | None = None) -> dict[str, float]:
        """Wasted GPU-hours by user: what attempts spent holding idle GPUs (rota.core.idle;
        a running attempt's figure as of the daemon's last write of it). ``since`` and
        ``until`` pick attempts by their start."""
        j, a = _jobs.c, _attempts.c
        q = (select(j.user, func.sum(a.idle_seconds) / 3600.0)
             .join(_attempts, a.job_id == j.id).where(a.idle_seconds > 0))
        if since is not None:
            q = q.where(a.started_at >= since)
        if until is not None:
            q = q.where(a.started_at < until)
        with self._reading() as c:
            return {str(u): round(float(h or 0), 6) for u, h in c.execute(q.group_by(j.user))}

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

    # --- metrics and progress ------------------------------------------------------------
    def add_metrics(self, rows: Sequence[dict[str, Any]],
                    progress: dict[int, dict[str, Any]]) -> None:
        """Samples (job_id, attempt, ts, step, name, value) and each job's latest progress,
        in one transaction."""
        if self._conn is not None:  # in a batch: the progress joins the job's held update
            if rows:  # (new rows: no held update is about them)
                try:
                    self._conn.execute(_ADD_METRICS, list(rows))
                except SQLAlchemyError as e:  # the batch's, not one item's (see _flush_held)
                    raise store_error("could not write to the database", e,
                                      self.engine.url) from e
            for k, v in progress.items():
                self._hold("job", k, _SET_PROGRESS, {"id_": k, "progress": v})
            return
        with self.transaction() as c:
            if rows:
                c.execute(_ADD_METRICS, list(rows))
            if progress:
                c.execute(_SET_PROGRESS, [{"id_": k, "progress": v} for k, v in progress.items()])

    def metrics(self, job_id: int, *, names: Sequence[str] = (), attempt: int | None = None,
                after_id: int = 0, limit: int = 10_000) -> list[MetricRecord]:
        """A job's samples in the order they were stored, from ``after_id`` (a cursor)."""
        m = _metrics.c
        q = (select(m.id, m.attempt, m.ts, m.step, m.name, m.value)
             .where(m.job_id == job_id, m.id > after_id).order_by(m.id).limit(limit))
        if names:
            q = q.where(m.name.in_(list(names)))
        if attempt is not None:
            q = q.where(m.attempt == attempt)
        with self._reading() as c:
            return list(c.execute(q))

    def last_peaks(self, names: Iterable[str]) -> dict[str, tuple[int, int]]:
        """For each name: (job id, peak GPU memory) of the newest finished attempt of a
        job of that name that recorded one. One query for a whole submit."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        j, a = _jobs.c, _attempts.c
        newest = (select(func.max(a.id).label("attempt"))
                  .join(_jobs, a.job_id == j.id)
                  .where(j.name.in_(wanted), a.peak_gpu_mem.is_not(None),
                         a.ended_at.is_not(None))
                  .group_by(j.name).subquery())
        q = (select(j.name, j.id, a.peak_gpu_mem).join(_attempts, a.job_id == j.id)
             .where(a.id.in_(select(newest.c.attempt))))
        with self._reading() as c:
            return {str(name): (int(jid), int(peak)) for name, jid, peak in c.execute(q)}

    def completed_run_times(self, name: str, *, last: int) -> list[float]:
        """Run times in seconds of the newest ``last`` completed attempts of jobs named
        ``name``, newest first (through ix_jobs_name; what run-time predictions read)."""
        return self.completed_run_times_of([name], last=last).get(name, [])

    def completed_names(self, *, at_most: int) -> set[str] | None:
        """The names of completed jobs (those that may have a run-time history), or None
        when there are more than ``at_most`` of them: a restart then asks about its
        queue's names only where one could have a history."""
        j = _jobs.c
        q = (select(j.name).where(j.state == JobState.COMPLETED.value, j.name.is_not(None))
             .distinct().limit(at_most + 1))
        with self._reading() as c:
            found = {str(name) for (name,) in c.execute(q)}
        return found if len(found) <= at_most else None

    def completed_run_times_of(self, names: Iterable[str], *, last: int,
                               chunk: int = 2_000) -> dict[str, list[float]]:
        """:meth:`completed_run_times` of many names, a query per ``chunk`` of them (a
        submit of 100 jobs or a restart's queue asks once, not once per job); names
        without a completed run are left out."""
        j, a = _jobs.c, _attempts.c
        out: dict[str, list[float]] = {}
        wanted = list(dict.fromkeys(names))
        with self._reading() as c:
            for k in range(0, len(wanted), chunk):
                newest = func.row_number().over(partition_by=j.name,
                                                order_by=a.id.desc()).label("newest")
                runs = (select(j.name, (a.ended_at - a.started_at).label("took"), newest)
                        .select_from(_attempts).join(_jobs, a.job_id == j.id)
                        .where(j.name.in_(wanted[k:k + chunk]), a.outcome == "completed",
                               a.ended_at.is_not(None))
                        .subquery())
                q = (select(runs.c.name, runs.c.took).where(runs.c.newest <= last)
                     .order_by(runs.c.name, runs.c.newest))
                for name, took in c.execute(q):
                    out.setdefault(str(name), []).append(max(0.0, float(took)))
        return out

    # --- users and tokens ----------------------------------------------------------------
    def add_user(self, name: str, *, admin: bool, now: float,
                 unix_account: str | None = None, exist_ok: bool = False) -> UserRow:
        row = UserRow(name=name, admin=admin, created_at=now, unix_account=unix_account)
        with self.session() as s, s.begin():
            old = s.get(UserRow, name)
            if old is not None:
                if exist_ok:  # a race of two first uses: the first one's row
                    return old
                raise Conflict(f"user {name!r} already exists")
            s.add(row)
        return row

    def user_or_none(self, name: str) -> UserRow | None:
        with self.session() as s:
            return s.get(UserRow, name)

    def unix_account(self, name: str) -> str | None:
        """The Unix account ``name``'s jobs run as; None: the daemon's own (or no such user)."""
        with self.session() as s:
            row = s.get(UserRow, name)
            return None if row is None else row.unix_account

    def users(self) -> list[UserRow]:
        with self.session() as s:
            return list(s.scalars(select(UserRow).order_by(UserRow.name)))

    def user(self, name: str) -> UserRow:
        with self.session() as s:
            row = s.get(UserRow, name)
            if row is None:
                raise NotFound(f"no user {name!r}; add one with `rota user add {name}`")
            return row

    def add_token(self, user: str, *, digest: str, prefix: str, note: str | None,
                  now: float) -> TokenRow:
        self.user(user)  # NotFound names the missing user
        row = TokenRow(user=user, digest=digest, prefix=prefix, note=note, created_at=now)
        with self.session() as s, s.begin():
            s.add(row)
        return row

    def token_by_digest(self, digest: str) -> tuple[TokenRow, UserRow] | None:
        with self.session() as s:
            got = s.execute(select(TokenRow, UserRow).join(UserRow, TokenRow.user == UserRow.name)
                            .where(TokenRow.digest == digest)).first()
            return None if got is None else (got[0], got[1])

    def tokens(self, user: str | None = None) -> list[TokenRow]:
        q = select(TokenRow).order_by(TokenRow.id)
        if user is not None:
            q = q.where(TokenRow.user == user)
        with self.session() as s:
            return list(s.scalars(q))

    def token(self, token_id: int) -> TokenRow:
        with self.session() as s:
            row = s.get(TokenRow, token_id)
            if row is None:
                raise NotFound(f"no token {token_id}")
            return row

    def revoke_token(self, token_id: int, *, now: float) -> None:
        with self.session() as s, s.begin():
            s.execute(update(TokenRow).where(TokenRow.id == token_id,
                                             TokenRow.revoked_at.is_(None))
                      .values(revoked_at=now))

    def touch_token(self, token_id: int, *, now: float) -> None:
        with self.transaction() as c:
            c.execute(update(TokenRow).where(TokenRow.id == token_id).values(last_used_at=now))

    # --- secrets (stored encrypted; see rota.server.secrets) ------------------------------
    def put_secret(self, user: str, name: str, ciphertext: bytes, *, now: float) -> bool:
        """Store or replace one; True when it is new."""
        with self.session() as s, s.begin():
            row = s.get(SecretRow, (user, name))
            if row is None:
                s.add(SecretRow(user=user, name=name, ciphertext=ciphertext, created_at=now,
                                updated_at=now))
                return True
            row.ciphertext, row.updated_at = ciphertext, now
            return False

    def secret_list(self, user: str) -> list[tuple[str, float, float]]:
        """(name, created_at, updated_at) of a user's secrets; never their values."""
        q = (select(SecretRow.name, SecretRow.created_at, SecretRow.updated_at)
             .where(SecretRow.user == user).order_by(SecretRow.name))
        with self._reading() as c:
            return [(r[0], r[1], r[2]) for r in c.execute(q)]

    def secret_ciphertexts(self, user: str, names: Iterable[str]) -> dict[str, bytes]:
        q = select(SecretRow.name, SecretRow.ciphertext).where(
            SecretRow.user == user, SecretRow.name.in_(list(names)))
        with self._reading() as c:
            return {r[0]: bytes(r[1]) for r in c.execute(q)}

    def delete_secret(self, user: str, name: str) -> None:
        with self.session() as s, s.begin():
            row = s.get(SecretRow, (user, name))
            if row is None:
                raise NotFound(f"{user} has no secret {name!r}")
            s.delete(row)

    def set_tracking(self, job_id: int, tracking: dict[str, Any]) -> None:
        """The job's runs in experiment trackers (rota.server.tracking)."""
        self.update_job(job_id, tracking=tracking)

    # --- events and settings -------------------------------------------------------------
    def add_event(self, *, job_id: int | None, kind: str, now: float,
                  message: str | None = None) -> None:
        if self._conn is not None:  # written with the batch's other events
            self._event(job_id, now, kind, message)
            return
        with self.transaction():
            self._event(job_id, now, kind, message)

    def _event(self, job_id: int | None, now: float, kind: str, message: str | None,
               from_state: str | None = None, to_state: str | None = None) -> None:
        """Queue an event row; the enclosing transaction writes it before it commits."""
        self._events.append({"job_id": job_id, "ts": now, "kind": kind, "message": message,
                             "from_state": from_state, "to_state": to_state})

    def _update(self, table: str, statement: Update, params: dict[str, Any]) -> None:
        """One row update: held for the end of the open batch, else written now."""
        if self._conn is not None:
            self._hold(table, params["id_"], statement, params)
            return
        with self.transaction() as c:
            c.execute(statement, params)

    def _hold(self, table: str, row_id: int, statement: Update, params: dict[str, Any]) -> None:
        """Hold a row update for the open batch's end (one is always open here). A second
        change of one row joins the first where one update does what both would (a job
        started, read and ended within a batch: one row written), else waits for it."""
        assert self._conn is not None
        prior = self._held.get((table, row_id))
        if prior is not None:
            merged = _merged(prior, statement, params)
            if merged is not None:
                self._held[table, row_id] = merged
                return
            self._flush_held()
        self._held[table, row_id] = _Write(statement, params)

    def _flush_held(self) -> None:
        """Write the open batch's held updates now (before a read, or a second change of a
        row). A failure here breaks the batch: a StoreError, which its callers let through
        (the whole batch rolls back), rather than a foreign error one item's handler might
        take for its own."""
        assert self._conn is not None
        try:
            self._flush(self._conn)
        except SQLAlchemyError as e:
            raise store_error("could not write to the database", e, self.engine.url) from e

    def _flush(self, c: Connection) -> None:
        """Write the held updates, one executemany per statement and set of columns, then
        the events."""
        if self._held:
            held, self._held = self._held, {}
            groups: dict[tuple[int, tuple[str, ...]], list[dict[str, Any]]] = {}
            stmts: dict[int, Update] = {}
            for w in held.values():
                stmts[id(w.statement)] = w.statement
                groups.setdefault((id(w.statement), tuple(w.params)), []).append(w.params)
            for (sid, _), rows in groups.items():
                res = c.execute(stmts[sid], rows)
                if stmts[sid] is _SET_JOB and res.rowcount != len(rows):
                    self._report_lost_transitions(c, rows)
        if self._events:
            rows, self._events = self._events, []
            c.execute(_ADD_EVENTS, rows)

    @staticmethod
    def _report_lost_transitions(c: Connection, rows: list[dict[str, Any]]) -> None:
        """Transitions of a batch whose job was not in the state the daemon thought: they
        changed nothing (the others stand); the daemon's memory and the store disagree, which
        only a bug does, so it is logged loudly."""
        want = {r["id_"]: r for r in rows}
        j = _jobs.c
        for job_id, state, updated_at in c.execute(select(j.id, j.state, j.updated_at)
                                                   .where(j.id.in_(list(want)))):
            w = want[job_id]
            # moved by this write: in its new state since this moment (a job already in that
            # state from an earlier write at the same moment would pass for moved too)
            if state != w["state"] or updated_at != w["updated_at"]:
                log.error("job %s is %s, expected %s: its move to %s was not stored", job_id,
                          state, w["from_"], w["state"])

    def events(self, job_id: int) -> list[EventRecord]:
        with self._reading() as c:
            return list(c.execute(_JOB_EVENTS, {"job_id": job_id}).all())

    def paused_gpus(self) -> dict[str, int]:
        with self.session() as s:
            return {r.uuid: r.index for r in s.scalars(
                select(GpuSettingRow).where(GpuSettingRow.paused.is_(True)))}

    def set_gpu_paused(self, uuid: str, index: int, paused: bool) -> None:
        with self.session() as s, s.begin():
            row = s.get(GpuSettingRow, uuid)
            if row is None:
                s.add(GpuSettingRow(uuid=uuid, index=index, paused=paused))
            else:
                row.paused, row.index = paused, index

    def get_setting(self, key: str, default: str | None = None) -> str | None:
        with self.session() as s:
            row = s.get(DaemonSettingRow, key)
            return row.value if row else default

    def set_setting(self, key: str, value: str) -> None:
        with self.session() as s, s.begin():
            row = s.get(DaemonSettingRow, key)
            if row is None:
                s.add(DaemonSettingRow(key=key, value=value))
            else:
                row.value = value

    # --- fair shares (rota.core.fairshare) ------------------------------------------------
    def shares(self) -> dict[str, dict[str, float]]:
        """The shares admins set: {"user": {name: shares}, "project": {name: shares}}."""
        out: dict[str, dict[str, float]] = {"user": {}, "project": {}}
        with self.session() as s:
            for row in s.scalars(select(ShareRow)):
                out.setdefault(row.kind, {})[row.name] = row.shares
        return out

    def set_share(self, kind: str, name: str, shares: float, *, now: float) -> None:
        """Give a user or project ``shares`` (kept until set again)."""
        if kind not in SHARE_KINDS:
            raise ValueError(f"a share is a user's or a project's, not a {kind!r}'s")
        with self.session() as s, s.begin():
            row = s.get(ShareRow, (kind, name))
            if row is None:
                s.add(ShareRow(kind=kind, name=name, shares=shares, updated_at=now))
            else:
                row.shares, row.updated_at = shares, now

    # --- removing a user (rota.server.daemon_ports; kept apart from the rest) -------------
    def remove_user(self, name: str) -> int:
        """Remove a user with their tokens and stored secrets, in one transaction; their
        jobs stay as history. Returns how many of their tokens were live (not revoked)."""
        from sqlalchemy import delete  # here: this block stays apart from the rest

        with self.session() as s, s.begin():
            if s.get(UserRow, name) is None:
                raise NotFound(f"no user {name!r}")
            live = s.scalar(select(func.count()).select_from(TokenRow).where(
                TokenRow.user == name, TokenRow.revoked_at.is_(None))) or 0
            s.execute(delete(TokenRow).where(TokenRow.user == name))
            s.execute(delete(SecretRow).where(SecretRow.user == name))
            s.execute(delete(UserRow).where(UserRow.name == name))
        return int(live)

    # --- evaluation schedules (rota.server.eval_schedules) -------------------------------
    def add_eval_schedule(self, *, now: float, **fields: Any) -> ScheduleRecord:
        """Store a schedule, enabled; its row back."""
        values = {"evaluated": [], "runs": 0, "enabled": True, **fields, "created_at": now}
        with self.transaction() as c:
            return c.execute(insert(_schedules).returning(*_schedules.c), values).one()

    def eval_schedule(self, schedule_id: int) -> ScheduleRecord:
        row = None
        if 0 < schedule_id <= _MAX_ID:
            with self._reading() as c:
                row = c.execute(select(_schedules).where(_schedules.c.id == schedule_id)).first()
        if row is None:
            raise NotFound(f"no evaluation schedule {schedule_id}")
        return row

    def eval_schedules(self, *, user: str | None = None,
                       enabled: bool | None = None) -> list[ScheduleRecord]:
        """Oldest first; ``user``/``enabled`` None: any."""
        s = _schedules.c
        q = select(_schedules).order_by(s.id)
        if user is not None:
            q = q.where(s.user == user)
        if enabled is not None:
            q = q.where(s.enabled.is_(enabled))
        with self._reading() as c:
            return list(c.execute(q).all())

    def update_eval_schedule(self, schedule_id: int, **fields: Any) -> None:
        """Change a schedule in the open transaction (the daemon's submit of its jobs), or
        in one of its own."""
        with self.transaction() as c:
            c.execute(update(_schedules).where(_schedules.c.id == schedule_id).values(**fields))

    def remove_eval_schedule(self, schedule_id: int) -> None:
        from sqlalchemy import delete

        with self.transaction() as c:
            if not c.execute(delete(_schedules).where(_schedules.c.id == schedule_id)).rowcount:
                raise NotFound(f"no evaluation schedule {schedule_id}")

    # --- pipelines and their rounds (rota.server.pipelines) ------------------------------
    def add_pipeline(self, *, now: float, **fields: Any) -> PipelineRecord:
        """Store a pipeline; its row back (Conflict when the name is taken)."""
        values = {"rounds": 0, "failures": 0, **fields, "created_at": now}
        try:
            with self.transaction() as c:
                return c.execute(insert(_pipelines).returning(*_pipelines.c), values).one()
        except IntegrityError:
            raise Conflict(f"a pipeline named {fields.get('name')!r} exists: remove it "
                           "first (rota pipeline rm) or choose another name") from None

    def pipeline(self, key: int | str) -> PipelineRecord:
        """By id or by name."""
        p = _pipelines.c
        where = p.id == key if isinstance(key, int) else p.name == key
        with self._reading() as c:
            row = c.execute(select(_pipelines).where(where)).first()
        if row is None:
            raise NotFound(f"no pipeline {key!r}" if isinstance(key, str)
                           else f"no pipeline {key}")
        return row

    def pipelines(self, *, user: str | None = None) -> list[PipelineRecord]:
        q = select(_pipelines).order_by(_pipelines.c.id)
        if user is not None:
            q = q.where(_pipelines.c.user == user)
        with self._reading() as c:
            return list(c.execute(q).all())

    def update_pipeline(self, pipeline_id: int, **fields: Any) -> None:
        with self.transaction() as c:
            c.execute(update(_pipelines).where(_pipelines.c.id == pipeline_id)
                      .values(**fields))

    def remove_pipeline(self, pipeline_id: int) -> None:
        """The pipeline and its rounds' records (their jobs stay)."""
        from sqlalchemy import delete

        with self.transaction() as c:
            c.execute(delete(_rounds).where(_rounds.c.pipeline_id == pipeline_id))
            if not c.execute(delete(_pipelines).where(_pipelines.c.id == pipeline_id)
                             ).rowcount:
                raise NotFound(f"no pipeline {pipeline_id}")

    def add_round(self, **fields: Any) -> RoundRecord:
        values = {"jobs": {}, "facts": {}, **fields}
        with self.transaction() as c:
            return c.execute(insert(_rounds).returning(*_rounds.c), values).one()

    def update_round(self, round_id: int, **fields: Any) -> None:
        with self.transaction() as c:
            c.execute(update(_rounds).where(_rounds.c.id == round_id).values(**fields))

    def rounds(self, pipeline_id: int | None = None, *, state: str | None = None,
               limit: int | None = None) -> list[RoundRecord]:
        """Newest first."""
        r = _rounds.c
        q = select(_rounds).order_by(r.id.desc())
        if pipeline_id is not None:
            q = q.where(r.pipeline_id == pipeline_id)
        if state is not None:
            q = q.where(r.state == state)
        if limit is not None:
            q = q.limit(limit)
        with self._reading() as c:
            return list(c.execute(q).all())

    # --- artifacts: what a job's outputs saved (rota.server.artifacts) -------------------
    def want_artifacts(self, job_id: int, *, key: str, store_url: str,
                       sources: dict[str, str], user: str, now: float) -> None:
        """The job's outputs are to be saved: a ``pending`` row, written in the open
        transaction (the batch that records the job's end) or one of its own."""
        a = _artifacts.c
        with self.transaction() as c:
            c.execute(delete(_artifacts).where(a.job_id == job_id))
            c.execute(insert(_artifacts), {"job_id": job_id, "state": "pending", "key": key,
                                           "store_url": store_url, "sources": sources,
                                           "user": user, "tries": 0, "requested_at": now})

    def set_artifacts(self, job_id: int, **fields: Any) -> None:
        with self.transaction() as c:
            c.execute(update(_artifacts).where(_artifacts.c.job_id == job_id).values(**fields))

    def artifacts(self, job_id: int) -> ArtifactRecord | None:
        with self._reading() as c:
            return c.execute(select(_artifacts).where(_artifacts.c.job_id == job_id)).first()

    def artifacts_in(self, state: str) -> list[ArtifactRecord]:
        """Rows in ``state``, oldest request first."""
        a = _artifacts.c
        with self._reading() as c:
            return list(c.execute(select(_artifacts).where(a.state == state)
                                  .order_by(a.requested_at, a.job_id)).all())

    # --- links to saved outputs (rota share-link) -------------------------------------------
    def add_share_link(self, *, digest: str, job_id: int, path: str | None, by: str,
                       now: float, expires_at: float) -> ShareLinkRecord:
        with self.transaction() as c:
            return c.execute(insert(_links).returning(*_links.c), {
                "digest": digest, "job_id": job_id, "path": path, "created_by": by,
                "created_at": now, "expires_at": expires_at, "downloads": 0}).one()

    def share_link(self, *, link_id: int | None = None,
                   digest: str | None = None) -> ShareLinkRecord | None:
        where = _links.c.id == link_id if link_id is not None else _links.c.digest == digest
        with self._reading() as c:
            return c.execute(select(_links).where(where)).first()

    def share_links(self, *, job_id: int | None = None,
                    user: str | None = None) -> list[ShareLinkRecord]:
        """Newest first; those of one job, or made by one user."""
        q = select(_links).order_by(_links.c.id.desc())
        if job_id is not None:
            q = q.where(_links.c.job_id == job_id)
        if user is not None:
            q = q.where(_links.c.created_by == user)
        with self._reading() as c:
            return list(c.execute(q).all())

    def update_share_link(self, link_id: int, **fields: Any) -> None:
        with self.transaction() as c:
            c.execute(update(_links).where(_links.c.id == link_id).values(**fields))

    # --- workspaces' own quotas (rota.server.workspaces) --------------------------------
    def workspace_quotas(self) -> dict[str, int]:
        with self._reading() as c:
            return {n: int(lim) for n, lim in c.execute(select(_ws_quotas.c.name,
                                                               _ws_quotas.c.limit))}

    def set_workspace_quota(self, name: str, limit: int | None, *, by: str,
                            now: float) -> None:
        """``limit`` None: back to the default."""
        with self.transaction() as c:
            c.execute(delete(_ws_quotas).where(_ws_quotas.c.name == name))
            if limit is not None:
                c.execute(insert(_ws_quotas), {"name": name, "limit": limit, "set_by": by,
                                               "set_at": now})

    # --- datasets (rota.server.datasets) -------------------------------------------------
    def add_dataset_version(self, *, owner: str, name: str, digest: str, key: str,
                            store_url: str, shared: bool, files: int, size: int, source: str,
                            description: str | None, by: str, now: float,
                            ) -> tuple[DatasetRecord, bool]:
        """The version with this content: made, numbered after every version the dataset
        ever had, unless it exists (a removed one with this content comes back with its
        number); True when it was made or came back."""
        d = _datasets.c
        with self.transaction() as c:
            found = c.execute(select(_datasets).where(
                d.owner == owner, d.name == name, d.digest == digest)).first()
            if found is not None and found.removed_at is None:
                return found, False
            values = {"key": key, "store_url": store_url, "shared": shared, "files": files,
                      "bytes": size, "source": source, "description": description,
                      "created_by": by, "created_at": now, "removed_at": None}
            if found is not None:
                return c.execute(update(_datasets).where(d.id == found.id).values(**values)
                                 .returning(*_datasets.c)).one(), True
            last = c.execute(select(func.max(d.version)).where(
                d.owner == owner, d.name == name)).scalar()
            return c.execute(insert(_datasets).returning(*_datasets.c), {
                **values, "owner": owner, "name": name, "version": (last or 0) + 1,
                "digest": digest}).one(), True

    def dataset_versions(self, *, owner: str | None = None, name: str | None = None,
                         ) -> list[DatasetRecord]:
        """Versions not removed, in (owner, name, version) order; of one owner, or one
        dataset."""
        d = _datasets.c
        q = select(_datasets).where(d.removed_at.is_(None)).order_by(d.owner, d.name,
                                                                      d.version)
        if owner is not None:
            q = q.where(d.owner == owner)
        if name is not None:
            q = q.where(d.name == name)
        with self._reading() as c:
            return list(c.execute(q).all())

    def remove_dataset_versions(self, ids: Collection[int], *, now: float) -> None:
        """Removed (their numbers are kept: never given to other content)."""
        with self.transaction() as c:
            c.execute(update(_datasets).where(_datasets.c.id.in_(list(ids)))
                      .values(removed_at=now))

    def jobs_using(self, refs: Collection[str], *, live: bool = True,
                   ) -> list[tuple[int, str, str]]:
        """(job id, ref, state) of the jobs that read these dataset versions; ``live``:
        only those not ended."""
        jd, j = _job_datasets.c, _jobs.c
        q = (select(jd.job_id, jd.ref, j.state).join(_jobs, j.id == jd.job_id)
             .where(jd.ref.in_(list(refs))).order_by(jd.job_id))
        if live:
            q = q.where(j.state.not_in([s.value for s in TERMINAL]))
        with self._reading() as c:
            return [(int(i), r, s) for i, r, s in c.execute(q)]

    def live_dataset_uses(self) -> list[tuple[int, str, str, str | None]]:
        """(job id, ref, state, pool) of every job not ended that reads a dataset
        version (pool None: this machine's)."""
        jd, j = _job_datasets.c, _jobs.c
        q = (select(jd.job_id, jd.ref, j.state, j.pool).join(_jobs, j.id == jd.job_id)
             .where(j.state.not_in([s.value for s in TERMINAL])).order_by(jd.job_id))
        with self._reading() as c:
            return [(int(i), r, s, p) for i, r, s, p in c.execute(q)]

    # --- quotas and budgets (rota.core.quota) ---------------------------------------------
    def quotas(self) -> list[Quota]:
        q = _quotas.c
        with self._reading() as c:
            return [Quota(*row) for row in c.execute(
                select(q.kind, q.name, q.what, q.period, q.limit, q.hard, q.lifted_until)
                .order_by(q.kind, q.name, q.what))]

    def set_quota(self, quota: Quota, *, by: str, now: float) -> None:
        """Add or replace the owner's quota on that measure (one per user/project and
        measure)."""
        q = _quotas.c
        with self.transaction() as c:
            c.execute(delete(_quotas).where(q.kind == quota.kind, q.name == quota.name,
                                            q.what == quota.what))
            c.execute(insert(_quotas).values(**quota._asdict(), set_by=by, updated_at=now))

    def lift_quota(self, kind: str, name: str, what: str | None, *, until: float,
                   now: float) -> int:
        """Not enforced before ``until``; how many quotas this touched."""
        q = _quotas.c
        where = [q.kind == kind, q.name == name] + ([q.what == what] if what else [])
        with self.transaction() as c:
            return int(c.execute(update(_quotas).where(*where)
                                 .values(lifted_until=until, updated_at=now)).rowcount)

    def remove_quota(self, kind: str, name: str, what: str | None) -> int:
        q = _quotas.c
        where = [q.kind == kind, q.name == name] + ([q.what == what] if what else [])
        with self.transaction() as c:
            return int(c.execute(delete(_quotas).where(*where)).rowcount)


    # --- the alerts' outbox (rota.server.alert_sender) ------------------------------------
    def add_alert(self, key: str, payload: dict[str, Any], *, now: float,
                  user: str | None = None) -> bool:
        """Store an alert, due at once; False, storing nothing, when one with ``key`` is
        stored already (sent, failed or still pending): each key goes out once. The daemon
        is the only writer, so a read before the insert cannot race another insert."""
        with self.transaction() as c:
            if c.execute(select(_alerts.c.id).where(_alerts.c.key == key)).first():
                return False
            c.execute(insert(_alerts), {"key": key, "user": user, "created_at": now,
                                        "payload": payload, "state": "pending",
                                        "attempts": 0, "next_try_at": now})
        return True

    def due_alerts(self, now: float, *, limit: int = 100) -> list[AlertRecord]:
        """Pending alerts due by ``now``, oldest first."""
        a = _alerts.c
        q = (select(_alerts).where(a.state == "pending", a.next_try_at <= now)
             .order_by(a.next_try_at, a.id).limit(limit))
        with self._reading() as c:
            return list(c.execute(q).all())

    def next_alert_at(self) -> float | None:
        """When the soonest pending alert is due (None: none pending)."""
        a = _alerts.c
        with self._reading() as c:
            found = c.execute(select(func.min(a.next_try_at)).where(a.state == "pending"))
            return cast(float | None, found.scalar())

    def update_alert(self, alert_id: int, **fields: Any) -> None:
        with self.transaction() as c:
            c.execute(update(_alerts).where(_alerts.c.id == alert_id).values(**fields))

    def alerts_by_key(self, keys: Iterable[str]) -> list[AlertRecord]:
        with self._reading() as c:
            return list(c.execute(select(_alerts).where(_alerts.c.key.in_(list(keys)))).all())

    def alerts(self, *, user: str | None = None, limit: int = 100) -> list[AlertRecord]:
        """The newest alerts first; ``user`` None: everyone's."""
        q = select(_alerts).order_by(_alerts.c.id.desc()).limit(limit)
        if user is not None:
            q = q.where(_alerts.c.user == user)
        with self._reading() as c:
            return list(c.execute(q).all())
