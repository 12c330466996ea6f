"""Service fixtures shared by every test module.

Real PostgreSQL and Redis tests run when their URL is set (``.ci/run`` sets both) and skip
locally when it is not. A URL that is set but unreachable fails the test loudly: CI must
never pass by skipping. Every run gets its own PostgreSQL database and Redis namespaces, so
parallel runs on one machine never see each other's data.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.backends import *  # noqa: F403  (the backend-parametrised fixtures)

pytest_plugins = ["tests.redis_cluster"]

# No property test asserts speed, and a loaded CI machine can stall any example past
# hypothesis's default 200 ms deadline: a timing flake would fail a correct run.
settings.register_profile("contextstore", deadline=None)
# CI (``CONTEXTSTORE_TEST_HYPOTHESIS=ci``, set by ``.ci/run``) draws each property test's
# examples from a seed derived from the test itself: the same examples every run, so a run
# that passed before landing passes in CI. A developer's run draws new ones each time.
settings.register_profile("ci", settings.get_profile("contextstore"), derandomize=True)
settings.load_profile(os.environ.get("CONTEXTSTORE_TEST_HYPOTHESIS", "contextstore"))

POSTGRES_ENV = "CONTEXTSTORE_TEST_POSTGRES_URL"
REDIS_ENV = "CONTEXTSTORE_TEST_REDIS_URL"


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset the variables the command line reads, so a test sees only what it sets."""
    for name in (
        "CONTEXTSTORE_DATABASE_URL",
        "CONTEXTSTORE_REDIS_URL",
        "CONTEXTSTORE_NAMESPACE",
        "CONTEXTSTORE_API_KEYS",
    ):
        monkeypatch.delenv(name, raising=False)


def unique_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """The URL of a PostgreSQL server database we may create databases from."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"{POSTGRES_ENV} is not set")
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(url)
        with engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))
        engine.dispose()
    except Exception as exc:  # any driver error means the service is not usable
        pytest.fail(f"{POSTGRES_ENV}={url} is set but PostgreSQL is unreachable: {exc}")
    return url


@pytest.fixture(scope="session")
def postgres_server_url(postgres_admin_url: str) -> Iterator[str]:
    """A database of its own for this test session (dropped at the end), as a URL."""
    import sqlalchemy as sa

    name = unique_name("cs_test")
    admin = sa.create_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(postgres_admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The URL of a real Redis server (never flushed: tests use their own namespaces)."""
    url = os.environ.get(REDIS_ENV)
    if not url:
        pytest.skip(f"{REDIS_ENV} is not set")
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        client.ping()
        client.close()
    except Exception as exc:
        pytest.fail(f"{REDIS_ENV}={url} is set but Redis is unreachable: {exc}")
    return url


@pytest.fixture
def namespace() -> str:
    """A namespace no other test (or test run) uses."""
    return unique_name("t")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """In CI (``CONTEXTSTORE_TEST_REQUIRE_SERVICES=1``) a skipped test is a failed test."""
    outcome = yield
    report = outcome.get_result()
    required = os.environ.get("CONTEXTSTORE_TEST_REQUIRE_SERVICES") == "1"
    if required and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped in CI, where every service must be reachable: {reason}"
