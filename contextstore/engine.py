"""``ContextEngine.run``: the pipeline, step by step in the order SPEC §3 lists them.

cache lookup → analyze → budget → retrieve → filter → rank → compose → lessons → guard →
cache store (only if the guard passed) → adaptive record + durable metrics row.

Lessons are never cached: they are matched fresh on every run, so an administrator's change
in SQL takes effect on the next call. The cache key covers the query, the filters, the scope,
the namespace and any override budget, so two scopes or two tenants never share an entry.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from contextstore.adaptive.base import Windows
from contextstore.adaptive.system import AdaptiveLearningSystem
from contextstore.analysis import ComplexityBasedAllocation, QueryAnalysis, RuleBasedQueryAnalyzer
from contextstore.cache.base import ContextCache, make_key
from contextstore.cache.memory import MemoryContextCache
from contextstore.compose import Chunk, compose_context, filter_chunks, rank_chunks
from contextstore.config import ContextEngineConfig
from contextstore.embedding import EmbedFn
from contextstore.errors import ValidationError
from contextstore.guard import ContextGuard
from contextstore.lessons import LessonSource
from contextstore.matching import MatchOptions, MatchResult, Scope, match, render_lesson_block
from contextstore.metrics import MetricsSink, QueryMetric
from contextstore.retrieval import InMemoryRetriever, Retriever, VersionedRetriever

# Bumped whenever the cached payload's shape changes, so old entries read as misses.
_PAYLOAD_VERSION = 2
_EMPTY_MATCH = MatchResult(included=(), matched_count=0, included_count=0)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# The width of query_metrics.worker.
MAX_WORKER_LENGTH = 128


@dataclass(frozen=True)
class ContextResult:
    """What one ``run()`` produced. Lengths are characters; times milliseconds.

    ``totals`` counts chunks through the pipeline: ``retrieved``, ``filtered`` (kept by the
    noise filter) and ``used`` (composed). On a cache hit they describe the run that filled
    the entry. ``guard_passed`` is advisory: the context is returned either way.
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


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class ContextEngine:
    """Builds one agent's context per call; every collaborator is injectable.

    Defaults: an empty ``InMemoryRetriever``, a ``MemoryContextCache`` sized by
    ``config.cache`` (none when ``config.cache.enabled`` is False), process-local adaptive
    windows, no lessons and no durable metrics. ``connect()`` wires the shared SQL and Redis
    backends instead.
    """

    def __init__(
        self,
        config: ContextEngineConfig | None = None,
        *,
        retriever: Retriever | None = None,
        lessons: LessonSource | None = None,
        cache: ContextCache | None = None,
        windows: Windows | None = None,
        metrics: MetricsSink | None = None,
        analyzer: RuleBasedQueryAnalyzer | None = None,
        embed_fn: EmbedFn | None = None,
        worker: str | None = None,
        timer: Callable[[], float] = time.perf_counter,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config or ContextEngineConfig()
        # "is None", not "or": an empty InMemoryRetriever is falsy (it has a length).
        self.retriever: Retriever = (
            retriever if retriever is not None else InMemoryRetriever(embed_fn)
        )
        self.lessons = lessons
        if cache is None and self.config.cache.enabled:
            cache = MemoryContextCache(self.config.cache.max_size, self.config.cache.ttl_seconds)
        self.cache = cache
        self.adaptive = AdaptiveLearningSystem(self.config, windows)
        self.metrics = metrics
        self.analyzer = analyzer or RuleBasedQueryAnalyzer(self.config.analyzer)
        self.guard = ContextGuard(self.config, embed_fn)
        self.worker = worker or default_worker_name()
        if len(self.worker) > MAX_WORKER_LENGTH:
            raise ValidationError("worker", f"must be at most {MAX_WORKER_LENGTH} characters")
        self._timer = timer
        self._now = now

    def run(
        self,
        query: str,
        *,
        scope: Scope | None = None,
        filters: Mapping[str, Any] | None = None,
        override_budget: int | None = None,
    ) -> ContextResult:
        """Build the context for ``query`` as seen from ``scope``.

        ``override_budget`` (characters, ≥ 1) replaces the adaptive suggestion. Redis faults
        never raise here (the cache misses, the windows fall back to memory); a bad argument
        raises ``ValidationError`` naming it before anything runs or is recorded.
        """
        _check_run_arguments(query, scope, filters, override_budget)
        started = self._timer()
        scope = scope or Scope()
        key = self._cache_key(query, scope, filters, override_budget)
        # Read before retrieving: a change landing in between labels the new entry with the
        # older generation, so the next run recomposes instead of trusting it.
        generation = self._knowledge_generation()
        cached = self._cache_get(key, generation)
        analysis = self.analyzer.analyze(query)
        composition = cached or replace(
            self._compose(query, analysis, filters, override_budget), generation=generation
        )
        lessons = self._match_lessons(scope)
        passed = True
        if cached is None:
            passed, warnings = self.guard.validate(composition.context, query, analysis)
            composition = replace(composition, warnings=tuple(warnings))
            if passed and self.cache is not None:
                self.cache.put(key, composition.encode())
        result = ContextResult(
            context=composition.context,
            lesson_block=render_lesson_block(lessons),
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
        self._record(query, result)
        return result

    def run_multi(
        self,
        queries: Sequence[str],
        global_budget: int,
        *,
        scope: Scope | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> list[ContextResult]:
        """Run several queries sharing ``global_budget`` characters, split by complexity.

        Harder queries get more (weights LOW 1, MEDIUM 1.5, HIGH 2.5); every query gets at
        least 1. An empty list returns ``[]``.
        """
        if (
            isinstance(global_budget, bool)
            or not isinstance(global_budget, int)
            or global_budget < 1
        ):
            raise ValidationError("global_budget", f"must be an integer ≥ 1, got {global_budget!r}")
        analyses = [self.analyzer.analyze(query) for query in queries]
        budgets = ComplexityBasedAllocation().allocate(global_budget, len(queries), analyses)
        return [
            self.run(query, scope=scope, filters=filters, override_budget=budget)
            for query, budget in zip(queries, budgets, strict=True)
        ]

    def _cache_key(
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

    def _knowledge_generation(self) -> int | None:
        if isinstance(self.retriever, VersionedRetriever):
            return self.retriever.generation()
        return None

    def _cache_get(self, key: str, generation: int | None) -> _Composition | None:
        """The cached composition, unless it was composed at another knowledge generation."""
        if self.cache is None:
            return None
        raw = self.cache.get(key)
        composition = None if raw is None else _Composition.decode(raw)
        if composition is None or composition.generation != generation:
            return None
        return composition

    def _compose(
        self,
        query: str,
        analysis: QueryAnalysis,
        filters: Mapping[str, Any] | None,
        override_budget: int | None,
    ) -> _Composition:
        """Budget → retrieve → filter → rank → compose: the part a cache hit skips."""
        budget = override_budget or self.adaptive.suggest_budget(analysis)
        retrieval = self.config.retrieval
        retrieved = self.retriever.retrieve(query, analysis, retrieval.top_k, filters)
        kept = filter_chunks(retrieved, retrieval.min_chunk_length, retrieval.max_chunk_length)
        composed = compose_context(rank_chunks(kept, analysis), budget, self.config.template)
        totals = {
            "retrieved": len(retrieved),
            "filtered": len(kept),
            "used": len(composed.chunks_used),
        }
        return _Composition(budget, composed.text, composed.chunks_used, totals)

    def _match_lessons(self, scope: Scope) -> MatchResult:
        if self.lessons is None:
            return _EMPTY_MATCH
        options = MatchOptions(self.config.lessons.k, self.config.lessons.byte_budget)
        return match(self.lessons.candidates(scope), scope, options)

    def _record(self, query: str, result: ContextResult) -> None:
        analysis = result.query_analysis
        self.adaptive.record(
            query,
            analysis,
            result.context_length,
            len(result.chunks_used),
            result.pipeline_ms,
            result.guard_passed,
        )
        if self.metrics is None:
            return
        self.metrics.record(
            QueryMetric(
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
            )
        )


def _check_run_arguments(
    query: object, scope: object, filters: object, override_budget: object
) -> None:
    if not isinstance(query, str):
        raise ValidationError("query", f"must be a string, got {type(query).__name__}")
    if scope is not None and not isinstance(scope, Scope):
        raise ValidationError("scope", f"must be a Scope, got {type(scope).__name__}")
    if filters is not None and not isinstance(filters, Mapping):
        raise ValidationError("filters", f"must be a mapping, got {type(filters).__name__}")
    if override_budget is not None and (
        isinstance(override_budget, bool)
        or not isinstance(override_budget, int)
        or override_budget < 1
    ):
        raise ValidationError("override_budget", f"must be an integer ≥ 1, got {override_budget!r}")


def _storable(text: str) -> str:
    """``text`` as a SQL text column accepts it: NUL and lone surrogates become U+FFFD.

    The pipeline takes any string; a database does not, and a run must not fail on the way
    out because its query held a character the metrics column cannot store.
    """
    return _UNSTORABLE.sub("\ufffd", text)


@dataclass(frozen=True)
class _Composition:
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
    def decode(cls, raw: str) -> _Composition | None:
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
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
