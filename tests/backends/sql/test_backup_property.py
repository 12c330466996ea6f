"""Export → import into an empty database, over lessons made by the API and by SQL typed by
hand: either the database refused a row, or the round trip is exact.

Each example writes a few lessons into a fresh database, through the library and as a person
in a SQL shell would (SQLite's foreign keys off, as its shell starts), including the rows an
import once refused: supersede cycles, ``1e400`` and evidence nested past the bound, ids
with white space, dangling references. Then ``db check`` names nothing, the export
succeeds, and its lines imported into another empty database export the same lines.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.lessons import SEVERITIES, STATUSES, LessonRecord
from contextstore.errors import ContextStoreError
from tests.backends.sql.conftest import schema_url
from tests.hostile import examples

IDS = st.sampled_from(["a", "a.b", "b", "c", "c.d", "gone"])
KEYS = st.sampled_from(["tag:x", "tag:y", "id:a", "id:c"])
# Text without NUL in evidence: SQLite's JSON reads "\u0000" as the end of a string, so it
# cannot refuse one (db check names such a row; the library never writes one).
JSON_TEXT = st.text(st.characters(exclude_characters="\x00"), max_size=8)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | JSON_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(JSON_TEXT, inner, max_size=3),
    max_leaves=8,
)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# Evidence as a person types it: JSON the API would write, and what an import refuses.
EVIDENCE_TEXT = st.one_of(
    JSON_VALUES.map(json.dumps),
    st.sampled_from(
        [
            '{"n": 1e400}',
            '{"n": [-1e400]}',
            nested(64),
            nested(65),
            nested(1000),
            "null",
            "1e-400",
            '{"a": 1, "a": 2}',
            "[1.0, -0.0, 1E5, 123456789012345678901234567890]",
            '"text"',
        ]
    ),
)
TIMESTAMPS = st.sampled_from(
    ["2026-01-02 03:04:05.123456", "2026-01-02T03:04:05+02:00", "2025-12-31 23:59:59"]
)
NOW = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)

API_RECORDS = st.builds(
    LessonRecord,
    entity_id=IDS,
    injection_form=st.text(max_size=30),
    severity=st.sampled_from(SEVERITIES),
    status=st.sampled_from(STATUSES),
    applies_to=st.lists(KEYS, unique=True, max_size=3).map(tuple),
    summary=st.text(max_size=12),
    superseded_by=st.none() | IDS,
    evidence=JSON_VALUES | st.integers(60, 70).map(lambda n: json.loads(nested(n))),
    created_at=st.none() | st.datetimes(timezones=st.just(UTC)),
)
HAND_INSERT = st.fixed_dictionaries(
    {
        "id": IDS | st.text(min_size=1, max_size=6),
        "status": st.sampled_from(STATUSES),
        "severity": st.sampled_from(SEVERITIES),
        "form": st.text(max_size=30),
        "summary": st.text(max_size=12),
        "evidence": EVIDENCE_TEXT,
        "superseded_by": st.none() | IDS | st.text(min_size=1, max_size=4),
        "created": TIMESTAMPS,
    }
)
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), API_RECORDS),
        st.tuples(st.just("supersede"), IDS, IDS),
        st.tuples(st.just("retire"), IDS),
        st.tuples(st.just("delete"), IDS),
        st.tuples(st.just("insert"), HAND_INSERT),
        st.tuples(st.just("scope"), IDS | st.text(max_size=3), st.text(max_size=6)),
        st.tuples(st.just("point"), IDS, IDS),
        st.tuples(st.just("evidence"), IDS, EVIDENCE_TEXT),
        st.tuples(st.just("drop"), IDS),
    ),
    min_size=1,
    max_size=10,
)


@dataclass
class Databases:
    """Fresh source and target databases for each example."""

    dialect: str
    make: Any

    def pair(self) -> tuple[str, str]:
        return self.make(), self.make()


@pytest.fixture
def databases(
    empty_database_url: str, migrated_sqlite_file: Path, tmp_path: Path, request: Any
) -> Iterator[Databases]:
    if empty_database_url.startswith("sqlite"):
        counter = itertools.count()

        def copy() -> str:
            path = tmp_path / f"example-{next(counter)}.db"
            shutil.copyfile(migrated_sqlite_file, path)
            return f"sqlite:///{path}"

        yield Databases("sqlite", copy)
        return
    # PostgreSQL: two schemas migrated once, emptied before each example (as the superuser,
    # with triggers off for that: the audit keeps its rows, which no export carries).
    server_url: str = request.getfixturevalue("postgres_server_url")
    admin = sa.create_engine(server_url)
    names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    urls = []
    for name in names:
        with admin.begin() as connection:
            connection.execute(sa.text(f'CREATE SCHEMA "{name}"'))
        urls.append(schema_url(server_url, name))
        migrate(urls[-1])
    turn = itertools.cycle(urls)

    def emptied() -> str:
        url = next(turn)
        engine = create_database_engine(url)
        with engine.begin() as connection:
            connection.execute(sa.text("SET LOCAL session_replication_role = replica"))
            connection.execute(sa.text("DELETE FROM lesson_scopes"))
            connection.execute(sa.text("DELETE FROM lessons"))
        engine.dispose()
        return url

    yield Databases("postgresql", emptied)
    with admin.begin() as connection:
        for name in names:
            connection.execute(sa.text(f'DROP SCHEMA "{name}" CASCADE'))
    admin.dispose()


def _typed(url: str, statement: str, values: dict[str, Any]) -> None:
    """One statement as typed in a SQL shell (SQLite's: foreign keys off); refusal is fine."""
    if url.startswith("sqlite"):
        raw = sqlite3.connect(sa.make_url(url).database or "")
        try:
            with raw:
                raw.execute(statement, values)
        except sqlite3.DatabaseError:
            pass
        finally:
            raw.close()
        return
    engine = create_database_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(statement), values)
    except sa.exc.DBAPIError:
        pass
    finally:
        engine.dispose()


def _apply(url: str, repo: LessonRepository, operation: tuple[Any, ...]) -> None:
    kind, *args = operation
    try:
        if kind == "add":
            repo.add(args[0])
        elif kind == "supersede":
            repo.supersede(args[0], args[1])
        elif kind == "retire":
            repo.retire(args[0])
        elif kind == "delete":
            repo.delete(args[0])
    except ContextStoreError:
        return  # refused by the library
    if kind == "insert":
        row = args[0]
        _typed(
            url,
            "INSERT INTO lessons (entity_id, status, severity, injection_form, summary, "
            "evidence, superseded_by, created_at, updated_at) VALUES (:id, :status, "
            ":severity, :form, :summary, :evidence, :superseded_by, :created, :created)",
            row,
        )
    elif kind == "scope":
        _typed(
            url,
            "INSERT INTO lesson_scopes (lesson_id, scope_key, position) VALUES (:id, :key, 9)",
            {"id": args[0], "key": f"tag:{args[1]}"},
        )
    elif kind == "point":
        _typed(
            url,
            "UPDATE lessons SET status = 'superseded', superseded_by = :to WHERE entity_id = :id",
            {"id": args[0], "to": args[1]},
        )
    elif kind == "evidence":
        _typed(
            url,
            "UPDATE lessons SET evidence = :evidence WHERE entity_id = :id",
            {"id": args[0], "evidence": args[1]},
        )
    elif kind == "drop":
        _typed(url, "DELETE FROM lessons WHERE entity_id = :id", {"id": args[0]})


def _stored_ids(engine: sa.Engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.execute(sa.text("SELECT entity_id FROM lessons")).scalars())


@pytest.mark.parametrize(
    "empty_database_url",
    ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
    indirect=True,
)
def test_every_row_the_database_holds_round_trips(databases: Databases) -> None:
    @examples(default=25, ci=150)
    @given(operations=OPERATIONS)
    def round_trip(operations: list[tuple[Any, ...]]) -> None:
        source_url, target_url = databases.pair()
        source = create_database_engine(source_url)
        target = create_database_engine(target_url)
        try:
            repo = LessonRepository(source, clock=lambda: NOW)
            for operation in operations:
                _apply(source_url, repo, operation)
            assert repo.check() == []  # the database refused every row it could not restore
            lines = list(repo.export_jsonl())
            assert {json.loads(line)["entity_id"] for line in lines} == _stored_ids(source)
            restored = LessonRepository(target, clock=lambda: NOW)
            restored.import_jsonl(lines)
            assert list(restored.export_jsonl()) == lines
        finally:
            source.dispose()
            target.dispose()

    round_trip()
