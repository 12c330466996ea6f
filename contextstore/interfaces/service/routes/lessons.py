"""``/v1/lessons``: lesson administration (owner keys write, admin keys read), lesson usage
and proposals (any key).

Lessons belong to the database, shared by its namespaces, so only an owner key (the
database's) adds, edits or changes the status of one; an admin key, whose reach is its own
namespace, reads them; no route takes a namespace. Any key may propose a lesson
(``/v1/lessons/propose``): it is stored ``proposed``, counted against the key's namespace's
cap, and matched only once an owner activates it. Each call is one repository method, run in
a worker thread: one transaction, validated before anything is written. The audit names
every change made here ``api:<key id>``.

``/v1/lessons/stats`` reads the caller's namespace's runs, as ``/v1/metrics/report`` does,
so any key may read it (every namespace's with ``all_namespaces=true`` and an owner key).
It is routed before ``/v1/lessons/{entity_id}``: a lesson whose id is ``stats`` is read
through the list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from contextstore.backends.sql.metrics.report import LessonStats
from contextstore.backends.sql.repository import LessonEvent, LessonRepository
from contextstore.core.lessons import LessonRecord
from contextstore.interfaces.apikeys import Principal
from contextstore.interfaces.service import auth
from contextstore.interfaces.service.auth import Admin, Caller, Owner
from contextstore.interfaces.service.body import body_spec, parse_body
from contextstore.interfaces.service.direct import DirectRoute
from contextstore.interfaces.service.errors import error_responses
from contextstore.interfaces.service.models import (
    LessonEdit,
    LessonQuery,
    NewLesson,
    ProposalRequest,
    RejectRequest,
    StatsQuery,
    SupersedeRequest,
    as_record,
    json_response,
)
from contextstore.interfaces.service.routes.agent import backends

router = APIRouter(prefix="/v1/lessons", tags=["lessons"], route_class=DirectRoute)

ERRORS = error_responses(400, 401, 403, 404, 413, 422, 503)
PROPOSAL_ERRORS = error_responses(400, 401, 403, 404, 413, 422, 429, 503)
Records = list[LessonRecord]


def actor(caller: Principal) -> str:
    """Who the audit names for a change made through the API: ``api:<key id>``."""
    return f"api:{caller.key_id}"


def writer(request: Request, caller: Principal) -> LessonRepository:
    """The lesson repository with its writes attributed to ``caller``'s key."""
    return backends(request).lessons.as_actor(actor(caller))


async def change(
    request: Request, caller: Principal, work: Callable[[LessonRepository], LessonRecord]
) -> Response:
    """``work`` on the lesson repository as ``caller``, in a worker thread; the lesson after."""
    lessons = writer(request, caller)
    changed = await backends(request).call(lambda: work(lessons))
    return json_response(LessonRecord, changed)


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
    lessons = writer(request, auth.owner_caller(request))
    body = await parse_body(request, NewLesson)
    added = await backends(request).call(lambda: lessons.add(as_record(body)))
    return json_response(LessonRecord, added, 201)


@router.post(
    "/propose",
    status_code=201,
    response_model=LessonRecord,
    responses=PROPOSAL_ERRORS,
    openapi_extra=body_spec(ProposalRequest),
    summary="Propose a lesson (any key)",
)
async def propose(request: Request) -> Response:
    """Store a lesson as ``proposed``, attributed to the key, counted against its namespace's
    cap (429 past it). A lesson with the same injection form and scope keys is refused (422,
    ``injection_form``, naming it). An owner activates (or rejects) it."""
    caller = auth.caller(request)
    body = await parse_body(request, ProposalRequest)
    lessons = writer(request, caller)
    proposed = await backends(request).call(
        lambda: lessons.propose(body.record(), namespace=caller.namespace)
    )
    return json_response(LessonRecord, proposed, 201)


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
    chosen = filters.model_dump()
    chosen["all_namespaces"] = auth.every_namespace(caller, chosen.get("all_namespaces"))
    metrics = store.metrics(caller.namespace)
    found = await store.call(lambda: metrics.lesson_stats(**chosen))
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
async def edit_lesson(entity_id: str, caller: Owner, request: Request) -> Response:
    """Change content fields; ``updated_at`` moves, ``created_at`` never does."""
    body = await parse_body(request, LessonEdit)
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    return await change(request, caller, lambda lessons: lessons.update(entity_id, **changes))


@router.post(
    "/{entity_id}/activate", response_model=LessonRecord, responses=ERRORS, summary="Activate"
)
async def activate(entity_id: str, caller: Owner, request: Request) -> Response:
    return await change(request, caller, lambda lessons: lessons.activate(entity_id))


@router.post("/{entity_id}/retire", response_model=LessonRecord, responses=ERRORS, summary="Retire")
async def retire(entity_id: str, caller: Owner, request: Request) -> Response:
    return await change(request, caller, lambda lessons: lessons.retire(entity_id))


@router.post(
    "/{entity_id}/reject",
    response_model=LessonRecord,
    responses=ERRORS,
    openapi_extra=body_spec(RejectRequest),
    summary="Reject a proposed lesson",
)
async def reject(entity_id: str, request: Request) -> Response:
    """Retire a proposed lesson, keeping the reason and the reviewer in its review."""
    caller = auth.owner_caller(request)
    body = await parse_body(request, RejectRequest)
    return await change(request, caller, lambda lessons: lessons.reject(entity_id, body.reason))


@router.post(
    "/{entity_id}/supersede",
    response_model=LessonRecord,
    responses=ERRORS,
    openapi_extra=body_spec(SupersedeRequest),
    summary="Supersede",
)
async def supersede(entity_id: str, caller: Owner, request: Request) -> Response:
    """Mark this lesson superseded by ``superseded_by``; returns this (old) lesson."""
    body = await parse_body(request, SupersedeRequest)
    return await change(
        request, caller, lambda lessons: lessons.supersede(entity_id, body.superseded_by)
    )


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
