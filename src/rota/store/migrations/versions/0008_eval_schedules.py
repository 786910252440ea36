"""evaluation schedules (`rota eval schedule`): kept across restarts

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "eval_schedules",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("config_text", sa.Text, nullable=False),
        sa.Column("config_path", sa.Text, nullable=False),
        sa.Column("git_commit", sa.String(64), nullable=True),
        sa.Column("git_dirty", sa.Boolean, nullable=True),
        sa.Column("pool", sa.String(40), nullable=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("every_s", sa.Float, nullable=True),
        sa.Column("next_at", sa.Float, nullable=True),
        sa.Column("job_id", sa.Integer, nullable=True),
        sa.Column("evaluated", sa.JSON, nullable=False),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.Column("last_job", sa.Integer, nullable=True),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("disabled_reason", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_eval_schedules_enabled", "eval_schedules", ["enabled"])


def downgrade() -> None:
    op.drop_index("ix_eval_schedules_enabled", "eval_schedules")
    op.drop_table("eval_schedules")
