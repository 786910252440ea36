"""The list's name filter matches the name as shown: the given one, else the command
(jobs.command_text, filled at insert and, for the jobs stored before it, by migration
0022). On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from rota.core.job_names import command_name
from rota.core.spec import JobSpec
from rota.store.repo import Store


def spec(command: list[str], **kw: Any) -> JobSpec:
    return JobSpec.model_validate({"command": command, **kw})


LONG = ["python", "train.py", *(f"--option-{n}=value" for n in range(10))]


def _add(store: Store) -> dict[str, int]:
    """Jobs given no name, one given a name, one given an empty name (shown by its
    command too): their ids by what they are."""
    rows = store.add_jobs([spec(["python", "train.py"]), spec(["python", "eval.py"],
                                                              name="evaluate"),
                           spec(["echo", "a\x1bb", "50%_off"]), spec(LONG),
                           spec(["python", "serve.py"], name="")],
                          user="u", source="cli", now=1.0)
    return dict(zip(["train", "named", "odd", "long", "empty"], (r.id for r in rows),
                    strict=True))


def _names(store: Store, name: str) -> set[int]:
    return {r.id for r in store.list_jobs(name=name)}


def _filter_works(store: Store, ids: dict[str, int]) -> None:
    # a job given no name is found by its command as shown; a named one by its name only
    assert _names(store, "python") == {ids["train"], ids["long"], ids["empty"]}
    assert _names(store, "train.py") == {ids["train"], ids["long"]}
    assert _names(store, "eval") == {ids["named"]}
    assert _names(store, "evaluate") == {ids["named"]}
    # as shown: a control character escaped, and LIKE's own characters taken literally
    assert _names(store, "a\\x1bb") == {ids["odd"]}
    assert _names(store, "0%_o") == {ids["odd"]}
    assert _names(store, "0%x") == set()
    # the shown name is the command's first 60 characters: what is cut off is not found
    assert _names(store, "--option-1=") == {ids["long"]}
    assert _names(store, "--option-3=") == set()


def test_the_name_filter_finds_a_job_given_no_name_by_its_command(store: Store) -> None:
    ids = _add(store)
    _filter_works(store, ids)
    got = store.get_job(ids["train"])
    # the given name is kept as given (none): submits and predictions compare it
    assert got.name is None and got.command_text == "python train.py"
    assert store.get_job(ids["named"]).command_text == "python eval.py"
    assert store.get_job(ids["odd"]).command_text == "echo a\\x1bb 50%_off"
    assert store.get_job(ids["long"]).command_text == command_name(LONG)
    # filters still combine
    assert {r.id for r in store.list_jobs(name="python", states=["held"])} == set()


def test_migration_0022_fills_command_text_for_the_jobs_stored_before_it(
        db_url: str) -> None:
    """A store of revision 0021 (no command_text) with more jobs than one round of the
    migration reads: after the upgrade every job has its command as shown."""
    from alembic import command
    from alembic.autogenerate import compare_metadata
    from alembic.config import Config
    from alembic.migration import MigrationContext
    from sqlalchemy import inspect

    from rota.store.db import _MIGRATIONS, make_engine
    from rota.store.tables import Base

    store = Store.open(db_url)
    ids = _add(store)
    many = store.add_jobs([spec(["sleep", str(n)]) for n in range(2100)], user="u",
                          source="cli", now=2.0)
    store.close()
    engine = make_engine(db_url)
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as c:
        cfg.attributes["connection"] = c
        command.downgrade(cfg, "0021")
    with engine.connect() as c:
        assert "command_text" not in {col["name"] for col in inspect(c).get_columns("jobs")}
    engine.dispose()

    store = Store.open(db_url)  # upgrades again, 0022 filling the column
    try:
        _filter_works(store, ids)
        with store.engine.connect() as c:
            stored: dict[int, str | None] = dict(
                c.execute(text("SELECT id, command_text FROM jobs")).tuples().all())
            names = {n for (n,) in c.execute(text("SELECT name FROM jobs"))}
            diff = compare_metadata(MigrationContext.configure(c), Base.metadata)
        assert stored[ids["train"]] == "python train.py"
        assert stored[ids["named"]] == "python eval.py"  # a named job's too
        assert stored[ids["odd"]] == "echo a\\x1bb 50%_off"
        assert stored[ids["long"]] == command_name(LONG)
        assert all(stored[r.id] == f"sleep {n}" for n, r in enumerate(many))
        assert names == {None, "evaluate", ""}  # no name was made up
        assert diff == []  # the partial queue index and the rest came through the round trip
    finally:
        store.close()
