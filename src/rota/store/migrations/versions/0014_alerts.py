"""alerts: the durable outbox of webhook alerts (rota.server.policy.alert_sender), one row per
once-only key

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28 13:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(200), nullable=False, unique=True),
        sa.Column("user", sa.String(100), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_try_at", sa.Float, nullable=False),
        sa.Column("sent_at", sa.Float, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
    )
    op.create_index("ix_alerts_state", "alerts", ["state"])
    op.create_index("ix_alerts_user", "alerts", ["user"])


def downgrade() -> None:
    op.drop_index("ix_alerts_user", "alerts")
    op.drop_index("ix_alerts_state", "alerts")
    op.drop_table("alerts")
