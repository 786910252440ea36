"""A database's failure reaches people as a sentence, not SQLAlchemy's text with its SQL
and its link (rota.store.failures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from rota.core.spec import JobSpec
from rota.errors import StoreError
from rota.store.failures import sentence
from rota.store.repo import Store

DB = make_url("sqlite:////home/ann/.local/share/rota/rota.db")


def _op(message: str) -> OperationalError:
    return OperationalError("INSERT INTO jobs ...", {}, Exception(message))


@pytest.mark.parametrize(("said", "meant"), [
    ("database or disk is full",
     "the disk holding /home/ann/.local/share/rota/rota.db is full: free some space there"),
    ("database is locked", "the database /home/ann/.local/share/rota/rota.db is locked by "
                           "another process (another rota daemon, or a tool holding a "
                           "write lock on it)"),
    ("attempt to write a readonly database",
     "the database /home/ann/.local/share/rota/rota.db is read-only for the daemon's user"),
    ("something new", "the database /home/ann/.local/share/rota/rota.db answered: "
                      "something new"),
])
def test_known_failures_read_as_sentences(said: str, meant: str) -> None:
    e = _op(said)
    assert "sqlalche.me" in str(e)  # what SQLAlchemy would have shown
    assert sentence(e, DB) == meant


def test_a_server_url_is_named_without_its_password() -> None:
    url = make_url("postgresql+psycopg://rota:s3cret@db.lab:5432/rota")
    got = sentence(_op('connection to server at "db.lab" failed: Connection refused'), url)
    assert "s3cret" not in got and got.startswith("the database server postgresql")
    assert "refused the connection" in got


def test_a_write_the_disk_cannot_take_fails_with_a_sentence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'rota.db'}")

    def full(c: Any) -> None:
        raise OperationalError("COMMIT", {}, Exception("database or disk is full"))

    monkeypatch.setattr(store, "_flush", full)
    with pytest.raises(StoreError) as got, store.transaction():
        store.add_event(job_id=None, kind="drain", now=1.0)
    assert str(got.value) == ("could not write to the database: the disk holding "
                              f"{tmp_path / 'rota.db'} is full: free some space there")
    store.close()


def test_a_job_that_cannot_be_stored_says_why_in_words(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'rota.db'}")
    real = store._writer

    def locked() -> Any:
        conn = real()
        monkeypatch.setattr(conn, "execute", _raise_locked)
        return conn

    monkeypatch.setattr(store, "_writer", locked)
    with pytest.raises(StoreError) as got:
        store.add_jobs([JobSpec(command=["true"])], user="u", source="test", now=1.0)
    assert "is locked by another process" in str(got.value)
    assert "sqlalche" not in str(got.value) and "INSERT" not in str(got.value)
    store.close()


def _raise_locked(*_: Any, **__: Any) -> Any:
    raise OperationalError("INSERT INTO jobs ...", {}, Exception("database is locked"))
