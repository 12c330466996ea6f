"""Hostile values through the main commands, on SQLite and PostgreSQL.

Arguments and options get NUL and other control characters, lone surrogates (what Python
makes of bytes in ``argv`` that are not UTF-8), integers far wider than a column, long
strings, many tags and filters. Whatever the command, it exits 0, 1 or 2; a failure is
exactly one ``error:`` line, never a traceback, and never says a healthy database is down.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from contextstore.interfaces.cli import app
from tests.backends.sql.conftest import database_url, empty_database_url
from tests.hostile import HUGE_INTEGERS, INTEGER, TEXT, examples

__all__ = ["database_url", "empty_database_url"]  # fixtures, re-used from tests/backends/sql

pytestmark = pytest.mark.slow

VALUE = st.one_of(HUGE_INTEGERS.map(str), TEXT, INTEGER.map(str))
REPEATED = st.integers(min_value=0, max_value=70)


def option(name: str, values: st.SearchStrategy[str] = VALUE) -> st.SearchStrategy[list[str]]:
    """``[name, value]`` or nothing."""
    return st.one_of(st.just([]), values.map(lambda value: [name, value]))


def repeated(name: str, values: st.SearchStrategy[str] = VALUE) -> st.SearchStrategy[list[str]]:
    """``name value`` up to 70 times (scopes have a bound of 64)."""
    return st.lists(values, max_size=70).map(
        lambda found: [part for value in found for part in (name, value)]
    )


def command(*parts: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    return st.tuples(*parts).map(lambda lists: [arg for part in lists for arg in part])


def fixed(*args: str) -> st.SearchStrategy[list[str]]:
    return st.just(list(args))


def argument() -> st.SearchStrategy[list[str]]:
    return VALUE.map(lambda value: [value])


COMMANDS: dict[str, st.SearchStrategy[list[str]]] = {
    "lessons list": command(
        fixed("lessons", "list"),
        option("--status"),
        option("--severity"),
        option("--key"),
        option("--tag"),
        option("--limit"),
        option("--offset"),
        option("--format", st.sampled_from(["table", "plain", "csv", "json"])),
    ),
    "lessons show": command(fixed("lessons", "show"), argument()),
    "lessons add": command(
        fixed("lessons", "add"),
        argument(),
        option("--form"),
        repeated("--key"),
        option("--severity"),
        option("--summary"),
        option("--created-at"),
    ),
    "lessons edit": command(
        fixed("lessons", "edit"), argument(), option("--summary"), option("--severity")
    ),
    "lessons activate": command(fixed("lessons", "activate"), argument()),
    "match": command(
        fixed("match"),
        repeated("--tag"),
        repeated("--entity"),
        option("--k"),
        option("--bytes"),
        option("--query"),
        st.sampled_from([[], ["--explain"]]),
    ),
    "run": command(fixed("run"), argument(), repeated("--tag"), option("--budget")),
    "docs search": command(
        fixed("docs", "search"),
        argument(),
        option("--top-k"),
        st.lists(VALUE.map(lambda v: f"k={v}"), max_size=40).map(
            lambda pairs: [arg for pair in pairs for arg in ("--filter", pair)]
        ),
    ),
    "docs list": command(
        fixed("docs", "list"), option("--prefix"), option("--limit"), option("--offset")
    ),
    "docs show": command(fixed("docs", "show"), argument()),
    "docs add": command(fixed("docs", "add"), argument(), option("--text"), option("--metadata")),
    "metrics report": command(
        fixed("metrics", "report"), option("--since"), option("--worker-prefix"), option("--lesson")
    ),
}


def check(result: Any) -> None:
    assert isinstance(result.exception, SystemExit | None), repr(result.exception)
    assert result.exit_code in (0, 1, 2), result.exit_code
    assert "Traceback" not in result.output + (result.stderr or "")
    if result.exit_code != 0:
        assert result.stderr.startswith("error:"), result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        assert "is unavailable" not in result.stderr, result.stderr


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_main_commands_refuse_hostile_values_in_one_line(database_url: str, name: str) -> None:
    @examples(default=8, ci=120)
    @given(args=COMMANDS[name])
    def hostile(args: list[str]) -> None:
        result = CliRunner().invoke(
            app, [*args, "--database-url", database_url], env={"COLUMNS": "100"}
        )
        check(result)

    hostile()
