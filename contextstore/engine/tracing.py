"""OpenTelemetry spans for a run and its phases, when ``config.tracing.enabled`` is set.

A run is one span, ``contextstore.run``, whose children are its phases in order: ``cache
read``, ``lessons`` (the lesson candidates), ``retrieval`` (on a miss), ``compose``,
``guard`` (on a miss) and ``write``. The run's span carries the namespace, the cache hit,
the query's complexity and intent, the budget and the lesson counts; the query's text only
when ``config.tracing.query_text`` is set too. Spans go to the process's tracer provider
(the SDK's, set up by the application or ``opentelemetry-instrument``).

Off (the default), nothing here is imported: the engines keep their plain path, and
``opentelemetry`` is imported only when an engine is built with tracing on, which needs
``contextstore[otel]``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from contextstore.config import ContextEngineConfig
from contextstore.core.analysis import QueryAnalysis
from contextstore.engine.pipeline import Composition, ContextResult, Pipeline
from contextstore.errors import MissingExtraError

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["PHASES", "RUN_SPAN", "RunTracer", "TracedPipeline", "require_opentelemetry"]

RUN_SPAN = "contextstore.run"
PHASES = ("cache read", "lessons", "retrieval", "compose", "guard", "write")
"""The phases' span names, in the order a run on a cache miss makes them."""

T = TypeVar("T")


def require_opentelemetry() -> None:
    """``MissingExtraError`` naming the ``otel`` extra when OpenTelemetry is not installed."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            "tracing (engine.tracing.enabled)", "OpenTelemetry", "otel"
        ) from exc


class RunTracer:
    """Makes the spans of one engine's runs (``opentelemetry`` imported here, once)."""

    def __init__(self, config: ContextEngineConfig) -> None:
        require_opentelemetry()
        from opentelemetry import trace

        self._tracer = trace.get_tracer("contextstore")
        self._namespace = config.namespace
        self._query_text = config.tracing.query_text

    def run(self, query: str) -> AbstractContextManager[Span]:
        """The run's span, current while the run goes on (its phases become its children)."""
        attributes: dict[str, Any] = {"contextstore.namespace": self._namespace}
        if self._query_text:
            attributes["contextstore.query"] = query
        return self._tracer.start_as_current_span(RUN_SPAN, attributes=attributes)

    def phase(self, name: str) -> AbstractContextManager[Span]:
        return self._tracer.start_as_current_span(name)

    def start(self, name: str) -> Span:
        """A phase's span started now, ended by the caller (for a phase awaited alongside
        another, whose span it must not become the parent of)."""
        return self._tracer.start_span(name)

    @staticmethod
    def finish(span: Span, result: ContextResult) -> None:
        analysis = result.query_analysis
        span.set_attributes(
            {
                "contextstore.cache_hit": result.cache_hit,
                "contextstore.complexity": analysis.complexity.value,
                "contextstore.intent": analysis.intent.value,
                "contextstore.budget": result.budget,
                "contextstore.context_length": result.context_length,
                "contextstore.guard_passed": result.guard_passed,
                "contextstore.lessons.matched": result.lessons.matched_count,
                "contextstore.lessons.included": result.lessons.included_count,
            }
        )


async def ended(span: Span, work: Awaitable[T]) -> T:
    """``await work``, then end ``span`` (recording an exception it raised)."""
    try:
        return await work
    except BaseException as exc:
        span.record_exception(exc)
        raise
    finally:
        span.end()


class TracedPipeline(Pipeline):
    """``Pipeline`` whose pure phases, composition and the guard, are spans of the run."""

    def __init__(self, *args: Any, tracer: RunTracer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tracer = tracer

    def _compose(
        self,
        retrieved: Any,
        analysis: QueryAnalysis,
        budget: int,
        generation: int | None,
    ) -> Composition:
        with self.tracer.phase("compose") as span:
            composition = super()._compose(retrieved, analysis, budget, generation)
            span.set_attribute("contextstore.chunks", len(composition.chunks))
            return composition

    def _validate(
        self, context: str, query: str, analysis: QueryAnalysis
    ) -> tuple[bool, list[str]]:
        with self.tracer.phase("guard") as span:
            passed, warnings = super()._validate(context, query, analysis)
            span.set_attribute("contextstore.guard_passed", passed)
            return passed, warnings
