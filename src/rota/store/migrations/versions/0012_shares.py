"""shares: the fair share an admin gives a user or a project (none set: 1 each); and the
owner and submission time of a job in the index the queue loads from, so that fair share
orders a restarted daemon's queue without reading the jobs' rows

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 13:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_PENDING = "state = 'pending'"
_OLD = ["priority", "id", "gpus", "gpu_mem", "not_before", "allowed_gpus", "after_ids",
        "mlflow", "state", "pool"]


def _queue_index(columns: list[str]) -> None:
    op.create_index("ix_jobs_queue", "jobs", columns, sqlite_where=sa.text(_PENDING),
                    postgresql_where=sa.text(_PENDING))


def upgrade() -> None:
    op.create_table(
        "shares",
        sa.Column("kind", sa.String(10), primary_key=True),
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("shares", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.drop_index("ix_jobs_queue", "jobs")
    _queue_index([*_OLD, "user", "project", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_queue", "jobs")
    _queue_index(_OLD)
    op.drop_table("shares")
