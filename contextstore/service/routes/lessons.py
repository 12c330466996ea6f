"""``/v1/lessons``: lesson administration (admin keys), and lesson usage (any key).

Lessons belong to the database, shared by its namespaces, so every administration route
needs an admin key and none takes a namespace. Each call is one repository method, run in
a worker thread: one transaction, validated before anything is written. The audit names
every change made here ``api:<key id>``.

``/v1/lessons/stats`` reads the caller's namespace's runs, as ``/v1/metrics/report`` does,
so any key may read it. It is routed before ``/v1/lessons/{entity_id}``: a lesson whose id
is ``stats`` is read through the list.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from contextstore.apikeys import Principal
from contextstore.lessons import LessonRecord
from contextstore.service import auth
from contextstore.service.auth import Admin, Caller
from contextstore.service.body import body_spec, parse_body
from contextstore.service.direct import DirectRoute
from contextstore.service.errors import ErrorBody
from contextstore.service.models import (
    LessonEdit,
    LessonQuery,
    NewLesson,
    StatsQuery,
    SupersedeRequest,
    as_record,
    json_response,
)
from contextstore.service.routes.agent import backends
from contextstore.sql.report import LessonStats
from contextstore.sql.repository import LessonEvent, LessonRepository

router = APIRouter(prefix="/v1/lessons", tags=["lessons"], route_class=DirectRoute)

ERRORS: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 404, 413, 422, 503)
}
Records = list[LessonRecord]


def actor(caller: Principal) -> str:
    """Who the audit names for a change made through the API: ``api:<key id>``."""
    return f"api:{caller.key_id}"


def writer(request: Request, caller: Principal) -> LessonRepository:
    """The lesson repository with its writes attributed to ``caller``'s key."""
    return backends(request).lessons.as_actor(actor(caller))


@router.get("", response_model=Records, responses=ERRORS, summary="List lessons")
async def list_lessons(
    filters: Annotated[LessonQuery, Query()], _: Admin, request: Request
) -> Response:
    """Lessons ordered by entity id, filtered by status, severity and scope key."""
    store = backends(request)
    found = await store.call(lambda: store.lessons.list(**filters.model_dump()))
    return json_response(Records, found)


@router.post(
    "",
    status_code=201,
    response_model=LessonRecord,
    responses=ERRORS,
    openapi_extra=body_spec(NewLesson),
    summary="Add a lesson",
)
async def add_lesson(request: Request) -> Response:
    """Insert a new lesson; an existing entity id is refused (422, ``entity_id``)."""
    lessons = writer(request, auth.admin_caller(request))
    body = await parse_body(request, NewLesson)
    added = await backends(request).call(lambda: lessons.add(as_record(body)))
    return json_response(LessonRecord, added, 201)


@router.get(
    "/stats",
    response_model=LessonStats,
    responses=ERRORS,
    tags=["metrics"],
    summary="How the key's namespace's runs used each lesson",
)
async def lesson_stats(
    filters: Annotated[StatsQuery, Query()], caller: Caller, request: Request
) -> Response:
    """Per lesson the runs that matched and included it, and the active lessons none
    included, over the namespace's runs from ``since`` (inclusive) to ``until``."""
    store = backends(request)
    found = await store.call(
        lambda: store.metrics.lesson_stats(namespace=caller.namespace, **filters.model_dump())
    )
    return json_response(LessonStats, found)


@router.get("/{entity_id}", response_model=LessonRecord, responses=ERRORS, summary="One lesson")
async def get_lesson(entity_id: str, _: Admin, request: Request) -> Response:
    store = backends(request)
    found = await store.call(lambda: store.lessons.get(entity_id))
    return json_response(LessonRecord, found)


@router.patch(
    "/{entity_id}",
    response_model=LessonRecord,
    responses=ERRORS,
    openapi_extra=body_spec(LessonEdit),
    summary="Edit a lesson",
)
async def edit_lesson(entity_id: str, caller: Admin, request: Request) -> Response:
    """Change content fields; ``updated_at`` moves, ``created_at`` never does."""
    body = await parse_body(request, LessonEdit)
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    lessons = writer(request, caller)
    edited = await backends(request).call(lambda: lessons.update(entity_id, **changes))
    return json_response(LessonRecord, edited)


@router.post(
    "/{entity_id}/activate", response_model=LessonRecord, responses=ERRORS, summary="Activate"
)
async def activate(entity_id: str, caller: Admin, request: Request) -> Response:
    lessons = writer(request, caller)
    changed = await backends(request).call(lambda: lessons.activate(entity_id))
    return json_response(LessonRecord, changed)


@router.post("/{entity_id}/retire", response_model=LessonRecord, responses=ERRORS, summary="Retire")
async def retire(entity_id: str, caller: Admin, request: Request) -> Response:
    lessons = writer(request, caller)
    changed = await backends(request).call(lambda: lessons.retire(entity_id))
    return json_response(LessonRecord, changed)


@router.post(
    "/{entity_id}/supersede",
    response_model=LessonRecord,
    responses=ERRORS,
    openapi_extra=body_spec(SupersedeRequest),
    summary="Supersede",
)
async def supersede(entity_id: str, caller: Admin, request: Request) -> Response:
    """Mark this lesson superseded by ``superseded_by``; returns this (old) lesson."""
    body = await parse_body(request, SupersedeRequest)
    lessons = writer(request, caller)
    old = await backends(request).call(lambda: lessons.supersede(entity_id, body.superseded_by))
    return json_response(LessonRecord, old)


@router.get(
    "/{entity_id}/history",
    response_model=list[LessonEvent],
    responses=ERRORS,
    summary="A lesson's audit history",
)
async def history(entity_id: str, _: Admin, request: Request) -> Response:
    """Audit rows, oldest first (also for a deleted lesson; none for an unknown one)."""
    store = backends(request)
    events = await store.call(lambda: store.lessons.history(entity_id))
    return json_response(list[LessonEvent], events)
