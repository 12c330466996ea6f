"""The dialect interface: chosen once by name, the only place that names a database, and the
error tables read through an error's causes."""

from __future__ import annotations

import re
import sqlite3

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.dialects import (
    DIALECTS,
    PostgreSQLDialect,
    SQLiteDialect,
    dialect_of,
)
from contextstore.backends.sql.errors import is_conflict, is_lock, is_undecodable
from contextstore.errors import BackendUnavailableError, ConfigurationError
from tests import REPO_ROOT

SQL = REPO_ROOT / "contextstore" / "backends" / "sql"
# The modules laid out by concern and the shared ones: none compares dialect names.
BY_CONCERN = [
    *sorted((SQL / "lessons").glob("*.py")),
    *sorted((SQL / "metrics").glob("*.py")),
    *(
        SQL / name
        for name in (
            "aio.py",
            "async_direct.py",
            "bridge.py",
            "database.py",
            "errors.py",
            "graph_items.py",
            "proposals.py",
            "transactions.py",
            "unreadable.py",
        )
    ),
]
COMPARISON = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](sqlite|postgresql)["']""")


@pytest.mark.parametrize("path", BY_CONCERN, ids=lambda path: path.name)
def test_no_module_by_concern_compares_dialect_names(path) -> None:
    found = [
        line.strip()
        for line in path.read_text(encoding="utf-8").splitlines()
        if COMPARISON.search(line)
    ]
    assert found == []


def test_the_dialect_is_chosen_by_name_once() -> None:
    engine = sa.create_engine("sqlite://")
    try:
        assert dialect_of(engine) is DIALECTS["sqlite"]
        assert isinstance(dialect_of(engine), SQLiteDialect)
        assert isinstance(dialect_of("postgresql"), PostgreSQLDialect)
        assert dialect_of(engine.dialect) is dialect_of("sqlite")
    finally:
        engine.dispose()
    with pytest.raises(ConfigurationError, match="'mysql'"):
        dialect_of("mysql")


def test_a_lock_is_read_through_the_translated_errors_causes() -> None:
    driver = sqlite3.OperationalError("database is locked")
    wrapped = sa.exc.OperationalError("INSERT", {}, driver)
    translated = BackendUnavailableError("the database is unavailable")
    translated.__cause__ = wrapped
    assert is_lock(DIALECTS["sqlite"], translated)
    assert not is_lock(DIALECTS["postgresql"], translated)
    assert not is_lock(DIALECTS["sqlite"], BackendUnavailableError("disk I/O error"))


class _PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("sqlstate", "conflict"), [("40001", True), ("40P01", True), ("23505", True), ("23503", False)]
)
def test_a_conflict_is_an_sqlstate_of_the_postgresql_table(sqlstate: str, conflict: bool) -> None:
    error = BackendUnavailableError("refused")
    error.__cause__ = sa.exc.DBAPIError("UPDATE", {}, _PgError(sqlstate))
    assert is_conflict(DIALECTS["postgresql"], error) is conflict
    assert not is_conflict(DIALECTS["sqlite"], error)


def test_undecodable_text_is_read_from_the_sqlite_table() -> None:
    error = sa.exc.OperationalError(
        "SELECT", {}, sqlite3.OperationalError("Could not decode to UTF-8 column 'summary'")
    )
    assert is_undecodable(DIALECTS["sqlite"], error)
    assert not is_undecodable(DIALECTS["postgresql"], error)
