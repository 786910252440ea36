"""Engine creation and migrations: SQLite in WAL mode by default, PostgreSQL by URL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.exc import SQLAlchemyError

from rota.errors import StoreError
from rota.store.failures import store_error

_MIGRATIONS = Path(__file__).parent / "migrations"


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'rota.db'}"


def make_engine(url: str) -> Engine:
    """An engine tuned for one writer (the daemon) and a few readers."""
    if url.startswith("sqlite"):
        # hide_parameters: a failed statement's error (logged, or answered to a client) must
        # not carry what it wrote, such as a job's environment
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               hide_parameters=True, json_deserializer=_json_loads)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a commit survives a daemon crash; only an OS crash can lose the
            # last transactions, and jobs are re-adopted from their status files anyway.
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    try:
        return create_engine(url, pool_pre_ping=True, hide_parameters=True,
                             json_deserializer=_json_loads)
    except (SQLAlchemyError, ImportError) as e:
        raise StoreError(f"cannot use database {redact_url(url)}: "
                         f"{str(e).split('(Background on this error at:')[0].strip()}") from e


def holds_jobs(url: str) -> bool:
    """Whether the database at ``url`` already holds a Rota queue (a jobs table with a
    row), read without changing it (no migration)."""
    engine = make_engine(url)
    try:
        with engine.connect() as c:
            if not inspect(c).has_table("jobs"):
                return False
            return c.execute(text("SELECT 1 FROM jobs LIMIT 1")).first() is not None
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read database {redact_url(url)}: "
                         f"{str(e).split('(Background on this error at:')[0].strip()}") from e
    finally:
        engine.dispose()


def _json_loads(text: str | bytes) -> Any:
    """A JSON column's value. orjson: a job list page decodes three JSON columns per row,
    and json.loads was a third of reading it. What orjson refuses (Infinity, NaN: the
    standard library writes them) falls back to json.loads."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def redact_url(url: str) -> str:
    """Hide a password in a database URL before it reaches a log or an error."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    except SQLAlchemyError as e:
        raise store_error(f"database migration failed on {redact_url(str(engine.url))}", e,
                          engine.url) from e
