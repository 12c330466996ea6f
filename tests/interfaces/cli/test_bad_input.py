"""Every bad input a careless administrator or a buggy agent sends is one clear error.

Library: ``ValidationError`` naming the field, nothing written. CLI: one ``error:`` line on
stderr, no traceback. Secrets in URLs are never printed. Exports round-trip any text.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from contextstore.backends.urls import mask_url
from contextstore.core.lessons import (
    LessonRecord,
    parse_timestamp,
    read_jsonl,
    split_jsonl,
    validate_record,
    write_jsonl,
)
from contextstore.errors import ConfigurationError, ValidationError
from tests import REPO_ROOT

ROOT = REPO_ROOT
ADD = [sys.executable, "-m", "contextstore", "lessons", "add"]
# An argument holding the byte 0xff, as Python hands it over (PEP 383).
BAD_BYTE = b"bad \xff byte".decode("utf-8", "surrogateescape")


# -- records ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"injection_form": "bad \udcff byte"}, "injection_form"),
        ({"summary": "lone \ud800 surrogate"}, "summary"),
        ({"detail": "nul \x00 here"}, "detail"),
        ({"injection_form": "nul \x00"}, "injection_form"),
        ({"applies_to": ("tag:\x00",)}, "applies_to"),
        ({"applies_to": ("tag:\udcff",)}, "applies_to"),
        ({"evidence": {"score": math.nan}}, "evidence"),
        ({"evidence": {"score": math.inf}}, "evidence"),
        ({"evidence": {"note": "nul \x00"}}, "evidence"),
        ({"evidence": {"nul \x00": 1}}, "evidence"),
        ({"evidence": ["\udcff"]}, "evidence"),
        ({"created_at": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))}, "created_at"),
        (
            {"updated_at": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))},
            "updated_at",
        ),
    ],
)
def test_a_record_no_database_can_store_is_refused_naming_the_field(
    fields: dict[str, object], field: str
) -> None:
    values: dict[str, object] = {"entity_id": "fleet.ops.1", "injection_form": "Do X."}
    record = LessonRecord(**{**values, **fields})  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as raised:
        validate_record(record)
    assert raised.value.field == field


def test_an_entity_id_with_a_surrogate_or_nul_is_refused() -> None:
    for entity_id in ("fleet.\udcff", "fleet.\x00"):
        with pytest.raises(ValidationError) as raised:
            validate_record(LessonRecord(entity_id, "x"))
        assert raised.value.field == "entity_id"


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:30:00-01:00", "yesterday"]
)
def test_a_timestamp_outside_utc_years_1_to_9999_is_refused(text: str) -> None:
    with pytest.raises(ValidationError) as raised:
        parse_timestamp(text, "created_at")
    assert raised.value.field == "created_at"


def test_imported_nan_and_nul_name_the_line_and_field() -> None:
    lines = [
        json.dumps({"entity_id": "a.b", "injection_form": "x"}),
        '{"entity_id": "a.c", "injection_form": "x", "evidence": {"s": NaN}}',
    ]
    with pytest.raises(ValidationError) as raised:
        list(read_jsonl(lines))
    assert raised.value.field == "line 2: evidence"
    lines[1] = json.dumps({"entity_id": "a.c", "injection_form": "nul \x00"})
    with pytest.raises(ValidationError) as raised:
        list(read_jsonl(lines))
    assert raised.value.field == "line 2: injection_form"


# -- JSON Lines round-trip any text -------------------------------------------------------------

SEPARATORS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@given(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
        | st.sampled_from(SEPARATORS),
        max_size=60,
    )
)
def test_export_then_import_round_trips_any_text(text: str) -> None:
    record = validate_record(
        LessonRecord(
            "fleet.ops.1",
            text[:80],
            summary=text,
            detail=SEPARATORS + text,
            evidence={"text": text},
            created_at=datetime(2026, 1, 2, tzinfo=UTC),
            updated_at=datetime(2026, 1, 3, tzinfo=UTC),
        )
    )
    exported = "".join(write_jsonl([record, record.__class__("fleet.ops.2", "y")]))
    # whoever splits the file at line breaks gets whole records
    assert len(exported.splitlines()) == 2
    back = list(read_jsonl(split_jsonl(exported)))
    assert back[0] == record


def test_the_cli_imports_an_export_holding_line_separators(tmp_path: Path) -> None:
    from contextstore.interfaces.cli.lessons import app

    url = ["--database-url", f"sqlite:///{tmp_path / 'l.db'}"]
    runner = CliRunner()
    text = "one\u2028two\u0085three\u2029four"
    assert (
        runner.invoke(app, ["add", "a.b", "--form", text, "--summary", text, *url]).exit_code == 0
    )
    exported = runner.invoke(app, ["export", *url]).stdout
    assert "\u2028" not in exported and "\\u2028" in exported
    target = ["--database-url", f"sqlite:///{tmp_path / 'm.db'}"]
    (tmp_path / "x.jsonl").write_text(exported, encoding="utf-8")
    result = runner.invoke(app, ["import", str(tmp_path / "x.jsonl"), "--json", *target])
    assert result.exit_code == 0, result.output
    shown = json.loads(runner.invoke(app, ["show", "a.b", "--json", *target]).stdout)
    assert (shown["injection_form"], shown["summary"]) == (text, text)


# -- secrets ------------------------------------------------------------------------------------

# Unreachable, with a secret in each place a URL can carry one.
HOSTILE_PG = "postgresql://u:secret1@127.0.0.1:1/db?password=secret1&sslpassword=secret1"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:secret@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:secret@h/0", "redis://user:***@h/0"),
        ("redis://h:6379/0?password=secret", "redis://h:6379/0?password=***"),
        (
            "postgresql://u@h/db?password=secret&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        (
            "postgresql://u@h/db?sslpassword=s&PassWord=t",
            "postgresql://u@h/db?sslpassword=***&PassWord=***",
        ),
        ("postgresql://u:p%40ss@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("sqlite:///x.db", "sqlite:///x.db"),
        ("redis://h:abc/0?token=t", "redis://h:abc/0?token=***"),
    ],
)
def test_every_password_in_a_url_is_masked(url: str, shown: str) -> None:
    assert mask_url(url) == shown


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["lessons", "list", "--database-url", "postgresql://u:secret1@127.0.0.1:1/db"],
        ["lessons", "list", "--database-url", "postgresql://u@127.0.0.1:1/db?password=secret1"],
        ["lessons", "list", "--database-url", "postgresql://u:secret1@127.0.0.1:abc/db"],
        ["cache", "stats", "--redis-url", "redis://:secret1@127.0.0.1:abc/0"],
        ["cache", "stats", "--redis-url", "redis://127.0.0.1:1/0?password=secret1"],
        *(
            [*command, "--database-url", HOSTILE_PG]
            for command in (
                ["db", "current"],
                ["db", "upgrade"],
                ["db", "check"],
                ["metrics", "report"],
                ["docs", "list"],
                ["lessons", "stats"],
                ["match", "--tag", "ops"],
                ["fleet", "--workers", "1", "--queries", "1"],
            )
        ),
    ],
)
def test_the_cli_never_prints_a_password(args: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "contextstore", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "secret1" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.returncode == 1 and result.stderr.splitlines()[-1].startswith("error:")


def test_a_port_that_is_not_a_number_is_a_configuration_error() -> None:
    from contextstore.backends.sql.database import create_database_engine

    with pytest.raises(ConfigurationError) as raised:
        create_database_engine("postgresql://u:secret@localhost:abc/db")
    assert "port" in str(raised.value) and "secret" not in str(raised.value)


# -- the CLI: one line, never a traceback -------------------------------------------------------


def cli(
    *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m contextstore *args`` in a process of its own (``env``: its whole
    environment, else this one's)."""
    return subprocess.run(
        [sys.executable, "-m", "contextstore", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        input=input,
        env=env,
    )


def one_error_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode in (1, 2), result.stdout
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr


@pytest.mark.slow
def test_a_file_that_is_not_a_database_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are notes, not a database\n" * 200)
    one_error_line(cli("lessons", "list", "--database-url", f"sqlite:///{path}"), "not a database")


@pytest.mark.slow
def test_invalid_bytes_in_an_argument_are_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    result = subprocess.run(
        [*ADD, "a.b", "--form", BAD_BYTE, "--database-url", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    one_error_line(result, "injection_form")


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["metrics", "prune", "--older-than", "1000000d"],
        ["metrics", "report", "--since", "99999999999d"],
    ],
)
def test_huge_durations_reach_back_to_the_beginning(tmp_path: Path, args: list[str]) -> None:
    result = cli(*args, "--database-url", f"sqlite:///{tmp_path / 'm.db'}")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_an_offset_timestamp_before_year_1_is_one_usage_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    one_error_line(
        cli("metrics", "report", "--since", "0001-01-01T00:00:00+01:00", "--database-url", url),
        "--since",
    )
    result = cli(
        "lessons",
        "add",
        "a.b",
        "--form",
        "x",
        "--created-at",
        "0001-01-01T00:00:00+01:00",
        "--database-url",
        url,
    )
    one_error_line(result, "created_at")
