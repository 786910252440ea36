"""``--secret-env`` values are stored sealed (encrypted with secrets.key, as stored secrets
are) and unsealed only into the launch environment; equal secrets still de-duplicate; a row
stored before values were sealed still launches; a sealed-looking value a user submits is
sealed again, never decrypted into the job."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

from rota.core.job_secrets import SEALED
from rota.core.spec import JobSpec
from rota.server.intake import Intake
from rota_testing import in_process_daemon, until

SECRET = "s3cret-hunter2"


def _checks(value: str) -> list[str]:
    """A job that ends 0 only if it sees TOKEN=value (its command holds a digest only)."""
    digest = hashlib.sha256(value.encode()).hexdigest()
    return [sys.executable, "-c", "import hashlib, os, sys; sys.exit(hashlib.sha256(os.environ"
            f".get('TOKEN', '').encode()).hexdigest() != {digest!r})"]


def _spec(value: str, command: list[str] | None = None) -> dict[str, Any]:
    return {"command": command or _checks(value), "gpus": 0, "env": {"TOKEN": value, "A": "1"},
            "secret_env": ["TOKEN"]}


def _dump(home: Path) -> str:
    with closing(sqlite3.connect(home / "rota.db")) as db:
        return "\n".join(db.iterdump())


async def _ends(store: Any, job_id: int) -> str:
    await until(lambda: store.get_job(job_id).state in ("completed", "failed"),
                f"job {job_id} to end", seconds=30)
    return str(store.get_job(job_id).state)


def test_stored_sealed_launched_clear_and_deduplicated(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            intake = Intake(d)
            [row] = intake.submit([_spec(SECRET)], user=d.settings.user, source="api")
            assert SECRET not in _dump(d.settings.home)
            stored = store.get_job(row.id).spec["env"]
            assert stored["TOKEN"].startswith(SEALED) and stored["A"] == "1"
            assert JobSpec.stored(store.get_job(row.id).spec).redacted()["env"]["TOKEN"] \
                == "***"
            assert await _ends(store, row.id) == "completed"  # the job saw the value

            # the stored hash is keyed: not the hash of the clear spec
            clear = JobSpec.model_validate(_spec(SECRET, ["sleep", "60"]))
            [live] = intake.submit([clear], user=d.settings.user, source="api")
            assert store.get_job(live.id).content_hash != clear.content_hash()
            # an equal secret is a duplicate of a live job; another value is not
            assert intake.submit([clear], user=d.settings.user, source="api",
                                 dedup=True) == []
            other = intake.submit([_spec("other", ["sleep", "60"])], user=d.settings.user,
                                  source="api", dedup=True)
            assert len(other) == 1

    asyncio.run(scenario())


def test_old_clear_rows_launch_and_sealed_looking_values_stay_as_given(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            # a row as stored before values were sealed: straight into the store
            [old] = store.add_jobs([JobSpec.model_validate(_spec(SECRET))],
                                   user=d.settings.user, source="api", now=d.clock())
            assert SECRET in json.dumps(store.get_job(old.id).spec)
            d.accept([old])
            assert await _ends(store, old.id) == "completed"

            # a sealed value copied into a submit is sealed again: the job gets it as text
            sealed = d.secrets.seal(JobSpec.model_validate(_spec(SECRET))).env["TOKEN"]
            [copied] = Intake(d).submit([_spec(sealed)], user=d.settings.user, source="api")
            assert await _ends(store, copied.id) == "completed"  # TOKEN == the sealed text

    asyncio.run(scenario())


def test_a_jobs_file_line_with_a_secret_runs_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, _store):
            jobs = tmp_path / "jobs.yaml"
            jobs.write_text(json.dumps([_spec(SECRET, ["sleep", "60"])]))
            d.settings.jobs_file = jobs
            intake = Intake(d)
            first = intake.poll_jobs_file(force=True)
            assert len(first.queued) == 1, first
            again = intake.poll_jobs_file(force=True)  # the line's job is found by its hash
            assert again.queued == [] and again.ran_before, again
            assert SECRET not in _dump(d.settings.home)

    asyncio.run(scenario())
