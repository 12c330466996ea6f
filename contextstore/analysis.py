"""Bilingual (English and Arabic) query analysis and per-query budget splitting. SPEC §1.3."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class QueryComplexity(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class QueryIntent(StrEnum):
    FACTUAL = "factual"
    REASONING = "reasoning"
    COMPARATIVE = "comparative"
    PROCEDURAL = "procedural"
    CODE = "code"
    SUMMARIZE = "summarize"


@dataclass(frozen=True, slots=True)
class QueryAnalysis:
    """What the analyzer concluded about one query; ``context_budget`` is in characters."""

    original_query: str
    normalized: str
    intent: QueryIntent
    complexity: QueryComplexity
    keywords: tuple[str, ...]
    entities: tuple[str, ...]
    is_arabic: bool
    language: str
    question_type: str
    context_budget: int
