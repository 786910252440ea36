"""jobs.time_limit: the spec's time limit, and with the job's name in the index the queue
loads from, so that a restarted daemon knows how long each waiting job is expected to run
(backfill and start estimates) without reading the specs

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 17:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_PENDING = "state = 'pending'"
_OLD = ["priority", "id", "gpus", "gpu_mem", "not_before", "allowed_gpus", "after_ids",
        "mlflow", "state", "pool", "user", "project", "created_at"]


def _queue_index(columns: list[str]) -> None:
    op.create_index("ix_jobs_queue", "jobs", columns, sqlite_where=sa.text(_PENDING),
                    postgresql_where=sa.text(_PENDING))


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("time_limit", sa.Float, nullable=True))
    # the jobs already stored: their specs' time limits (seconds, or null)
    read = ("(spec::json ->> 'time_limit')::float" if op.get_context().dialect.name
            == "postgresql" else "json_extract(spec, '$.time_limit')")
    op.execute(f"UPDATE jobs SET time_limit = {read}")
    op.drop_index("ix_jobs_queue", "jobs")
    _queue_index([*_OLD, "time_limit", "name"])


def downgrade() -> None:
    op.drop_index("ix_jobs_queue", "jobs")
    _queue_index(_OLD)
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("time_limit")
