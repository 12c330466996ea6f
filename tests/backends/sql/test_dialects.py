"""The dialect interface: chosen once by name, the only place that names a database, and the
error tables read through an error's causes."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

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

PACKAGE = REPO_ROOT / "contextstore"
DIALECTS_DIR = PACKAGE / "backends" / "sql" / "dialects"
NAMES = frozenset({"sqlite", "postgresql", "postgres"})


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {text for element in node.elts for text in _strings(element)}
    return set()


def _names_a_dialect(node: ast.AST) -> bool:
    """``<…>.dialect.name``, ``dialect.name``, ``dialect_of(…).name``: a dialect's name."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "name"
        and "dialect" in ast.unparse(node.value).lower()
    )


def _compares_a_name(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare):
        return False
    operands = [node.left, *node.comparators]
    return any(_strings(operand) & NAMES or _names_a_dialect(operand) for operand in operands)


def _reads_sqlalchemy_name(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "name"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "dialect"
    )


def _tests_a_dialect_class(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance"):
        return False
    classes = ast.unparse(node.args[-1])
    return "SQLiteDialect" in classes or "PostgreSQLDialect" in classes


def dialect_name_branches(source: str) -> list[str]:
    """The expressions of ``source`` that compare a dialect's name, read SQLAlchemy's
    dialect name (``<…>.dialect.name``) or test for a ``Dialect`` class."""
    checks = (_compares_a_name, _reads_sqlalchemy_name, _tests_a_dialect_class)
    return [
        ast.unparse(node)
        for node in ast.walk(ast.parse(source))
        if any(check(node) for check in checks)
    ]


def _checked(path: Path) -> bool:
    return not path.is_relative_to(DIALECTS_DIR)


@pytest.mark.parametrize(
    "path",
    [path for path in sorted(PACKAGE.rglob("*.py")) if _checked(path)],
    ids=lambda path: str(path.relative_to(PACKAGE)),
)
def test_no_module_outside_the_dialects_branches_on_a_dialect_name(path: Path) -> None:
    # What differs between the databases is a method or attribute of ``Dialect``
    # (docs/decisions/0082): a module asks ``dialect_of(...)``, it never compares names.
    assert dialect_name_branches(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        'if engine.dialect.name == "postgresql": pass',
        'reset = dialect != "sqlite"',
        'aliases = name in ("postgres", "postgresql")',
        "same = dialect_of(engine).name == other",
        "key = connection.dialect.name",
        "pg = isinstance(dialect, PostgreSQLDialect)",
    ],
)
def test_the_scan_finds_a_branch_on_a_dialect_name(source: str) -> None:
    assert dialect_name_branches(source) != []


def test_the_scan_leaves_asking_the_dialect_alone() -> None:
    source = (
        "dialect = dialect_of(engine)\n"
        "dialect.name_actor(session, actor)\n"
        "statement = STATEMENTS[dialect.name]\n"
        'variant = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")\n'
    )
    assert dialect_name_branches(source) == []


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
