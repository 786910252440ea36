"""The store's ground: its tables and shared statements, the records it returns, and
the unit of work every repository of ``rota.store.repo.Store`` writes in (one
transaction, row updates held to its end and written one ``executemany`` per shape)."""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, NamedTuple, Self, cast

from sqlalchemy import (
    BindParameter,
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
    func,
    insert,
    null,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from rota.core.lifecycle import JobState
from rota.core.snapshot import MILLI, PendingJob
from rota.errors import StoreError
from rota.store.db import make_engine, migrate
from rota.store.failures import store_error
from rota.store.tables import (
    AlertRow,
    ArtifactRow,
    AttemptRow,
    DatasetRow,
    EvalScheduleRow,
    EventRow,
    JobDatasetRow,
    JobRow,
    MetricRow,
    PipelineRoundRow,
    PipelineRow,
    QuotaRow,
    ShareLinkRow,
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
    if "name" in filters:  # the name as shown (views.job_view): the given one, else the
        # command; an empty given name shows the command too
        text: BindParameter[str] = bindparam("name")
        unnamed = or_(j.name.is_(None), j.name == "")
        q = q.where(or_(j.name.contains(text, escape="/"),
                        and_(unnamed, j.command_text.contains(text, escape="/"))))
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



class StoreBase:
    """The unit of work the repositories share: one open transaction at a time (nested
    uses join it), row updates and events held to its end and written there one
    ``executemany`` per statement shape, hooks run after its commit or its rollback. The
    design is in ``rota.store.repo.Store``'s docstring."""

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
    def open(cls, url: str) -> Self:
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

