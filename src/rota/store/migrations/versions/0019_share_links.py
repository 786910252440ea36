"""share_links: links to a job's saved outputs that need no account (rota share-link);
workspace_quotas: a workspace's own size quota (rota workspace quota)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29 08:55:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "share_links",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("job_id", sa.Integer, nullable=False),
        sa.Column("path", sa.Text, nullable=True),
        sa.Column("created_by", sa.String(100), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
        sa.Column("downloads", sa.Integer, nullable=False),
    )
    op.create_index("ix_share_links_job_id", "share_links", ["job_id"])
    op.create_table(
        "workspace_quotas",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("limit", sa.BigInteger, nullable=False),
        sa.Column("set_by", sa.String(100), nullable=False),
        sa.Column("set_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("workspace_quotas")
    op.drop_index("ix_share_links_job_id", table_name="share_links")
    op.drop_table("share_links")
