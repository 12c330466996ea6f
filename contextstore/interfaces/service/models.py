"""The service's request and response bodies, defined by the library's own types.

A run and a match answer in the one result shape every interface shares
(``contextstore.interfaces.results``: ``RunJson``, ``MatchJson``). Other responses *are* the
library's dataclasses (``LessonRecord``, ``LessonEvent``, ``MetricsReport``, ``LessonStats``):
pydantic reads their fields and types, so the JSON and the OpenAPI schema follow the library
whenever a field is added. Requests
wrap the library's types (``Scope``, ``MatchOptions``, ``LessonRecord``) in envelopes that
add only what HTTP needs. Every request model is strict and closed: a string where a number
belongs, or a field the library does not have, is refused (422) naming the field.
Domain rules (an entity id's shape, a budget ≥ 1) stay where they are, in the library; its
``ValidationError`` answers 422 with the same field name the library uses.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, Final, get_type_hints

import pydantic.dataclasses
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from pydantic_core import to_json
from starlette.responses import Response

from contextstore.backends.sql.lessons import LessonRepository
from contextstore.backends.sql.metrics import MetricsFilter, MetricsRepository
from contextstore.core.knowledge import DocumentInput
from contextstore.core.lessons import LessonRecord
from contextstore.core.matching import MatchOptions, Scope

STRICT: Final = ConfigDict(extra="forbid", strict=True)


class RunRequest(BaseModel):
    """The arguments of ``ContextEngine.run``."""

    model_config = STRICT

    query: str
    scope: Scope | None = None
    filters: dict[str, Any] | None = None
    override_budget: int | None = Field(default=None, description="Characters, ≥ 1")


class MatchRequest(BaseModel):
    """The arguments of ``match`` and ``explain``: a scope, the matcher's options (``k``,
    ``byte_budget``, ``order``), the ``query`` that ``order="relevance"`` ranks by, and
    whether to ``explain`` every candidate. The lessons are the database's."""

    model_config = STRICT

    scope: Scope
    options: MatchOptions | None = None
    query: str | None = Field(default=None, description='Read by options.order "relevance"')
    explain: bool = False


@pydantic.dataclasses.dataclass(config=STRICT, frozen=True)
class NewLesson(LessonRecord):
    """A lesson to add: every ``LessonRecord`` field, ``entity_id`` and ``injection_form``
    required; ``created_at`` (RFC 3339 with an offset) defaults to now."""


def as_record(lesson: LessonRecord) -> LessonRecord:
    """The plain library record behind a validated ``NewLesson``."""
    fields = LessonRecord.__dataclass_fields__
    return LessonRecord(**{name: getattr(lesson, name) for name in fields})


def keyword_fields(
    function: Callable[..., Any], *, types: Any = None, exclude: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``function``'s keyword-only parameters as optional pydantic fields.

    Each is typed as ``function`` annotates it, or as ``types`` (a dataclass) annotates the
    field of that name. A request model built from them follows the library's signature: a
    filter added there is a query parameter here, with nothing to copy by hand.
    """
    hints = get_type_hints(types if types is not None else function)
    fields: dict[str, Any] = {}
    for name, parameter in inspect.signature(function).parameters.items():
        keyword = parameter.kind is inspect.Parameter.KEYWORD_ONLY
        if keyword and name not in exclude and name in hints:
            fields[name] = (hints[name] | None, None)
    return fields


def filter_fields(filters: type[Any], *, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of the filter dataclass ``filters`` as optional pydantic fields, typed as
    it annotates them: a filter added there is a query parameter here."""
    hints = get_type_hints(filters)
    return {
        field.name: (hints[field.name] | None, None)
        for field in dataclasses.fields(filters)
        if field.name not in exclude
    }


if TYPE_CHECKING:
    LessonEdit = BaseModel
    LessonQuery = BaseModel
    ReportQuery = BaseModel
    StatsQuery = BaseModel
else:
    LessonEdit = create_model(
        "LessonEdit",
        __config__=STRICT,
        __doc__="Content fields to change; absent ones stay. Status has its own endpoints.",
        **keyword_fields(LessonRepository.update, types=LessonRecord),
    )
    # Query strings are text: these two convert ("5" is 5), yet still refuse unknown names.
    LessonQuery = create_model(
        "LessonQuery",
        __config__=ConfigDict(extra="forbid"),
        __doc__="Filters of ``LessonRepository.list``.",
        **keyword_fields(LessonRepository.list),
    )
    ReportQuery = create_model(
        "ReportQuery",
        __config__=ConfigDict(extra="forbid"),
        __doc__="Filters of ``MetricsRepository.report``; the namespace is always the key's.",
        # ``levels`` is the console's: the report over HTTP always has its levels.
        **filter_fields(MetricsFilter, exclude=("namespace",)),
        **keyword_fields(MetricsRepository.report, exclude=("levels",)),
    )
    StatsQuery = create_model(
        "StatsQuery",
        __config__=ConfigDict(extra="forbid"),
        __doc__="Filters of ``MetricsRepository.lesson_stats``; the namespace is the key's.",
        **keyword_fields(MetricsRepository.lesson_stats, exclude=("namespace",)),
    )


class SearchRequest(BaseModel):
    """The arguments of ``KnowledgeBase.search`` in the key's namespace."""

    model_config = STRICT

    query: str
    top_k: int = 5
    filters: dict[str, Any] | None = None


@pydantic.dataclasses.dataclass(config=STRICT, frozen=True)
class NewDocument(DocumentInput):
    """A document to store in the key's namespace; a known ``source`` is replaced."""


class ProposalRequest(BaseModel):
    """A lesson an agent proposes: stored as ``proposed``, matched once an admin activates
    it. ``evidence`` names what taught it: ``{"query": …}`` and/or ``{"run": …}``."""

    model_config = STRICT

    entity_id: str
    injection_form: str
    applies_to: tuple[str, ...]
    severity: str = "info"
    summary: str = ""
    detail: str = ""
    evidence: dict[str, Any]

    def record(self) -> LessonRecord:
        return LessonRecord(
            entity_id=self.entity_id,
            injection_form=self.injection_form,
            severity=self.severity,
            status="proposed",
            applies_to=self.applies_to,
            summary=self.summary,
            detail=self.detail,
            evidence=self.evidence,
        )


class RejectRequest(BaseModel):
    """Why a proposed lesson is rejected (kept in its review)."""

    model_config = STRICT

    reason: str


class SupersedeRequest(BaseModel):
    """The lesson that replaces this one (activated if it is proposed)."""

    model_config = STRICT

    superseded_by: str


class Health(BaseModel):
    """``status`` is ``ok`` while the process answers; ``version``, contextstore's."""

    status: str
    version: str


MAX_PRUNE_SECONDS: Final = 100 * 366 * 86400
"""The largest age a prune may name (a century): any further back deletes nothing."""


class PruneRequest(BaseModel):
    """Delete the runs recorded more than ``older_than_seconds`` ago: the key's namespace's,
    or every namespace's with ``all_namespaces`` (owner keys only)."""

    model_config = STRICT

    older_than_seconds: int = Field(ge=0, le=MAX_PRUNE_SECONDS)
    all_namespaces: bool = False


class PruneResult(BaseModel):
    """How many runs a prune deleted, recorded before ``cutoff`` (UTC), in ``namespace``
    (``null``: every namespace)."""

    deleted: int
    cutoff: datetime
    namespace: str | None


class Readiness(BaseModel):
    """``status``: ``ok``, ``degraded`` (Redis down; runs fall back to process memory) or
    ``unavailable`` (SQL down; answered 503). ``sql`` and ``redis`` say why, for a caller with
    a key; without one they are left out (``null``)."""

    status: str
    sql: str | None = None
    redis: str | None = None


@cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def shape_response(value: Mapping[str, Any]) -> Response:
    """A result shape (``contextstore.interfaces.results``), already typed by the function
    that built it, written as JSON without a schema to walk."""
    return Response(to_json(value), 200, media_type="application/json")


def json_response(kind: Any, value: Any, status: int = 200) -> Response:
    """``value`` serialised as the schema of ``kind`` says, without a validation round trip."""
    body = _adapter(kind).dump_json(value)
    return Response(body, status, media_type="application/json")
