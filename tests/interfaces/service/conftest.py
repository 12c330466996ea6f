"""A real server per backend: SQLite with memory backends, and PostgreSQL with real Redis.

Each server runs in its own process on a free port, with its own key file, and lives for
the whole test session: the modules that use it share it (starting one, migrations
included, takes seconds), and stay apart through namespaces, keys and lesson ids of their
own. PostgreSQL servers get a schema of their own in the session's database, so their
lessons never meet other tests' rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from contextstore.store.sync import Store, connect
from tests.backends.sql.conftest import schema_url
from tests.interfaces.service.server import Server
from tests.leftovers import unique_name

BODY_LIMIT = 64 * 1024

BACKENDS = ["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.redis])]


def postgres_schema_url(server_url: str) -> tuple[str, str]:
    """A new schema in the session's database: (its name, a URL whose search_path is it)."""
    schema = f"s_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server_url)
    with admin.begin() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    admin.dispose()
    return schema, schema_url(server_url, schema)


def drop_schema(server_url: str, schema: str) -> None:
    admin = sa.create_engine(server_url)
    with admin.begin() as connection:
        connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


@contextmanager
def running_server(
    request: pytest.FixtureRequest, directory: Path, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """A started server on ``request.param``'s backend (``BACKENDS``); stopped (cleanly, or
    the test fails) and its PostgreSQL schema dropped on the way out."""
    env = env or {}
    if request.param == "sqlite":
        instance = Server(directory, f"sqlite:///{directory / 'store.db'}", env=env)
        instance.start()
        yield instance
        assert instance.stop() == 0, instance.log.read_text()
        return
    server_url: str = request.getfixturevalue("postgres_server_url")
    redis_url: str = request.getfixturevalue("redis_url")
    schema, url = postgres_schema_url(server_url)
    instance = Server(directory, url, redis_url, env=env)
    try:
        instance.start()
        yield instance
        assert instance.stop() == 0, instance.log.read_text()
    finally:
        instance.stop()
        drop_schema(server_url, schema)


@pytest.fixture(scope="session", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A started server (one worker) on this backend; stopped at the session's end."""
    directory: Path = tmp_path_factory.mktemp(f"serve-{request.param}")
    env = {"CONTEXTSTORE_MAX_BODY_BYTES": str(BODY_LIMIT)}
    with running_server(request, directory, env) as instance:
        yield instance


@pytest.fixture(scope="module")
def store(server: Server) -> Iterator[Store]:
    """The server's database, opened directly, to arrange rows and check what was written."""
    opened = connect(database_url=server.database_url, redis_url="")
    yield opened
    opened.close()


@pytest.fixture
def fresh_namespace(server: Server) -> Iterator[str]:
    """A namespace no other test uses; its Redis keys are deleted afterwards, with those of
    the namespaces a test names after it (``f"{fresh_namespace}-other"``)."""
    namespace = unique_name("ns")
    yield namespace
    if server.redis_url:
        client = redis.Redis.from_url(server.redis_url)
        for key in client.scan_iter(match=f"cs:{{{namespace}*}}:*", count=500):
            client.delete(key)
        client.close()
