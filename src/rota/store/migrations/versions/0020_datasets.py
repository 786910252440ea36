"""datasets: registered datasets' versions (rota dataset add); job_datasets: the versions
a job reads (--dataset)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29 11:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("store_url", sa.Text, nullable=False),
        sa.Column("shared", sa.Boolean, nullable=False),
        sa.Column("files", sa.Integer, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("created_by", sa.String(100), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("removed_at", sa.Float, nullable=True),
        sa.UniqueConstraint("owner", "name", "version"),
        sa.UniqueConstraint("owner", "name", "digest"),
    )
    op.create_table(
        "job_datasets",
        sa.Column("job_id", sa.Integer, primary_key=True),
        sa.Column("ref", sa.String(200), primary_key=True),
    )
    op.create_index("ix_job_datasets_ref", "job_datasets", ["ref"])


def downgrade() -> None:
    op.drop_index("ix_job_datasets_ref", table_name="job_datasets")
    op.drop_table("job_datasets")
    op.drop_table("datasets")
