"""the scheduler's facts of a job as columns, and a partial index the queue loads from

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 22:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_QUEUE_COLUMNS = ["priority", "id", "gpus", "gpu_mem", "not_before", "allowed_gpus",
                  "after_ids", "mlflow", "state"]
_WAITING = "state NOT IN ('completed', 'failed', 'cancelled', 'timeout')"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("allowed_gpus", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("after_ids", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("mlflow", sa.Boolean(), nullable=True))
    _fill_from_specs()
    op.create_index("ix_jobs_queue", "jobs", _QUEUE_COLUMNS,
                    sqlite_where=sa.text("state = 'pending'"),
                    postgresql_where=sa.text("state = 'pending'"))


def _fill_from_specs() -> None:
    """The new columns of unfinished jobs, from their specs (ended ones never queue again:
    a job run again is a new job)."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"""
            UPDATE jobs SET
              allowed_gpus = (SELECT group_concat(value, ',')
                              FROM json_each(jobs.spec, '$.allowed_gpus')),
              after_ids = (SELECT group_concat(value, ',') FROM json_each(jobs.spec, '$.after')),
              mlflow = json_extract(spec, '$.mlflow')
            WHERE {_WAITING}""")
        return
    op.execute(f"""
        UPDATE jobs SET
          allowed_gpus = (SELECT string_agg(v, ',') FROM json_array_elements_text(
              CASE json_typeof(spec -> 'allowed_gpus') WHEN 'array'
                   THEN spec -> 'allowed_gpus' ELSE '[]' END) AS v),
          after_ids = (SELECT string_agg(v, ',') FROM json_array_elements_text(
              CASE json_typeof(spec -> 'after') WHEN 'array'
                   THEN spec -> 'after' ELSE '[]' END) AS v),
          mlflow = CASE json_typeof(spec -> 'mlflow') WHEN 'boolean'
                        THEN (spec ->> 'mlflow')::boolean END
        WHERE {_WAITING}""")


def downgrade() -> None:
    op.drop_index("ix_jobs_queue", "jobs")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("mlflow")
        batch_op.drop_column("after_ids")
        batch_op.drop_column("allowed_gpus")
