"""the pool a job runs in (NULL: this machine), in the index the queue loads from

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 02:30:00

Jobs stored before pools existed all run on this machine: the new column stays NULL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_OLD = ["priority", "id", "gpus", "gpu_mem", "not_before", "allowed_gpus", "after_ids",
        "mlflow", "state"]
_PENDING = "state = 'pending'"


def _queue_index(columns: list[str]) -> None:
    op.create_index("ix_jobs_queue", "jobs", columns, sqlite_where=sa.text(_PENDING),
                    postgresql_where=sa.text(_PENDING))


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("pool", sa.String(40), nullable=True))
    op.drop_index("ix_jobs_queue", "jobs")
    _queue_index([*_OLD, "pool"])


def downgrade() -> None:
    op.drop_index("ix_jobs_queue", "jobs")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("pool")
    _queue_index(_OLD)
