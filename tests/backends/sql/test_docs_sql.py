"""The plain-SQL example of the lessons guide runs as written, in the sqlite3 shell's way and
psql's: the statements it marks ``audited`` are, and those it marks ``refused`` are refused."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from tests.docs.pages import marked_blocks


def example_statements() -> list[tuple[str, str]]:
    """(statement, trailing comment) for each statement of the guide's marked ``sql`` block."""
    [block] = marked_blocks("sql")
    assert block.page == "guides/lessons.md"
    statements, pending = [], ""
    for line in block.code.splitlines():
        code, _, comment = line.partition("--")
        pending += code + "\n"
        if code.rstrip().endswith(";"):
            statements.append((pending.strip().rstrip(";"), comment.strip()))
            pending = ""
    return statements


def test_the_example_is_the_one_described() -> None:
    statements = example_statements()
    comments = [comment for _, comment in statements]
    assert comments == ["", "", "audited", "refused", "refused", "refused"]
    assert not any("now()" in statement.lower() for statement, _ in statements)


# Why each refused statement is refused, in the order the guide lists them.
REFUSALS = [r"created_at (is|are) immutable", r"lesson lifecycle", r"append-only"]


def run_example(execute: Callable[[str], Any]) -> None:
    statements = example_statements()
    refused = [statement for statement, comment in statements if comment == "refused"]
    for statement, comment in statements:
        if comment != "refused":
            execute(statement)
    assert len(refused) == len(REFUSALS)
    for statement, reason in zip(refused, REFUSALS, strict=True):
        with pytest.raises(Exception, match=reason):
            execute(statement)


def test_the_example_runs_as_written(database_url: str) -> None:
    url = sa.make_url(database_url)
    if url.get_backend_name() == "sqlite":
        # As the sqlite3 shell runs it: autocommit, foreign keys switched on first.
        connection = sqlite3.connect(str(url.database), isolation_level=None)
        connection.execute("PRAGMA foreign_keys=ON")
        try:
            run_example(connection.execute)
            events = connection.execute(
                "SELECT event, old_status, new_status FROM lesson_events ORDER BY id"
            ).fetchall()
        finally:
            connection.close()
    else:
        # As psql runs it: every statement its own transaction.
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                run_example(connection.exec_driver_sql)
                events = [
                    tuple(row)
                    for row in connection.exec_driver_sql(
                        "SELECT event, old_status, new_status FROM lesson_events ORDER BY id"
                    )
                ]
        finally:
            engine.dispose()
    assert events == [
        ("insert", None, "active"),
        ("scope", None, None),
        ("status", "active", "retired"),
    ]
