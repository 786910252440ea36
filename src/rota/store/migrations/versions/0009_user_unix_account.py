"""users.unix_account: the Unix account a Rota user's jobs run as (`rota user add --unix`)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28 06:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("unix_account", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("unix_account")
