"""One engine run, written once: read phase → pure computation → write phase
(docs/design/pipeline.md).

``Pipeline.run`` is a generator that does no I/O. It yields what it needs and is sent the
answers, in this order:

1. ``Read`` (the read phase): the cache entry, the adaptive summary, the lesson
   candidates and the knowledge generation. A driver may fetch them concurrently; with
   Redis that is one script call, with SQL one statement each.
2. ``Retrieve``, on a cache miss only: the retriever's chunks.
3. ``Write`` (the write phase): the entry to cache (only when the guard passed), the
   adaptive sample and the metrics row. With Redis one script call, with SQL one committed
   statement. The driver answers with the windows' summary after the record.

and returns the ``ContextResult``. Between the yields everything is pure: analyze → budget →
filter → rank → compose → lessons (matched fresh on every run, never cached) → guard.
``ContextEngine`` and ``AsyncContextEngine`` are only drivers around it (``drive`` and
``adrive``): the steps exist once, so the two engines cannot disagree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeAlias, TypeVar

from contextstore.backends.cache import make_key
from contextstore.backends.windows import Sample, WindowSummary
from contextstore.config import ContextEngineConfig
from contextstore.core.analysis import (
    ComplexityBasedAllocation,
    QueryAnalysis,
    RuleBasedQueryAnalyzer,
)
from contextstore.core.compose import Chunk, compose_context, filter_chunks, rank_chunks
from contextstore.core.guard import ContextGuard
from contextstore.core.lessons import validate_scope
from contextstore.core.matching import Lesson, MatchOptions, MatchResult, Scope, match_traced
from contextstore.core.matching import render_lesson_block as render
from contextstore.core.metrics import QueryMetric, RunTrace
from contextstore.engine.adaptive import AdaptiveLearningSystem
from contextstore.errors import ValidationError

__all__ = [
    "ContextResult",
    "Pipeline",
    "Read",
    "ReadReply",
    "Retrieve",
    "Write",
    "adrive",
    "drive",
]

# Bumped whenever the cached payload's shape changes, so old entries read as misses.
_PAYLOAD_VERSION = 2
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

T = TypeVar("T")


@dataclass(frozen=True)
class ContextResult:
    """What one ``run()`` produced. Lengths are characters; times milliseconds.

    ``totals`` counts chunks through the pipeline: ``retrieved``, ``filtered`` (kept by the
    noise filter) and ``used`` (composed). On a cache hit they describe the run that filled
    the entry. ``guard_passed`` is advisory: the context is returned either way.

    ``pipeline_ms`` is the time from the start of ``run()`` to this result being built: the
    read phase (cache, adaptive summary, lessons; retrieval on a miss) and the computation.
    It does not include the write phase that follows (caching the entry, recording the
    sample, writing the metrics row), which cannot measure itself; the metrics row's
    ``response_ms`` and the windows' sample hold the same figure.
    """

    context: str
    lesson_block: str
    lessons: MatchResult
    query_analysis: QueryAnalysis
    budget: int
    chunks_used: tuple[Chunk, ...]
    totals: Mapping[str, int]
    context_length: int
    pipeline_ms: float
    guard_passed: bool
    guard_warnings: tuple[str, ...]
    cache_hit: bool

    @property
    def prompt(self) -> str:
        """The lesson block (when any) followed by the composed context, ready for a prompt."""
        return f"{self.lesson_block}\n\n{self.context}" if self.lesson_block else self.context


@dataclass(frozen=True, slots=True)
class Read:
    """The read phase. ``cache_key`` is ``None`` without a cache; ``want_summary`` asks for
    the adaptive summary (needed to budget a miss); ``scope`` selects lesson candidates."""

    cache_key: str | None
    want_summary: bool
    scope: Scope


@dataclass(frozen=True, slots=True)
class ReadReply:
    """What the read phase found: the cached text (``None``: a miss), the summary
    (``None`` when not asked for), the lesson candidates (``[]`` without lessons) and the
    retriever's knowledge generation (``None`` for a retriever without one)."""

    cached: str | None
    summary: WindowSummary | None
    candidates: Sequence[Lesson]
    generation: int | None = None


@dataclass(frozen=True, slots=True)
class Retrieve:
    """Retrieval, asked for on a cache miss only (``Retriever.retrieve``'s arguments)."""

    query: str
    analysis: QueryAnalysis
    top_k: int
    filters: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Write:
    """The write phase: cache ``context`` under ``cache_key`` (``None``: nothing to cache),
    record ``sample`` (``None``: adaptive off) and store ``metric``. Answered with the
    windows' summary after the record (``None`` when nothing was recorded)."""

    cache_key: str | None
    context: str | None
    sample: Sample | None
    metric: QueryMetric


Step: TypeAlias = Read | Retrieve | Write
Steps: TypeAlias = Generator[Step, Any, T]


def drive(steps: Steps[T], perform: Callable[[Step], Any]) -> T:
    """Run ``steps`` to its result, answering each step with ``perform(step)``."""
    reply: Any = None
    try:
        while True:
            reply = perform(steps.send(reply))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(steps: Steps[T], perform: Callable[[Step], Awaitable[Any]]) -> T:
    """``drive`` for an event loop: each step is answered with ``await perform(step)``.

    The computation between two steps runs right here, on the loop: it is well under a
    millisecond for a typical run, and a worker thread would cost more than it saves (the
    loop would then wait for the GIL behind it, and on a busy machine for the OS).
    """
    reply: Any = None
    try:
        while True:
            reply = await perform(steps.send(reply))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class Pipeline:
    """The pure part of an engine: configuration, analyzer, guard and adaptive rules."""

    def __init__(
        self,
        config: ContextEngineConfig,
        analyzer: RuleBasedQueryAnalyzer,
        guard: ContextGuard,
        adaptive: AdaptiveLearningSystem,
        *,
        worker: str,
        caching: bool,
        timer: Callable[[], float],
        now: Callable[[], datetime],
    ) -> None:
        self.config = config
        self.analyzer = analyzer
        self.guard = guard
        self.adaptive = adaptive
        self.worker = worker
        self.caching = caching
        self._timer = timer
        self._now = now
        # A bad LessonConfig.order is refused when the engine is built, not on every run.
        MatchOptions(order=config.lessons.order)

    def run(
        self,
        query: str,
        scope: Scope | None,
        filters: Mapping[str, Any] | None,
        override_budget: int | None,
        analysis: QueryAnalysis | None = None,
    ) -> Steps[ContextResult]:
        """The steps of one run (see the module doc). Arguments are checked when the
        generator is created, so a bad one raises ``ValidationError`` before any step.
        ``analysis``: the analyzer's result for ``query`` when the caller already has it."""
        check_run_arguments(query, scope, filters, override_budget)
        return self._steps(query, scope or Scope(), filters, override_budget, analysis)

    def _steps(
        self,
        query: str,
        scope: Scope,
        filters: Mapping[str, Any] | None,
        override_budget: int | None,
        given: QueryAnalysis | None,
    ) -> Steps[ContextResult]:
        started = self._timer()
        key = self.cache_key(query, scope, filters, override_budget) if self.caching else None
        analysis = self.analyzer.analyze(query) if given is None else given
        want_summary = self.config.enable_adaptive and override_budget is None
        # The generation is read before retrieving: a change landing in between labels the
        # new entry with the older generation, so the next run recomposes, never trusts it.
        read: ReadReply = yield Read(key, want_summary, scope)
        cached = None if read.cached is None else Composition.decode(read.cached)
        if cached is not None and cached.generation != read.generation:
            cached = None  # composed from another corpus than the current one: a miss
        to_cache: str | None = None
        passed = True
        if cached is None:
            retrieval = self.config.retrieval
            retrieved: Sequence[Chunk] = yield Retrieve(query, analysis, retrieval.top_k, filters)
            budget = override_budget or self.adaptive.budget_for(analysis, read.summary)
            composition = self._compose(retrieved, analysis, budget, read.generation)
            passed, warnings = self._validate(composition.context, query, analysis)
            composition = replace(composition, warnings=tuple(warnings))
            if passed and key is not None:
                to_cache = composition.encode()
        else:
            composition = cached
        settings = self.config.lessons
        options = MatchOptions(settings.k, settings.byte_budget, settings.order)
        lessons, traced = match_traced(read.candidates, scope, options, query)
        result = ContextResult(
            context=composition.context,
            lesson_block=render(lessons),
            lessons=lessons,
            query_analysis=analysis,
            budget=composition.budget,
            chunks_used=composition.chunks,
            totals=composition.totals,
            context_length=len(composition.context),
            pipeline_ms=(self._timer() - started) * 1000.0,
            guard_passed=passed,
            guard_warnings=composition.warnings,
            cache_hit=cached is not None,
        )
        sample = self.adaptive.sample(
            result.context_length, len(result.chunks_used), result.pipeline_ms, passed
        )
        trace = _trace(scope, traced, result)
        summary = yield Write(key, to_cache, sample, self._metric(query, result, trace))
        if summary is not None:
            self.adaptive.observe(summary)
        return result

    def budgets(self, queries: Sequence[str], global_budget: int) -> list[int]:
        """``run_multi``'s split of ``global_budget`` over ``queries``, by complexity.

        Harder queries get more (weights LOW 1, MEDIUM 1.5, HIGH 2.5); every query gets at
        least 1, so ``global_budget`` must be an integer from ``len(queries)`` to
        ``MAX_BUDGET`` (``ValidationError("global_budget")``); every query must be a string
        (``ValidationError("query")``). Checked before any query runs.
        """
        if isinstance(queries, str) or not isinstance(queries, Sequence):
            raise ValidationError("queries", "must be a list of strings")
        for query in queries:
            if not isinstance(query, str):
                raise ValidationError("query", f"must be a string, got {type(query).__name__}")
        if (
            isinstance(global_budget, bool)
            or not isinstance(global_budget, int)
            or not max(1, len(queries)) <= global_budget <= MAX_BUDGET
        ):
            raise ValidationError(
                "global_budget",
                f"must be an integer from the number of queries ({len(queries)}; each gets at "
                f"least 1) to {MAX_BUDGET}, got {global_budget!r}",
            )
        analyses = [self.analyzer.analyze(query) for query in queries]
        return ComplexityBasedAllocation().allocate(global_budget, len(queries), analyses)

    def cache_key(
        self,
        query: str,
        scope: Scope,
        filters: Mapping[str, Any] | None,
        override_budget: int | None,
    ) -> str:
        # Everything that changes the composed text is part of the key; the namespace too,
        # although Redis keys are already namespaced, so a memory cache shared by two
        # engines of different tenants cannot leak either.
        material = {
            "namespace": self.config.namespace,
            "scope": (tuple(sorted(scope.entity_ids)), tuple(sorted(scope.tags))),
            "budget": override_budget,
            "filters": sorted((str(name), repr(value)) for name, value in (filters or {}).items()),
        }
        return make_key(query, material)

    def _compose(
        self,
        retrieved: Sequence[Chunk],
        analysis: QueryAnalysis,
        budget: int,
        generation: int | None,
    ) -> Composition:
        """Filter → rank → compose: the part a cache hit skips."""
        retrieval = self.config.retrieval
        kept = filter_chunks(retrieved, retrieval.min_chunk_length, retrieval.max_chunk_length)
        composed = compose_context(rank_chunks(kept, analysis), budget, self.config.template)
        totals = {
            "retrieved": len(retrieved),
            "filtered": len(kept),
            "used": len(composed.chunks_used),
        }
        return Composition(budget, composed.text, composed.chunks_used, totals, (), generation)

    def _validate(
        self, context: str, query: str, analysis: QueryAnalysis
    ) -> tuple[bool, list[str]]:
        """The guard's verdict on ``context`` (a method, so a traced pipeline can wrap it)."""
        return self.guard.validate(context, query, analysis)

    def _metric(self, query: str, result: ContextResult, trace: RunTrace) -> QueryMetric:
        analysis = result.query_analysis
        return QueryMetric(
            recorded_at=self._now(),
            namespace=self.config.namespace,
            worker=self.worker,
            query_hash=make_key(query),
            query=_storable(query) if self.config.store_raw_query else None,
            complexity=analysis.complexity.value,
            intent=analysis.intent.value,
            budget=result.budget,
            context_length=result.context_length,
            chunk_count=len(result.chunks_used),
            lessons_matched=result.lessons.matched_count,
            lessons_included=result.lessons.included_count,
            response_ms=result.pipeline_ms,
            guard_passed=result.guard_passed,
            cache_hit=result.cache_hit,
            guard_warnings=result.guard_warnings,
            trace=trace,
        )


def _trace(scope: Scope, matched: tuple[str, ...], result: ContextResult) -> RunTrace:
    """What the run used, for its metrics row: scope, lessons matched and included, sources."""
    return RunTrace(
        scope_entity_ids=scope.entity_ids,
        scope_tags=scope.tags,
        lessons_matched=matched,
        lessons_included=tuple(item.entity_id for item in result.lessons.included),
        chunk_sources=tuple(chunk.source for chunk in result.chunks_used),
    )


# The largest budget a metrics row can record (a 32-bit SQL integer).
MAX_BUDGET = 2**31 - 1


def check_run_arguments(
    query: object, scope: object, filters: object, override_budget: object
) -> None:
    if not isinstance(query, str):
        raise ValidationError("query", f"must be a string, got {type(query).__name__}")
    if scope is not None and not isinstance(scope, Scope):
        raise ValidationError("scope", f"must be a Scope, got {type(scope).__name__}")
    if scope is not None:
        validate_scope(scope)
    if filters is not None and not isinstance(filters, Mapping):
        raise ValidationError("filters", f"must be a mapping, got {type(filters).__name__}")
    if override_budget is not None and (
        isinstance(override_budget, bool)
        or not isinstance(override_budget, int)
        or not 1 <= override_budget <= MAX_BUDGET
    ):
        raise ValidationError(
            "override_budget", f"must be an integer 1–{MAX_BUDGET}, got {override_budget!r}"
        )


def _storable(text: str) -> str:
    """``text`` as a SQL text column accepts it: NUL and lone surrogates become U+FFFD.

    The pipeline takes any string; a database does not, and a run must not fail on the way
    out because its query held a character the metrics column cannot store.
    """
    return _UNSTORABLE.sub("\ufffd", text)


@dataclass(frozen=True)
class Composition:
    """What a cache entry holds: one composed context and how it was made.

    Stored as JSON text (never pickled). ``decode`` returns ``None`` for any text this
    version did not write, so a foreign or outdated entry is a miss, not an error.
    ``generation`` is the retriever's knowledge generation when it was composed (``None``
    for a retriever without one).
    """

    budget: int
    context: str
    chunks: tuple[Chunk, ...]
    totals: Mapping[str, int]
    warnings: tuple[str, ...] = ()
    generation: int | None = None

    def encode(self) -> str:
        return json.dumps(
            {
                "v": _PAYLOAD_VERSION,
                "budget": self.budget,
                "context": self.context,
                "chunks": [[c.text, c.source, c.score, dict(c.metadata)] for c in self.chunks],
                "totals": dict(self.totals),
                "warnings": list(self.warnings),
                "generation": self.generation,
            },
            ensure_ascii=False,
            default=str,
        )

    @classmethod
    def decode(cls, raw: str) -> Composition | None:
        try:
            data = json.loads(raw)
            if data["v"] != _PAYLOAD_VERSION:
                return None
            chunks = tuple(
                Chunk(str(text), str(source), float(score), dict(metadata))
                for text, source, score, metadata in data["chunks"]
            )
            totals = {str(name): int(count) for name, count in data["totals"].items()}
            warnings = tuple(str(warning) for warning in data["warnings"])
            raw_generation = data["generation"]
            generation = None if raw_generation is None else int(raw_generation)
            return cls(
                int(data["budget"]), str(data["context"]), chunks, totals, warnings, generation
            )
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None
