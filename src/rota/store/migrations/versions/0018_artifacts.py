"""artifacts: what a job's outputs saved when it ended (rota.server.storage.artifacts)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 08:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "artifacts",
        sa.Column("job_id", sa.Integer, primary_key=True),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("store_url", sa.Text, nullable=False),
        sa.Column("sources", sa.JSON, nullable=False),
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("files", sa.Integer, nullable=True),
        sa.Column("bytes", sa.BigInteger, nullable=True),
        sa.Column("skipped", sa.JSON, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("requested_at", sa.Float, nullable=False),
        sa.Column("saved_at", sa.Float, nullable=True),
    )
    op.create_index("ix_artifacts_state", "artifacts", ["state"])


def downgrade() -> None:
    op.drop_index("ix_artifacts_state", table_name="artifacts")
    op.drop_table("artifacts")
