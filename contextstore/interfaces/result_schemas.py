"""JSON Schema (draft 2020-12) of the shapes ``contextstore.interfaces.results`` writes.

Closed objects (``additionalProperties: false``): a field added to a shape must be added
here too, and the tests that validate the command line's output against these catch it.
"""

from __future__ import annotations

from typing import Any, Final

from contextstore.core.analysis import QueryComplexity, QueryIntent
from contextstore.core.lessons import SEVERITIES, STATUSES
from contextstore.core.matching import (
    EXCLUDED_BY_BYTE_BUDGET,
    EXCLUDED_BY_K,
    NO_KEY_MATCHES,
    NOT_ACTIVE,
)

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
# RFC 3339 in UTC with Z: what every timestamp of these shapes is.
UTC_TIMESTAMP: Final = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$"


def _closed(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


_COUNT: Final = {"type": "integer", "minimum": 0}
_STRINGS: Final = {"type": "array", "items": {"type": "string"}}

CHUNK_SCHEMA: Final[dict[str, Any]] = _closed(
    {
        "source": {"type": "string"},
        "score": {"type": "number"},
        "text": {"type": "string"},
        "metadata": {"type": "object"},
    }
)

LESSONS_SCHEMA: Final[dict[str, Any]] = _closed(
    {
        "matched_count": _COUNT,
        "included_count": _COUNT,
        "included": {
            "type": "array",
            "items": _closed(
                {"entity_id": {"type": "string"}, "injection_form": {"type": "string"}}
            ),
        },
    }
)

QUERY_ANALYSIS_SCHEMA: Final[dict[str, Any]] = _closed(
    {
        "original_query": {"type": "string"},
        "normalized": {"type": "string"},
        "intent": {"enum": [intent.value for intent in QueryIntent]},
        "complexity": {"enum": [complexity.value for complexity in QueryComplexity]},
        "keywords": _STRINGS,
        "entities": _STRINGS,
        "is_arabic": {"type": "boolean"},
        "language": {"type": "string"},
        "question_type": {"type": "string"},
        "context_budget": _COUNT,
    }
)

RUN_SCHEMA: Final[dict[str, Any]] = {
    "$schema": DIALECT,
    "title": "A run: the prompt to send and how it was built",
    **_closed(
        {
            "prompt": {
                "type": "string",
                "description": "The lesson block, a blank line, then the context (the context "
                "alone when no lesson applies): exactly the text an agent sends",
            },
            "lesson_block": {"type": "string"},
            "context": {"type": "string"},
            "lessons": LESSONS_SCHEMA,
            "query_analysis": QUERY_ANALYSIS_SCHEMA,
            "budget": {"type": "integer", "minimum": 1, "description": "Characters"},
            "context_length": {**_COUNT, "description": "Characters"},
            "chunks_used": {"type": "array", "items": CHUNK_SCHEMA},
            "totals": _closed({"retrieved": _COUNT, "filtered": _COUNT, "used": _COUNT}),
            "guard_passed": {"type": "boolean"},
            "guard_warnings": _STRINGS,
            "cache_hit": {"type": "boolean"},
            "pipeline_ms": {"type": "number", "minimum": 0},
        }
    ),
}

EXPLANATION_SCHEMA: Final[dict[str, Any]] = _closed(
    {
        "entity_id": {"type": "string"},
        "matched_keys": _STRINGS,
        "eligible": {"type": "boolean"},
        "reason": {"enum": [NOT_ACTIVE, NO_KEY_MATCHES, None]},
        "rank": {"type": ["integer", "null"], "minimum": 1},
        "included": {"type": "boolean"},
        "excluded_by": {"enum": [EXCLUDED_BY_K, EXCLUDED_BY_BYTE_BUDGET, None]},
        "relevance": {"type": ["number", "null"]},
        "form_bytes": _COUNT,
    }
)

MATCH_SCHEMA: Final[dict[str, Any]] = {
    "$schema": DIALECT,
    "title": "A match: the lessons of a scope and the block an agent gets",
    **_closed(
        {
            "lessons": LESSONS_SCHEMA,
            "lesson_block": {"type": "string"},
            "explanation": {
                "oneOf": [{"type": "null"}, {"type": "array", "items": EXPLANATION_SCHEMA}],
            },
        }
    ),
}

DOCUMENT_SCHEMA: Final[dict[str, Any]] = {
    "$schema": DIALECT,
    "title": "A stored document with its passages",
    **_closed(
        {
            "source": {"type": "string"},
            "metadata": {"type": "object"},
            "content_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "chunk_count": _COUNT,
            "created_at": {"type": "string", "pattern": UTC_TIMESTAMP},
            "updated_at": {"type": "string", "pattern": UTC_TIMESTAMP},
            "passages": _STRINGS,
        }
    ),
}

SEARCH_SCHEMA: Final[dict[str, Any]] = {
    "$schema": DIALECT,
    "title": "Search hits, best first",
    **_closed({"chunks": {"type": "array", "items": CHUNK_SCHEMA}}),
}

_MAYBE_TIMESTAMP: Final = {"type": ["string", "null"], "pattern": UTC_TIMESTAMP}

LESSON_SCHEMA: Final[dict[str, Any]] = {
    "$schema": DIALECT,
    "title": "A lesson record",
    **_closed(
        {
            "entity_id": {"type": "string"},
            "status": {"enum": list(STATUSES)},
            "severity": {"enum": list(SEVERITIES)},
            "created_at": _MAYBE_TIMESTAMP,
            "updated_at": _MAYBE_TIMESTAMP,
            "summary": {"type": "string"},
            "detail": {"type": "string"},
            "injection_form": {"type": "string"},
            "applies_to": _STRINGS,
            "superseded_by": {"type": ["string", "null"]},
            "evidence": {},
        }
    ),
}
