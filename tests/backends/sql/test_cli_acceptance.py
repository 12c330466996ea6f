"""The issue's acceptance lines through the command line, on SQLite and PostgreSQL: after a
known set of engine runs, ``lessons stats`` counts what the runs' own ``ContextResult.lessons``
say, and every ``metrics report`` filter and grouping equals a Python computation over the
same runs."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from typer.testing import CliRunner

from contextstore import connect
from contextstore.core.matching import explain
from contextstore.interfaces.cli import app
from contextstore.sample_data import load_demo_queries, load_lessons, sample_retriever

NAMESPACE = "acceptance"


@dataclass(frozen=True)
class Run:
    """What one run's own result says (and the scope's eligible lessons)."""

    worker: str
    complexity: str
    intent: str
    cache_hit: bool
    matched: tuple[str, ...]
    included: tuple[str, ...]


# The command line must see only what each test gives it, not the caller's environment.
pytestmark = pytest.mark.usefixtures("clean_environment")


@pytest.fixture
def runs(database_url: str) -> list[Run]:
    """Every demo query twice (the second time from the cache) by two workers, relevance
    order, in NAMESPACE; and one run in another namespace, which nothing below may count."""
    found: list[Run] = []
    with connect(database_url=database_url, redis_url="", namespace=NAMESPACE) as store:
        store.lessons.import_records(load_lessons())
        for worker in ("alpha-1", "beta-1"):
            engine = store.engine(retriever=sample_retriever(), worker=worker)
            engine.config.lessons.order = "relevance"
            for item in load_demo_queries()[:8]:
                result = engine.run(item.query, scope=item.scope)
                candidates = store.lessons.candidates(item.scope)
                eligible = tuple(e.entity_id for e in explain(candidates, item.scope) if e.eligible)
                assert len(eligible) == result.lessons.matched_count
                found.append(
                    Run(
                        worker=worker,
                        complexity=result.query_analysis.complexity.value,
                        intent=result.query_analysis.intent.value,
                        cache_hit=result.cache_hit,
                        matched=eligible,
                        included=tuple(m.entity_id for m in result.lessons.included),
                    )
                )
    with connect(database_url=database_url, redis_url="", namespace="elsewhere") as other:
        query = load_demo_queries()[0]
        other.engine(retriever=sample_retriever(), worker="alpha-9").run(
            query.query, scope=query.scope
        )
    return found


def cli(database_url: str, *args: str) -> Any:
    result = CliRunner().invoke(
        app,
        [*args, "--json", "--database-url", database_url],
        env={"CONTEXTSTORE_NAMESPACE": NAMESPACE},
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_lessons_stats_count_what_the_runs_results_say(database_url: str, runs: list[Run]) -> None:
    matched = Counter(lesson for run in runs for lesson in run.matched)
    included = Counter(lesson for run in runs for lesson in run.included)
    assert sum(included.values()) > 0 and matched != included
    stats = cli(database_url, "lessons", "stats")
    assert stats["runs"] == len(runs)
    assert {u["entity_id"]: u["runs_matched"] for u in stats["lessons"]} == dict(matched)
    assert {u["entity_id"]: u["runs_included"] for u in stats["lessons"]} == {
        lesson: included[lesson] for lesson in matched
    }
    active = {r.entity_id for r in load_lessons() if r.status == "active"}
    assert stats["unused"] == sorted(active - set(included))


@pytest.mark.parametrize(
    ("flags", "keep"),
    [
        ((), lambda run: True),
        (("--complexity", "high"), lambda run: run.complexity == "high"),
        (("--intent", "factual"), lambda run: run.intent == "factual"),
        (("--cache-hit",), lambda run: run.cache_hit),
        (("--no-cache-hit",), lambda run: not run.cache_hit),
        (("--worker-prefix", "beta"), lambda run: run.worker.startswith("beta")),
    ],
    ids=["all", "complexity", "intent", "hits", "misses", "worker"],
)
def test_every_filter_and_grouping_equals_python(
    database_url: str, runs: list[Run], flags: tuple[str, ...], keep: Any
) -> None:
    selected = [run for run in runs if keep(run)]
    assert 0 < len(selected) <= len(runs)
    for by, key in [
        ("complexity", lambda run: [run.complexity]),
        ("intent", lambda run: [run.intent]),
        ("worker", lambda run: [run.worker]),
        ("lesson", lambda run: list(run.included)),
    ]:
        report = cli(database_url, "metrics", "report", *flags, "--by", by)
        assert report["runs"] == len(selected), (flags, by)
        wanted = Counter(value for run in selected for value in key(run))
        assert {g["key"]: g["runs"] for g in report["groups"]} == dict(wanted), (flags, by)
    lessons = Counter(lesson for run in selected for lesson in run.included)
    for lesson, count in lessons.items():
        assert cli(database_url, "metrics", "report", *flags, "--lesson", lesson)["runs"] == count
