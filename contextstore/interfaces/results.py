"""One JSON shape for what a run, a match, a search and a document look like to a caller.

The command line (``run --json``, ``match --json``), the HTTP API (``/v1/run``, ``/v1/match``)
and the MCP tools serialise through these functions, so the same field has the same name and
nesting whichever way an agent asks:

- a run: ``prompt`` (exactly the text to send: the lesson block, a blank line, the context;
  the context alone when no lesson applies), ``lesson_block``, ``context``, ``lessons``
  (``matched_count``, ``included_count``, ``included``), ``query_analysis`` (nested),
  ``budget``, ``context_length``, ``chunks_used``, ``totals``, the guard's verdict,
  ``cache_hit`` and ``pipeline_ms``;
- a match: ``lessons`` (as in a run), ``lesson_block`` and ``explanation`` (``null`` unless
  asked for);
- a chunk (a search hit or a chunk of a run): ``source``, ``score``, ``text``, ``metadata``;
- a document: its fields and passages; a lesson: every field of its record. Timestamps
  are RFC 3339 in UTC with ``Z``.

The ``…Json`` typed dictionaries name each shape's fields and types (the HTTP API's
response models are these, so its OpenAPI document describes them);
``contextstore.interfaces.result_schemas`` holds the JSON Schema of each, with its bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

# pydantic (the HTTP API's response models, the MCP tools' output schemas) reads only
# this TypedDict on Python 3.11.
from typing_extensions import TypedDict

from contextstore.core.compose import Chunk
from contextstore.core.knowledge import Document
from contextstore.core.lessons import LessonRecord
from contextstore.core.matching import (
    Lesson,
    LessonExplanation,
    MatchOptions,
    MatchResult,
    Scope,
    explain,
    match,
    render_lesson_block,
)
from contextstore.engine.sync import ContextResult

__all__ = [
    "TRANSPORT_FIELDS",
    "ChunkJson",
    "LessonsJson",
    "MatchJson",
    "Matched",
    "RunJson",
    "chunk_json",
    "chunks_json",
    "document_json",
    "lesson_json",
    "match_candidates",
    "rfc3339",
    "run_json",
]

# A run's fields that describe the call rather than the context it built: whether this
# process's cache answered it, and how long it took. The same run served twice (by the CLI,
# the HTTP API, an MCP tool) differs in these fields only.
TRANSPORT_FIELDS: Final = ("cache_hit", "pipeline_ms")


class ChunkJson(TypedDict):
    """A passage: a search hit or a chunk of a run's context."""

    source: str
    score: float
    text: str
    metadata: dict[str, Any]


class IncludedLessonJson(TypedDict):
    entity_id: str
    injection_form: str


class LessonsJson(TypedDict):
    """The lessons of a scope that matched, and those included (ranked, bounded)."""

    matched_count: int
    included_count: int
    included: list[IncludedLessonJson]


class QueryAnalysisJson(TypedDict):
    original_query: str
    normalized: str
    intent: str
    complexity: str
    keywords: list[str]
    entities: list[str]
    is_arabic: bool
    language: str
    question_type: str
    context_budget: int


class TotalsJson(TypedDict):
    """Chunks through the pipeline: retrieved, kept by the noise filter, composed."""

    retrieved: int
    filtered: int
    used: int


class RunJson(TypedDict):
    """A run. ``prompt``: exactly the text an agent sends, the lesson block, a blank line,
    then the context (the context alone when no lesson applies). Lengths and the budget are
    characters; ``pipeline_ms`` milliseconds."""

    prompt: str
    lesson_block: str
    context: str
    lessons: LessonsJson
    query_analysis: QueryAnalysisJson
    budget: int
    context_length: int
    chunks_used: list[ChunkJson]
    totals: TotalsJson
    guard_passed: bool
    guard_warnings: list[str]
    cache_hit: bool
    pipeline_ms: float


class ExplanationJson(TypedDict):
    """Why one lesson of the scope is in or out (see ``contextstore.core.matching.explain``)."""

    entity_id: str
    matched_keys: list[str]
    eligible: bool
    reason: str | None
    rank: int | None
    included: bool
    excluded_by: str | None
    relevance: float | None
    form_bytes: int


class MatchJson(TypedDict):
    """A match: the lessons, the block an agent gets, and (``null`` unless asked for) why
    each lesson of the scope is in or out."""

    lessons: LessonsJson
    lesson_block: str
    explanation: list[ExplanationJson] | None


class SearchJson(TypedDict):
    """Search hits, best first."""

    chunks: list[ChunkJson]


class DocumentJson(TypedDict):
    """A stored document with its passages in order."""

    source: str
    metadata: dict[str, Any]
    content_hash: str
    chunk_count: int
    created_at: str
    updated_at: str
    passages: list[str]


def rfc3339(moment: datetime) -> str:
    """``moment`` in UTC as RFC 3339 with ``Z`` (``2026-01-02T03:04:05.123456Z``).

    A naive datetime is read as UTC (the databases store UTC without an offset).
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def chunk_json(chunk: Chunk) -> ChunkJson:
    return {
        "source": chunk.source,
        "score": float(chunk.score),
        "text": chunk.text,
        "metadata": dict(chunk.metadata),
    }


def lessons_json(result: MatchResult) -> LessonsJson:
    return {
        "matched_count": result.matched_count,
        "included_count": result.included_count,
        "included": [
            {"entity_id": item.entity_id, "injection_form": item.injection_form}
            for item in result.included
        ],
    }


def run_json(result: ContextResult) -> RunJson:
    """One run, as every interface shows it."""
    analysis, totals = result.query_analysis, result.totals
    return {
        "prompt": result.prompt,
        "lesson_block": result.lesson_block,
        "context": result.context,
        "lessons": lessons_json(result.lessons),
        "query_analysis": {
            "original_query": analysis.original_query,
            "normalized": analysis.normalized,
            "intent": analysis.intent.value,
            "complexity": analysis.complexity.value,
            "keywords": list(analysis.keywords),
            "entities": list(analysis.entities),
            "is_arabic": analysis.is_arabic,
            "language": analysis.language,
            "question_type": analysis.question_type,
            "context_budget": analysis.context_budget,
        },
        "budget": result.budget,
        "context_length": result.context_length,
        "chunks_used": [chunk_json(chunk) for chunk in result.chunks_used],
        "totals": {
            "retrieved": int(totals["retrieved"]),
            "filtered": int(totals["filtered"]),
            "used": int(totals["used"]),
        },
        "guard_passed": result.guard_passed,
        "guard_warnings": list(result.guard_warnings),
        "cache_hit": result.cache_hit,
        "pipeline_ms": float(result.pipeline_ms),
    }


def explanation_json(item: LessonExplanation) -> ExplanationJson:
    return {
        "entity_id": item.entity_id,
        "matched_keys": list(item.matched_keys),
        "eligible": item.eligible,
        "reason": item.reason,
        "rank": item.rank,
        "included": item.included,
        "excluded_by": item.excluded_by,
        "relevance": item.relevance,
        "form_bytes": item.form_bytes,
    }


@dataclass(frozen=True)
class Matched:
    """One match: the result, the block an agent gets, and (when asked) every candidate's
    explanation (``None`` otherwise)."""

    result: MatchResult
    lesson_block: str
    explanation: tuple[LessonExplanation, ...] | None

    def to_json(self) -> MatchJson:
        explained = self.explanation
        return {
            "lessons": lessons_json(self.result),
            "lesson_block": self.lesson_block,
            "explanation": (
                None if explained is None else [explanation_json(item) for item in explained]
            ),
        }


def match_candidates(
    candidates: Sequence[Lesson],
    scope: Scope,
    options: MatchOptions,
    query: str | None = None,
    *,
    explained: bool = False,
) -> Matched:
    """``match`` and, when ``explained``, ``explain`` over the same candidates, so the block
    and the explanation come from one read and cannot disagree."""
    result = match(candidates, scope, options, query)
    explanation = explain(candidates, scope, options, query) if explained else None
    return Matched(result, render_lesson_block(result), explanation)


def document_json(document: Document) -> DocumentJson:
    """One stored document with its passages in order."""
    return {
        "source": document.source,
        "metadata": dict(document.metadata),
        "content_hash": document.content_hash,
        "chunk_count": document.chunk_count,
        "created_at": rfc3339(document.created_at),
        "updated_at": rfc3339(document.updated_at),
        "passages": list(document.passages),
    }


def lesson_json(record: LessonRecord) -> dict[str, Any]:
    """One lesson record, every field, timestamps in UTC with ``Z``."""
    data = record.to_json()
    for name in ("created_at", "updated_at"):
        moment = getattr(record, name)
        data[name] = None if moment is None else rfc3339(moment)
    return data


def chunks_json(chunks: Sequence[Chunk]) -> list[ChunkJson]:
    return [chunk_json(chunk) for chunk in chunks]
