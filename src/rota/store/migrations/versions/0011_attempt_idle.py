"""attempts.idle_seconds: GPU-seconds an attempt held idle GPUs (rota.core.idle)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 13:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("idle_seconds", sa.Float(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("idle_seconds")
