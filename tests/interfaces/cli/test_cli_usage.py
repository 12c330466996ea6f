"""What every command inherits from the root: one-line usage errors, plain flags in help, JSON
numbers, and a missing optional driver that names its extra."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner, Result

from contextstore.backends.sql.database import create_database_engine
from contextstore.errors import ConfigurationError, MissingExtraError
from contextstore.interfaces.cli import app
from contextstore.interfaces.cli.common import print_json

runner = CliRunner()


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("CONTEXTSTORE_REDIS_URL", "CONTEXTSTORE_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CONTEXTSTORE_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")


def invoke(*args: str) -> Result:
    # Wide enough that Rich never wraps a line: a test sees exactly the lines a user would.
    return runner.invoke(app, list(args), env={"COLUMNS": "250"})


def command_paths() -> Iterator[tuple[list[str], Any]]:
    """Every command and group under the root, as (argv prefix, click command)."""

    def walk(prefix: list[str], command: Any) -> Iterator[tuple[list[str], Any]]:
        yield prefix, command
        for name, child in getattr(command, "commands", {}).items():
            yield from walk([*prefix, name], child)

    yield from walk([], get_command(app))


ALL_COMMANDS = [path for path, _ in command_paths()]


def assert_usage_error(result: Result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.splitlines() == [result.stderr.rstrip("\n")], result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert message in result.stderr, result.stderr
    assert "Usage:" not in result.stderr and "╭" not in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["lessons", "list", "--limit", "abc"],
            "error: Invalid value for '--limit': Input should be a valid integer, unable to parse "
            "string as an integer (see 'contextstore lessons list --help')",
        ),
        (
            ["lessons", "list", "--limit", "-1"],
            "error: Invalid value for '--limit': Input should be greater than or equal to 0",
        ),
        (
            ["lessons", "add"],
            "error: Missing argument 'entity_id'. (see 'contextstore lessons add --help')",
        ),
        (["lessons", "add", "a.b"], "error: Missing option '--form' / '-f'."),
        (["run"], "error: Missing argument 'query'. (see 'contextstore run --help')"),
        (["fleet", "--workers", "two"], "error: Invalid value for '--workers'"),
        (["match", "--k", "x"], "error: Invalid value for '--k'"),
        (["db", "upgrade", "a", "b"], "error: Got unexpected extra argument(s) (b)"),
        (["nope"], "error: No such command 'nope'. (see 'contextstore --help')"),
        (["lessons", "nope"], "error: No such command 'nope'. (see 'contextstore lessons --help')"),
        (["--nope"], "error: No such option: --nope"),
    ],
)
def test_a_usage_error_is_one_error_line_and_exit_2(args: list[str], message: str) -> None:
    assert_usage_error(invoke(*args), message)


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda path: " ".join(path) or "root")
def test_every_command_reports_an_unknown_option_on_one_line(path: list[str]) -> None:
    result = invoke(*path, "--xyzzy")
    command = " ".join(["contextstore", *path])
    assert_usage_error(result, f"No such option: --xyzzy (see '{command} --help')")


def test_the_library_refusal_backstop_is_one_line_and_exit_1(tmp_path: Path) -> None:
    # fleet opens the store outside any handler of its own: the root still makes it one line.
    url = f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}"
    result = invoke("fleet", "--workers", "1", "--queries", "1", "--database-url", url)
    assert result.exit_code == 1, result.output
    note, error = result.stderr.splitlines()
    assert note.startswith("note: no PostgreSQL or Redis configured")
    assert error.startswith("error: database URL ")
    assert error.endswith("missing-dir' does not exist")
    assert "Traceback" not in result.output


def test_a_group_without_a_subcommand_prints_its_help() -> None:
    result = invoke("lessons")
    assert result.exit_code == 2
    assert "Usage: contextstore lessons" in result.stdout
    assert "error:" not in result.output


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda path: " ".join(path) or "root")
def test_help_lists_flags_without_a_bool_type(path: list[str]) -> None:
    result = invoke(*path, "--help")
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout
    help_line = next(line for line in result.stdout.splitlines() if "--help" in line)
    assert help_line.split() == ["│", "--help", "Show", "this", "message", "and", "exit.", "│"]


def test_help_still_shows_the_type_of_options_that_take_a_value() -> None:
    result = invoke("lessons", "list", "--help")
    lines = result.stdout.splitlines()
    json_line = next(line for line in lines if "--json" in line)
    limit_line = next(line for line in lines if "--limit" in line)
    assert json_line.split() == ["│", "--json", "Print", "JSON", "instead", "of", "tables", "│"]
    assert "<int range>" in limit_line


def _listed_commands(help_text: str) -> list[str]:
    panel = help_text[help_text.index("─ Commands ─") :].splitlines()[1:]
    return [line.split()[1] for line in panel if line.startswith("│ ") and line.split()[1] != "│"]


@pytest.mark.parametrize(
    "path", [p for p, c in command_paths() if getattr(c, "commands", None)], ids=str
)
def test_a_group_help_lists_exactly_its_subcommands(path: list[str]) -> None:
    group = get_command(app)
    for name in path:
        group = group.commands[name]  # type: ignore[attr-defined]
    result = invoke(*path, "--help")
    assert result.exit_code == 0
    assert _listed_commands(result.stdout) == list(group.commands)  # type: ignore[attr-defined]


def test_metrics_help_names_only_subcommands_that_exist() -> None:
    result = invoke("metrics", "--help")
    listed = _listed_commands(result.stdout)
    assert "report" in listed and "prune" in listed
    assert "plot" not in listed
    # The description must not advertise a "plot" subcommand; plotting is report --plot.
    description = result.stdout[: result.stdout.index("─ Options ─")]
    assert "reports, optionally plotted, and pruning by age" in description
    assert invoke("metrics", "plot").exit_code == 2


def test_cache_stats_json_carries_the_hit_ratio_as_a_number() -> None:
    result = invoke("cache", "stats", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "namespace": "default",
        "backend": "memory",
        "redis_url": None,
        "size": 0,
        "max_size": 256,
        "hits": 0,
        "misses": 0,
        "hit_rate": "0%",
        "ttl_sec": 300,
        "hit_ratio": None,
    }


def test_json_output_keeps_numbers_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    print_json({"count": Decimal("3"), "p50_ms": Decimal("12.25"), "rate": 0.5, "n": None})
    assert capsys.readouterr().out == (
        '{\n  "count": 3,\n  "p50_ms": 12.25,\n  "rate": 0.5,\n  "n": null\n}\n'
    )
    with pytest.raises(TypeError):
        print_json({"thing": object()})


def test_metrics_report_json_figures_are_numbers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'numbers.db'}"
    assert invoke("demo", "--database-url", url, "--details", "0").exit_code == 0
    result = invoke("metrics", "report", "--json", "--database-url", url)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for name in ("runs", "p50_ms", "p95_ms", "guard_failure_rate", "cache_hit_rate"):
        assert type(data[name]) in (int, float), (name, data[name])


POSTGRES_URL = "postgresql://agent:secret@127.0.0.1:1/fleet"
POSTGRES_EXTRA = (
    "PostgreSQL needs the psycopg driver, which is not installed: "
    "pip install 'contextstore[postgres]'"
)


def test_a_missing_postgres_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes "import psycopg" fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ConfigurationError) as caught:
        create_database_engine(POSTGRES_URL)
    assert isinstance(caught.value, MissingExtraError)
    assert str(caught.value) == POSTGRES_EXTRA
    assert (caught.value.package, caught.value.extra) == ("the psycopg driver", "postgres")


@pytest.mark.parametrize(
    "args",
    [["lessons", "list"], ["metrics", "report"], ["db", "upgrade"], ["demo"], ["fleet"]],
    ids=lambda args: " ".join(args),
)
def test_the_command_line_names_the_extra_for_a_missing_driver(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    result = invoke(*args, "--database-url", POSTGRES_URL)
    assert result.exit_code == 1, result.output
    # fleet first prints a note on which shared state is configured; nothing else does.
    assert result.stderr.splitlines()[-1:] == [f"error: {POSTGRES_EXTRA}"]
    assert result.stderr.count("error:") == 1
    assert "secret" not in result.output


def test_typer_abort_is_one_line() -> None:
    command = typer.Typer(cls=type(get_command(app)))

    @command.command()
    def stop() -> None:
        raise typer.Abort()

    @command.command()
    def other() -> None:  # a second command keeps typer from flattening the group
        pass

    result = runner.invoke(command, ["stop"])
    assert result.exit_code == 1
    assert result.stderr == "error: aborted\n"


@pytest.mark.parametrize("width", [80, 40])
@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda path: " ".join(path) or "root")
def test_help_wraps_to_the_terminal_and_cuts_nothing(path: list[str], width: int) -> None:
    command = get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= width, result.stdout
    assert "…" not in result.stdout
    words = set(result.stdout.replace("│", " ").split())
    for param in command.params:
        for option in [*param.opts, *param.secondary_opts]:
            assert option in words or f"{option}," in words, (option, result.stdout)
        # Every word of the help is there whole (a word longer than a line would fold).
        for word in (param.help or "").replace("\\[", "[").split():
            if len(word) < width - 8:
                assert word in words, (word, result.stdout)
    usage = " ".join(result.stdout[: result.stdout.index("\n\n", 3)].split())
    assert usage.startswith("Usage: ") and ".." not in usage.replace("...", "")
