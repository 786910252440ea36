"""jobs.workspace: false for a job that needs no workspace (spec ``workspace: false``),
NULL for every other; in the index the queue loads from, so that a restarted daemon does
not hold such a job for its workspace's size quota or for its bucket copy

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 17:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_PENDING = "state = 'pending'"
_OLD = ["priority", "id", "gpus", "gpu_mem", "not_before", "allowed_gpus", "after_ids",
        "mlflow", "state", "pool", "user", "project", "created_at", "time_limit", "name"]


def _queue_index(columns: list[str]) -> None:
    op.create_index("ix_jobs_queue", "jobs", columns, sqlite_where=sa.text(_PENDING),
                    postgresql_where=sa.text(_PENDING))


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("workspace", sa.Boolean, nullable=True))
    # the jobs already stored whose specs say they need none
    read = ("(spec::json ->> 'workspace') = 'false'" if op.get_context().dialect.name
            == "postgresql" else "json_extract(spec, '$.workspace') = 0")
    op.execute(f"UPDATE jobs SET workspace = false WHERE {read}")
    op.drop_index("ix_jobs_queue", "jobs")
    _queue_index([*_OLD, "workspace"])


def downgrade() -> None:
    op.drop_index("ix_jobs_queue", "jobs")
    _queue_index(_OLD)
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("workspace")
