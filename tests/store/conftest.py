"""A fresh database per test: SQLite always, PostgreSQL when ROTA_TEST_PG_URL names a server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rota.store.repo import Store
from rota_testing import pg_database


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'rota.db'}"
    else:
        yield from pg_database()


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url)
    yield s
    s.close()
