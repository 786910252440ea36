"""pipelines and their rounds (`rota pipeline`): kept across restarts

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28 20:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pipelines",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("format", sa.String(20), nullable=False),
        sa.Column("config_text", sa.Text, nullable=False),
        sa.Column("config_path", sa.Text, nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("paused_reason", sa.Text, nullable=True),
        sa.Column("next_at", sa.Float, nullable=True),
        sa.Column("next_why", sa.Text, nullable=True),
        sa.Column("base_model", sa.Text, nullable=False),
        sa.Column("base_round", sa.Integer, nullable=True),
        sa.Column("base_metric", sa.Float, nullable=True),
        sa.Column("base_metric_data", sa.String(64), nullable=True),
        sa.Column("rounds", sa.Integer, nullable=False),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "pipeline_rounds",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("pipeline_id", sa.Integer, nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("step", sa.String(12), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("jobs", sa.JSON, nullable=False),
        sa.Column("folder", sa.Text, nullable=False),
        sa.Column("data_hash", sa.String(64), nullable=False),
        sa.Column("chunk", sa.Integer, nullable=True),
        sa.Column("chunks", sa.Integer, nullable=True),
        sa.Column("base_model", sa.Text, nullable=False),
        sa.Column("adapter", sa.Text, nullable=True),
        sa.Column("merged_model", sa.Text, nullable=True),
        sa.Column("remote_task", sa.String(100), nullable=True),
        sa.Column("metric", sa.Float, nullable=True),
        sa.Column("base_metric", sa.Float, nullable=True),
        sa.Column("facts", sa.JSON, nullable=False),
        sa.Column("due_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float, nullable=True),
    )
    op.create_index("ix_pipeline_rounds_number", "pipeline_rounds", ["pipeline_id", "number"],
                    unique=True)
    op.create_index("ix_pipeline_rounds_state", "pipeline_rounds", ["state"])


def downgrade() -> None:
    op.drop_index("ix_pipeline_rounds_state", "pipeline_rounds")
    op.drop_index("ix_pipeline_rounds_number", "pipeline_rounds")
    op.drop_table("pipeline_rounds")
    op.drop_table("pipelines")
