"""an index of job names: a submit looks up the last peak of each name it brings

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 02:40:00
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_name", "jobs", ["name"])


def downgrade() -> None:
    op.drop_index("ix_jobs_name", table_name="jobs")
