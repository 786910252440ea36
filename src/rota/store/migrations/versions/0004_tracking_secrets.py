"""experiment-tracker runs of each job; users' encrypted secrets

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 23:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("tracking", sa.JSON(), nullable=True))
    op.create_table(
        "secrets",
        sa.Column("user", sa.String(length=100), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("user", "name"),
    )


def downgrade() -> None:
    op.drop_table("secrets")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("tracking")
