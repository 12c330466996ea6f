"""The service's request and response bodies, defined by the library's own types.

Responses *are* the library's dataclasses (``ContextResult``, ``MatchResult``,
``LessonRecord``, ``LessonEvent``, ``MetricsReport``): pydantic reads their fields and types,
so the JSON and the OpenAPI schema follow the library whenever a field is added. Requests
wrap the library's types (``Scope``, ``MatchOptions``, ``LessonRecord``) in envelopes that
add only what HTTP needs. Every request model is strict and closed: a string where a number
belongs, or a field the library does not have, is refused (422) naming the field.
Domain rules (an entity id's shape, a budget ≥ 1) stay where they are, in the library; its
``ValidationError`` answers 422 with the same field name the library uses.
"""

from __future__ import annotations

import inspect
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, Final, get_type_hints

import pydantic.dataclasses
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from starlette.responses import Response

from contextstore.lessons import LessonRecord
from contextstore.matching import MatchOptions, MatchResult, Scope
from contextstore.sql.repository import LessonRepository

STRICT: Final = ConfigDict(extra="forbid", strict=True)


class RunRequest(BaseModel):
    """The arguments of ``ContextEngine.run``."""

    model_config = STRICT

    query: str
    scope: Scope | None = None
    filters: dict[str, Any] | None = None
    override_budget: int | None = Field(default=None, description="Characters, ≥ 1")


class MatchRequest(BaseModel):
    """A scope and the matcher's options; the lessons are the database's active ones."""

    model_config = STRICT

    scope: Scope
    options: MatchOptions | None = None


class MatchResponse(BaseModel):
    """``lessons`` as ``match()`` returns them, and ``lesson_block`` as an agent gets it."""

    lessons: MatchResult
    lesson_block: str


@pydantic.dataclasses.dataclass(config=STRICT, frozen=True)
class NewLesson(LessonRecord):
    """A lesson to add: every ``LessonRecord`` field, ``entity_id`` and ``injection_form``
    required; ``created_at`` (RFC 3339 with an offset) defaults to now."""


def as_record(lesson: LessonRecord) -> LessonRecord:
    """The plain library record behind a validated ``NewLesson``."""
    fields = LessonRecord.__dataclass_fields__
    return LessonRecord(**{name: getattr(lesson, name) for name in fields})


def _editable() -> dict[str, Any]:
    # The content fields ``LessonRepository.update`` takes, typed as ``LessonRecord`` types
    # them, each optional: the edit body is derived from those two definitions, not copied.
    hints = get_type_hints(LessonRecord)
    names = [
        name
        for name, parameter in inspect.signature(LessonRepository.update).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    return {name: (hints[name] | None, None) for name in names if name in hints}


if TYPE_CHECKING:
    LessonEdit = BaseModel
else:
    LessonEdit = create_model(
        "LessonEdit",
        __config__=STRICT,
        __doc__="Content fields to change; absent ones stay. Status has its own endpoints.",
        **_editable(),
    )


class SupersedeRequest(BaseModel):
    """The lesson that replaces this one (activated if it is proposed)."""

    model_config = STRICT

    superseded_by: str


class LessonQuery(BaseModel):
    """Filters of ``LessonRepository.list``."""

    model_config = ConfigDict(extra="forbid")

    status: str | None = None
    severity: str | None = None
    key: str | None = None
    tag: str | None = None
    limit: int | None = Field(default=None, ge=0)


class ReportQuery(BaseModel):
    """Filters of ``MetricsRepository.report``; the namespace is always the key's own."""

    model_config = ConfigDict(extra="forbid")

    since: datetime | None = Field(default=None, description="Inclusive, RFC 3339 with offset")
    until: datetime | None = Field(default=None, description="Exclusive, RFC 3339 with offset")
    worker_prefix: str | None = None


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    """``status``: ``ok``, ``degraded`` (Redis down; runs fall back to process memory) or
    ``unavailable`` (SQL down; answered 503)."""

    status: str
    sql: str
    redis: str


@cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def json_response(kind: Any, value: Any, status: int = 200) -> Response:
    """``value`` serialised as the schema of ``kind`` says, without a validation round trip."""
    body = _adapter(kind).dump_json(value)
    return Response(body, status, media_type="application/json")
