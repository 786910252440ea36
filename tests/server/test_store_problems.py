"""The API answers a store's failure as a StoreError problem with a sentence, whether the
store translated it or a read met it raw (rota.server.api.problems)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from rota.errors import StoreError
from rota.server.api.problems import answer_errors_as_problems


def _app() -> FastAPI:
    app = FastAPI()
    answer_errors_as_problems(app)

    @app.get("/raw")
    async def raw() -> None:
        raise OperationalError("SELECT jobs.id FROM jobs", {}, Exception("database is locked"))

    @app.get("/translated")
    async def translated() -> None:
        raise StoreError("could not write to the database: the disk holding /h/rota.db "
                         "is full: free some space there")

    return app


def test_store_failures_are_answered_as_store_errors_in_words() -> None:
    with TestClient(_app()) as c:
        for path in ("/raw", "/translated"):
            got = c.get(path)
            assert got.status_code == 503
            body = got.json()
            assert body["title"] == "StoreError"
            assert "sqlalche" not in body["detail"] and "SELECT" not in body["detail"]
        assert c.get("/raw").json()["detail"] == (
            "could not read the database: the database of the daemon is locked by another "
            "process (another rota daemon, or a tool holding a write lock on it)")
