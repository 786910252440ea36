"""Alembic environment: run on the connection the daemon hands over."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from rota.store.tables import Base

target_metadata = Base.metadata
conn = context.config.attributes.get("connection")
if conn is None:  # `alembic revision --autogenerate` run by a developer
    url = context.config.get_main_option("sqlalchemy.url") or "sqlite:///rota-dev.db"
    with create_engine(url).connect() as c:
        context.configure(connection=c, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
