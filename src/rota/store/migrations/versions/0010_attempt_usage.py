"""attempts.tier and attempts.price: the tier an attempt ran on and its price per GPU-hour,
fixed when it starts so a later change of prices never rewrites what was spent

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28 13:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("tier", sa.String(40), nullable=True))
        batch.add_column(sa.Column("price", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("price")
        batch.drop_column("tier")
