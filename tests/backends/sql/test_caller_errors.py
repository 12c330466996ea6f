"""A caller's bad value is the caller's error, on SQLite and PostgreSQL, sync and async.

NUL characters, integers wider than a BIGINT, too many filters or scope tags, a line longer
than JSON Lines may have: each is ``ValidationError`` naming the field, raised by the
library before any statement is sent, never a driver error reported as an outage.
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from contextstore.backends.sql.aio import AsyncKnowledgeBase, create_async_database_engine
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.repository import LessonRepository
from contextstore.core.jsonl import MAX_LINE_BYTES
from contextstore.core.lessons import LessonRecord
from contextstore.core.matching import Scope
from contextstore.errors import ValidationError
from tests.backends.sql.conftest import counts, flavoured

HUGE = 99999999999999999999
TAGS = Scope(tags=tuple(f"t{i}" for i in range(70_001)))


def refused(call: Callable[[], Any]) -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        call()
    return raised.value


@pytest.fixture
def knowledge(
    engine: sa.Engine, flavour: str, database_url: str, namespace: str
) -> Iterator[KnowledgeBase]:
    with flavoured(
        flavour,
        database_url,
        lambda: KnowledgeBase(engine, namespace),
        lambda async_engine: AsyncKnowledgeBase(async_engine, namespace),
    ) as made:
        made.import_jsonl(['{"source": "a.md", "text": "how to fail over postgres"}'])
        yield made


LESSON_CALLS: list[tuple[str, Callable[[LessonRepository], Any], str]] = [
    ("get", lambda r: r.get("a\x00b"), "entity_id"),
    ("history", lambda r: r.history("a\x00b"), "entity_id"),
    ("activate", lambda r: r.activate("a\x00b"), "entity_id"),
    ("retire", lambda r: r.retire("a.\ud800"), "entity_id"),
    ("supersede", lambda r: r.supersede("a.b", "a\x00c"), "superseded_by"),
    ("update", lambda r: r.update("a\x00b", summary="s"), "entity_id"),
    ("delete", lambda r: r.delete("a\x00b"), "entity_id"),
    ("list key", lambda r: r.list(key="tag:\x00"), "key"),
    ("list tag", lambda r: r.list(tag="ops\x00"), "tag"),
    ("list search", lambda r: r.list(search="\ud800"), "search"),
    ("list limit", lambda r: r.list(limit=HUGE), "limit"),
    ("list offset", lambda r: r.list(offset=HUGE), "offset"),
    ("candidates NUL", lambda r: r.candidates(Scope(tags=("ops\x00",))), "scope.tags"),
    ("candidates ids", lambda r: r.candidates(Scope(entity_ids=("a.\x00",))), "scope.entity_ids"),
    ("candidates many", lambda r: r.candidates(TAGS), "scope.tags"),
    (
        "explained many",
        lambda r: r.candidates(TAGS, include_inactive=True),
        "scope.tags",
    ),
]


def test_lesson_calls_refuse_what_no_database_takes(
    repo: LessonRepository, engine: sa.Engine
) -> None:
    repo.add(LessonRecord("a.b", "Form.", status="active", applies_to=("tag:t1",)))
    before = counts(engine)
    fields = {name: refused(lambda call=call: call(repo)).field for name, call, _ in LESSON_CALLS}
    assert fields == {name: field for name, _, field in LESSON_CALLS}
    assert counts(engine) == before


KNOWLEDGE_CALLS: list[tuple[str, Callable[[KnowledgeBase], Any], str]] = [
    ("get", lambda k: k.get("a\x00.md"), "source"),
    ("delete", lambda k: k.delete("a\x00.md"), "source"),
    ("list prefix", lambda k: k.list(prefix="\x00"), "prefix"),
    ("list limit", lambda k: k.list(limit=HUGE), "limit"),
    ("list offset", lambda k: k.list(offset=HUGE), "offset"),
    ("search top_k", lambda k: k.search("postgres", HUGE), "top_k"),
    ("search big integer", lambda k: k.search("postgres", 5, {"n": 10**30}), "filters"),
    (
        "search many filters",
        lambda k: k.search("postgres", 5, {f"k{i}": 1 for i in range(1000)}),
        "filters",
    ),
]


def test_knowledge_calls_refuse_what_no_database_takes(knowledge: KnowledgeBase) -> None:
    fields = {
        name: refused(lambda call=call: call(knowledge)).field for name, call, _ in KNOWLEDGE_CALLS
    }
    assert fields == {name: field for name, _, field in KNOWLEDGE_CALLS}
    assert [document.source for document in knowledge.list()] == ["a.md"]


def test_filters_at_their_bounds_run_on_the_database(knowledge: KnowledgeBase) -> None:
    # 32 keys of 64 values each: one statement both databases accept.
    filters: dict[str, Any] = {f"k{i}": list(range(64)) for i in range(32)}
    assert knowledge.search("postgres", 5, filters) == []
    assert knowledge.search("postgres", 5, {"n": 2**63 - 1}) == []
    assert [chunk.source for chunk in knowledge.search("postgres", 5)] == ["a.md"]


def one_line_of(size: int, path: Path) -> Path:
    """A file of one line of ``size`` bytes, made sparse (no disk, no time)."""
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def test_a_one_gibibyte_line_is_refused_without_being_read(
    repo: LessonRepository, knowledge: KnowledgeBase, engine: sa.Engine, tmp_path: Path
) -> None:
    path = one_line_of(2**30, tmp_path / "huge.jsonl")
    before = counts(engine)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for target in (repo, knowledge):
        with path.open("rb") as handle:
            error = refused(lambda target=target, handle=handle: target.import_jsonl(handle))
        assert (error.field, error.message) == (
            "line 1",
            f"is longer than {MAX_LINE_BYTES:,} bytes, the longest line JSON Lines may have",
        )
    # ru_maxrss is in KiB on Linux: the process never held the line.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - grown < 200 * 1024
    assert counts(engine) == before
    assert [document.source for document in knowledge.list()] == ["a.md"]


@pytest.mark.asyncio
async def test_the_async_import_reads_a_file_a_bounded_line_at_a_time(
    database_url: str, tmp_path: Path
) -> None:
    from contextstore.backends.sql.aio import AsyncLessonRepository

    path = one_line_of(MAX_LINE_BYTES + 100, tmp_path / "long.jsonl")
    engine = create_async_database_engine(database_url)
    try:
        repository = AsyncLessonRepository(engine)
        with path.open("rb") as handle, pytest.raises(ValidationError) as raised:
            await repository.import_jsonl(handle)
        assert raised.value.field == "line 1"
        assert await repository.list() == []
    finally:
        await engine.dispose()
