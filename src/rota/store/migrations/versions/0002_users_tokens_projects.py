"""users and API tokens; job project and tags columns

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 19:55:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user", sa.String(length=100), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_used_at", sa.Float(), nullable=True),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["user"], ["users.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
    )
    with op.batch_alter_table("tokens") as batch_op:
        batch_op.create_index("ix_tokens_user", ["user"], unique=False)
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("project", sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column("tags", sa.Text(), nullable=False, server_default=""))
        batch_op.create_index("ix_jobs_project", ["project"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_index("ix_jobs_project")
        batch_op.drop_column("tags")
        batch_op.drop_column("project")
    op.drop_table("tokens")
    op.drop_table("users")
