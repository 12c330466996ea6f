"""Migration 0018 run by a role that may not create pgvector (it is not a trusted extension):
the upgrade succeeds without vectors, and adds them once a superuser has created it."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.database import create_database_engine, downgrade, migrate
from contextstore.backends.sql.knowledge.vectors import hnsw_dimensions

pytestmark = pytest.mark.pgvector


def column_names(connection: sa.Connection) -> set[str]:
    """``chunks``' columns, read without reflecting types SQLAlchemy does not know."""
    if connection.dialect.name == "sqlite":
        return {row[1] for row in connection.exec_driver_sql("PRAGMA table_info(chunks)")}
    query = (
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = 'chunks' AND table_schema = current_schema()"
    )
    return set(connection.exec_driver_sql(query).scalars())


def vector_column(url: str) -> tuple[bool, tuple[int, ...]]:
    engine = create_database_engine(url)
    try:
        with engine.connect() as connection:
            columns = column_names(connection)
            return "embedding_vector" in columns, hnsw_dimensions(connection)
    finally:
        engine.dispose()


def test_a_role_that_may_not_create_pgvector_upgrades_without_vectors(
    pgvector_admin_url: str,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    name, role = f"noext_{suffix}", f"owner_{suffix}"
    admin = sa.create_engine(pgvector_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
        connection.exec_driver_sql(f'CREATE DATABASE "{name}" OWNER "{role}"')
    as_owner = sa.make_url(pgvector_admin_url).set(database=name, username=role)
    owner_url = as_owner.render_as_string(hide_password=False)
    superuser_url = sa.make_url(pgvector_admin_url).set(database=name)
    try:
        migrate(owner_url)
        assert vector_column(owner_url) == (False, ())
        superuser = sa.create_engine(superuser_url, isolation_level="AUTOCOMMIT")
        with superuser.connect() as connection:
            connection.exec_driver_sql("CREATE EXTENSION vector")
        superuser.dispose()
        downgrade(owner_url, "0017_knowledge_settings")
        migrate(owner_url)
        assert vector_column(owner_url) == (True, (256, 384, 512, 768, 1024, 1536))
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            connection.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
        admin.dispose()
