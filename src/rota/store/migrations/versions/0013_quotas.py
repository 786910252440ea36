"""quotas (issue 22): per user and per project limits on GPUs at once, GPU-hours or money
per UTC calendar period (the queue index holds jobs.user and jobs.project since 0012)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28 13:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

def upgrade() -> None:
    op.create_table(
        "quotas",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("what", sa.String(10), nullable=False),
        sa.Column("period", sa.String(10), nullable=False),
        sa.Column("limit", sa.Float, nullable=False),
        sa.Column("hard", sa.Boolean, nullable=False),
        sa.Column("lifted_until", sa.Float, nullable=True),
        sa.Column("set_by", sa.String(100), nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ux_quotas_owner_what", "quotas", ["kind", "name", "what"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_quotas_owner_what", table_name="quotas")
    op.drop_table("quotas")
