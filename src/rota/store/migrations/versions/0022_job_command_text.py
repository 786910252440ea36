"""jobs.command_text: the command as a job given no name is shown (``python train.py``),
for every job, so that the list's name filter (`rota queue --name python`, `rota cancel
--name`) finds a job given no name by the name it is shown with; jobs.name stays the name
the user gave

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-30 10:15:00
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

# The code's own function, not a copy: the column must hold what a new job's insert
# stores (rota.store.jobs.add_jobs) and what every listing shows, or the filter would
# match old and new jobs differently.
from rota.core.job_names import command_name

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

#: rows read and written per round: a million jobs' specs are never all in memory
_BATCH = 1000
# typed columns: the spec is decoded alike on SQLite (text) and PostgreSQL (json)
_jobs = sa.table("jobs", sa.column("id", sa.Integer), sa.column("spec", sa.JSON),
                 sa.column("command_text", sa.String(200)))


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("command_text", sa.String(200), nullable=True))
    _fill_from_specs()


def _fill_from_specs() -> None:
    """Every stored job's command_text from its spec, in rounds of _BATCH rows in id order
    (where the last round ended: no OFFSET that rereads what was done). In Python, not in
    SQL: the text is command_name's (joined, control characters escaped, cut), which
    neither database's SQL can make alike."""
    bind = op.get_bind()
    read = (sa.select(_jobs.c.id, _jobs.c.spec).where(_jobs.c.id > sa.bindparam("after"))
            .order_by(_jobs.c.id).limit(_BATCH))
    write = (sa.update(_jobs).where(_jobs.c.id == sa.bindparam("id_"))
             .values(command_text=sa.bindparam("text")))
    after = 0
    while rows := bind.execute(read, {"after": after}).all():
        values = [{"id_": r.id, "text": text} for r in rows
                  if (text := _shown(r.spec)) is not None]
        if values:  # (an empty list would run the statement once, with no values)
            bind.execute(write, values)
        after = rows[-1].id


def _shown(spec: Any) -> str | None:
    """The command as listings show it, or None for a spec with no command to read (left
    NULL: such a job is not found by its command, and nothing else breaks)."""
    if isinstance(spec, str | bytes):  # a JSON column some driver left undecoded
        spec = json.loads(spec)
    command = spec.get("command") if isinstance(spec, dict) else None
    if isinstance(command, str):
        command = [command]
    if not isinstance(command, list) or not command:
        return None
    return command_name([str(word) for word in command])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("command_text")
