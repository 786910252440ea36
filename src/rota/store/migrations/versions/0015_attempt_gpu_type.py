"""attempts.gpu_type: the kind of GPU an attempt ran on (its first GPU's name, or the type
the job asked an engine for), so fair share can weigh an H100-hour above a T4-hour

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28 14:55:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("gpu_type", sa.String(100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("gpu_type")
