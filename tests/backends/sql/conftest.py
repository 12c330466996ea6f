"""SQL fixtures: every test body runs on SQLite (a temporary file) and on PostgreSQL.

PostgreSQL runs when ``CONTEXTSTORE_TEST_POSTGRES_URL`` is set: each test gets a schema of its
own inside the session's database (``search_path`` set through the URL), so tests never see
each other's rows and a migration test can start from nothing. A migrated schema is made by
replaying, in one round trip, the statements a real migration sent once in the run (see
``postgres_migration_script`` in tests/sql_schemas.py, a fixture every test directory
sees); SQLite copies a file migrated once.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.knowledge.builds import wait_for_build_tasks
from contextstore.backends.sql.repository import LessonRepository
from tests.aio import Blocking
from tests.sql_schemas import replay_migration, schema_url

DIALECTS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
# The three ways vectors are searched: sqlite-vec, PostgreSQL without pgvector (the system
# server: an exact scan), and PostgreSQL with pgvector (started by the tests).
VECTOR_DATABASES = [*DIALECTS, pytest.param("pgvector", marks=pytest.mark.pgvector)]
ALL_DATABASES = pytest.mark.parametrize("empty_database_url", VECTOR_DATABASES, indirect=True)
# For a test of one dialect's own feature (SQLite's REPLACE, PostgreSQL's TRUNCATE): it runs
# on that dialect only, rather than being skipped on the other.
SQLITE_ONLY = pytest.mark.parametrize("empty_database_url", ["sqlite"], indirect=True)
POSTGRES_ONLY = pytest.mark.parametrize(
    "empty_database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)


@pytest.fixture(params=DIALECTS)
def empty_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The URL of an empty, never-migrated database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('sql') / 'lessons.db'}"
        return
    search_path = "{schema}"
    if request.param == "pgvector":
        server_url: str = request.getfixturevalue("pgvector_admin_url")
        # pgvector lives in public, once per database; each test's schema comes first.
        search_path = "{schema},public"
    else:
        server_url = request.getfixturevalue("postgres_server_url")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server_url)
    with admin.begin() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield schema_url(server_url, search_path.format(schema=schema))
    finally:
        with admin.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture
def database_url(
    request: pytest.FixtureRequest, empty_database_url: str, migrated_sqlite_file: Path
) -> str:
    """The URL of a fresh database migrated to head: on SQLite a copy of the run's migrated
    file (the same bytes, without running every migration again for each test), on
    PostgreSQL the run's recorded migration replayed into the test's empty schema."""
    url = sa.make_url(empty_database_url)
    callspec = getattr(request.node, "callspec", None)
    if url.get_backend_name() == "sqlite" and url.database:
        shutil.copyfile(migrated_sqlite_file, url.database)
    elif callspec is not None and callspec.params.get("empty_database_url") == "pgvector":
        # The recorded script is the system server's, which has no pgvector to migrate for.
        migrate(empty_database_url)
    else:
        replay_migration(empty_database_url, request.getfixturevalue("postgres_migration_script"))
    return empty_database_url


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    engine = create_database_engine(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


class TickingClock:
    """A clock that moves one millisecond forward each time it is read."""

    def __init__(self, start: datetime = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)):
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock()


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    """``sync``: the repository itself; ``async``: its asyncio twin on aiosqlite / psycopg
    async, driven through ``tests.aio.Blocking`` so the same test bodies cover both."""
    return str(request.param)


@contextmanager
def flavoured(flavour: str, database_url: str, make_sync: Any, make_async: Any) -> Iterator[Any]:
    """``make_sync()``, or ``make_async(async_engine)`` behind ``Blocking`` on a loop of its own."""
    if flavour == "sync":
        yield make_sync()
        return
    from contextstore.backends.sql.aio import create_async_database_engine

    with asyncio.Runner() as runner:
        async_engine = create_async_database_engine(database_url)
        try:
            yield Blocking(make_async(async_engine), runner)
        finally:
            # A local index build the test started is a task of this loop: let it end
            # before its engine is disposed of.
            runner.run(wait_for_build_tasks())
            runner.run(async_engine.dispose())


@pytest.fixture
def sync_repo(engine: sa.Engine, clock: TickingClock) -> LessonRepository:
    """The sync repository only: for tests of its transactions or of the statements its
    engine sends (the async one sends the same, through another engine)."""
    return LessonRepository(engine, clock=clock)


@pytest.fixture
def repo(
    engine: sa.Engine, clock: TickingClock, flavour: str, database_url: str
) -> Iterator[LessonRepository]:
    from contextstore.backends.sql.aio import AsyncLessonRepository

    with flavoured(
        flavour,
        database_url,
        lambda: LessonRepository(engine, clock=clock),
        lambda async_engine: AsyncLessonRepository(async_engine, clock=clock),
    ) as made:
        yield made


def counts(engine: sa.Engine) -> tuple[int, int, int]:
    """(lessons, lesson_scopes, lesson_events) row counts: to prove nothing was written."""
    with engine.connect() as connection:
        return tuple(
            connection.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
            for table in ("lessons", "lesson_scopes", "lesson_events")
        )
