"""Bad input to run() and run_multi() is one ValidationError naming the field, and nothing is
written anywhere: not the cache, not the adaptive windows, not a metrics row in real SQL.

Metrics go to a real SQLite database here (and to ``MemoryMetrics`` in the other engine
tests), so "nothing recorded" is checked where a fleet would look.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextstore.backends.memory.cache import MemoryContextCache
from contextstore.backends.memory.windows import MemoryWindows
from contextstore.backends.sql.database import create_database_engine, migrate
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.core.lessons import (
    MAX_SCOPE_ENTITY_IDS,
    MAX_SCOPE_TAGS,
    MAX_SCOPE_VALUE_LENGTH,
    InMemoryLessons,
    LessonRecord,
)
from contextstore.core.matching import Scope
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.engine.pipeline import MAX_BUDGET
from contextstore.engine.sync import ContextEngine
from contextstore.errors import ValidationError


class Parts:
    def __init__(self, url: str) -> None:
        self.sql = create_database_engine(url)
        self.metrics = MetricsRepository(self.sql)
        self.cache = MemoryContextCache()
        self.windows = MemoryWindows()
        retriever = InMemoryRetriever()
        retriever.add("Drain a node before you reboot it, then uncordon it.", "runbook.md")
        self.engine = ContextEngine(
            retriever=retriever,
            lessons=InMemoryLessons(
                [LessonRecord("ops.l1", "Drain first.", status="active", applies_to=("tag:ops",))]
            ),
            cache=self.cache,
            windows=self.windows,
            metrics=self.metrics,
            worker="w1",
        )

    def written(self) -> tuple[int, int, int]:
        """(cache entries, window samples, metrics rows in SQL)."""
        return (
            self.cache.stats()["size"],
            self.windows.summary().total_queries,
            self.metrics.count(),
        )


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[Parts]:
    url = f"sqlite:///{tmp_path / 'engine.db'}"
    migrate(url)
    built = Parts(url)
    yield built
    built.sql.dispose()


def test_a_good_run_writes_each_part_once(parts: Parts) -> None:
    result = parts.engine.run("how do I reboot a node?", scope=Scope(tags=("ops",)))
    assert [lesson.entity_id for lesson in result.lessons.included] == ["ops.l1"]
    assert parts.written() == (1, 1, 1)


TOO_MANY_TAGS = Scope(tags=tuple(f"t{n}" for n in range(MAX_SCOPE_TAGS + 1)))
TOO_MANY_IDS = Scope(entity_ids=tuple(f"a.b{n}" for n in range(MAX_SCOPE_ENTITY_IDS + 1)))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"override_budget": MAX_BUDGET + 1}, "override_budget"),  # 2**31
        ({"override_budget": 2**63}, "override_budget"),
        ({"scope": TOO_MANY_TAGS}, "scope.tags"),
        ({"scope": TOO_MANY_IDS}, "scope.entity_ids"),
        ({"scope": Scope(tags=("x" * (MAX_SCOPE_VALUE_LENGTH + 1),))}, "scope.tags"),
        ({"scope": Scope(entity_ids=("a.\x00",))}, "scope.entity_ids"),
        ({"scope": Scope(tags=("\udcff",))}, "scope.tags"),
        ({"scope": Scope(tags="ops")}, "scope.tags"),  # type: ignore[arg-type]
        ({"scope": Scope(tags=(7,))}, "scope.tags"),  # type: ignore[arg-type]
    ],
)
def test_run_refuses_before_writing_anything(
    parts: Parts, kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        parts.engine.run("how do I reboot a node?", **kwargs)
    assert raised.value.field == field
    assert parts.written() == (0, 0, 0)


def test_the_largest_budget_is_accepted(parts: Parts) -> None:
    result = parts.engine.run("how do I reboot a node?", override_budget=MAX_BUDGET)
    assert result.budget == MAX_BUDGET
    assert parts.written() == (1, 1, 1)


def test_a_scope_at_its_bounds_is_accepted(parts: Parts) -> None:
    scope = Scope(
        entity_ids=tuple(f"ops.l{n}" for n in range(MAX_SCOPE_ENTITY_IDS)),
        tags=(*(f"t{n}" for n in range(MAX_SCOPE_TAGS - 1)), "ops"),
    )
    result = parts.engine.run("how do I reboot a node?", scope=scope)
    assert result.lessons.matched_count == 1


@pytest.mark.parametrize(
    ("queries", "budget", "field"),
    [
        (["a?", "b?", "c?"], 1, "global_budget"),  # each query needs at least 1
        (["a?", "b?", "c?"], 2, "global_budget"),
        (["a?"], MAX_BUDGET + 1, "global_budget"),
        (["a?", None], 100, "query"),
        ("abc", 100, "queries"),
    ],
)
def test_run_multi_refuses_before_any_query_runs(
    parts: Parts, queries: Any, budget: int, field: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        parts.engine.run_multi(queries, budget)
    assert raised.value.field == field
    assert parts.written() == (0, 0, 0)


def test_run_multi_with_one_unit_per_query_gives_each_one(parts: Parts) -> None:
    results = parts.engine.run_multi(["a?", "b?", "c?"], 3)
    assert [result.budget for result in results] == [1, 1, 1]
    assert parts.written()[2] == 3
