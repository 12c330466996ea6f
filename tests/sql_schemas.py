"""PostgreSQL schemas for tests: a schema's URL, and the run's migration recorded once and
replayed into each test's empty schema (``postgres_migration_script``, registered for the
whole tree by tests/conftest.py, since SQL fixtures are used far beyond tests/backends/sql).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.database import migrate

__all__ = ["postgres_migration_script", "replay_migration", "schema_url"]


def schema_url(server_url: str, schema: str) -> str:
    """The URL of ``schema`` in the database at ``server_url`` (its ``search_path``, after the
    server URL's own options)."""
    url = sa.make_url(server_url)
    options = " ".join(filter(None, [url.query.get("options"), f"-csearch_path={schema}"]))
    return url.update_query_dict({"options": options}).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_migration_script(postgres_server_url: str) -> str:
    """What migrating an empty schema to head sends to PostgreSQL, as one script.

    Recorded once per run from a real ``migrate`` into a schema of its own (then dropped).
    The statements sent with parameters are alembic's reads of the catalog and the
    migration lock, which a fresh schema of one test needs neither of; every other statement
    is replayed as sent. Alembic's hundred round trips take about twice as long as the one
    script, and ``test_migrations`` checks that a replayed schema equals a migrated one.
    """
    schema = f"m_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_server_url)
    sent: list[tuple[str, Any]] = []
    try:
        with admin.begin() as connection:
            connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        recorder = sa.create_engine(schema_url(postgres_server_url, schema))

        @sa.event.listens_for(recorder, "before_cursor_execute")
        def record(*args: Any) -> None:
            _connection, _cursor, statement, parameters, _context, _many = args
            sent.append((statement, parameters))

        migrate(recorder)
        recorder.dispose()
    finally:
        with admin.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()
    reads = [statement for statement, parameters in sent if parameters]
    assert all(statement.lstrip().startswith("SELECT") for statement in reads), reads
    # Sent with (empty) parameters, the driver read "%%" as "%"; a script without
    # parameters is sent as written.
    return ";\n".join(
        statement.replace("%%", "%") for statement, parameters in sent if not parameters
    )


def replay_migration(url: str, script: str) -> None:
    """Run ``postgres_migration_script`` in the empty schema at ``url``, in one transaction."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            # The driver's own execute: a script without parameters may hold many statements.
            connection.connection.dbapi_connection.cursor().execute(script)
    finally:
        engine.dispose()
