"""Lessons: search and filter, the lessons a scope gets, one lesson's record and audit history,
and the forms that activate, retire and edit it — for owner keys only: lessons are the
database's, and an admin key's reach is its own namespace (it reads them).

Every read and write is one ``LessonRepository`` call (one transaction, validated before
anything is written), the same calls the command line and ``/v1/lessons`` make.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from contextstore.core.lessons import SEVERITIES, STATUSES, LessonRecord
from contextstore.core.matching import ORDERS, MatchOptions, Scope, explain, match
from contextstore.errors import NotFoundError, ValidationError
from contextstore.interfaces.console.web import (
    SECURITY_HEADERS,
    Visitor,
    console,
    error_page,
    form_action,
    page,
    render,
    url,
)

PAGE_SIZE: Final = 200
"""Most lessons one list shows; a narrower search shows the rest."""


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.replace("\n", ",").split(",") if part.strip())


async def _list(request: Request, visitor: Visitor) -> Response:
    params = request.query_params
    filters = {
        "search": params.get("q", ""),
        "status": params.get("status", ""),
        "severity": params.get("severity", ""),
        "key": params.get("key", ""),
    }
    backends = console(request).backends()
    context: dict[str, Any] = {
        "filters": filters,
        "statuses": STATUSES,
        "severities": SEVERITIES,
        "page_size": PAGE_SIZE,
    }
    try:
        found = await backends.call(
            lambda: backends.lessons.list(
                search=filters["search"] or None,
                status=filters["status"] or None,
                severity=filters["severity"] or None,
                key=filters["key"] or None,
                limit=PAGE_SIZE + 1,
            )
        )
    except ValidationError as exc:
        context.update(lessons=[], more=False, error=str(exc))
        return render(request, "lessons.html", context, status=422, visitor=visitor)
    context.update(lessons=found[:PAGE_SIZE], more=len(found) > PAGE_SIZE, error=None)
    return render(request, "lessons.html", context, visitor=visitor)


async def _explain(request: Request, visitor: Visitor) -> Response:
    """Every lesson a scope finds: the keys that matched, its rank, and why it was left out.

    ``explain`` over the repository's candidates of every status (a retired, proposed or
    superseded lesson shows as "not active"), with the options an agent's run would use;
    ``match`` with the same arguments gives the block — it accepts the active ones only, as
    a run does — so the two always agree.
    """
    params = request.query_params
    entity_ids = _split(params.get("entity_ids", ""))
    tags = _split(params.get("tags", ""))
    query = params.get("query", "")
    form = {
        "entity_ids": ", ".join(entity_ids),
        "tags": ", ".join(tags),
        "query": query,
        "order": params.get("order", "") or "severity",
        "k": params.get("k", ""),
        "bytes": params.get("bytes", ""),
    }
    context: dict[str, Any] = {"form": form, "orders": ORDERS, "result": None, "explained": ()}
    try:
        options = MatchOptions(
            k=_integer("k", form["k"]),
            byte_budget=_integer("bytes", form["bytes"]),
            order=form["order"],
        )
    except ValidationError as exc:
        context["error"] = str(exc)
        return render(request, "explain.html", context, status=422, visitor=visitor)
    if entity_ids or tags:
        scope = Scope(entity_ids=entity_ids, tags=tags)
        backends = console(request).backends()
        candidates = await backends.call(
            lambda: backends.lessons.candidates(scope, include_inactive=True)
        )
        context["result"] = match(candidates, scope, options, query or None)
        context["explained"] = explain(candidates, scope, options, query or None)
    return render(request, "explain.html", context, visitor=visitor)


def _integer(field: str, text: str) -> int:
    if not text.strip():
        return 0
    try:
        return int(text)
    except ValueError as exc:
        raise ValidationError(field, f"{text!r} is not a whole number") from exc


async def _detail(request: Request, visitor: Visitor) -> Response:
    return await _show(request, visitor, request.path_params["entity_id"])


async def _show(
    request: Request,
    visitor: Visitor,
    entity_id: str,
    *,
    status: int = 200,
    error: str | None = None,
    draft: dict[str, str] | None = None,
) -> Response:
    backends = console(request).backends()

    def read() -> tuple[LessonRecord, list[Any]]:
        return backends.lessons.get(entity_id), backends.lessons.history(entity_id)

    try:
        record, events = await backends.call(read)
    except NotFoundError:
        return error_page(request, 404, f"There is no lesson {entity_id!r}.", visitor)
    form = draft or {
        "severity": record.severity,
        "summary": record.summary,
        "detail": record.detail,
        "injection_form": record.injection_form,
        "applies_to": "\n".join(record.applies_to),
    }
    context = {
        "lesson": record,
        "events": events,
        "form": form,
        "severities": SEVERITIES,
        "error": error,
        "done": request.query_params.get("done", ""),
    }
    return render(request, "lesson.html", context, status=status, visitor=visitor)


def _back(entity_id: str, done: str) -> Response:
    target = url(f"/lessons/{quote(entity_id, safe='')}") + "?" + urlencode({"done": done})
    response = RedirectResponse(target, status_code=303)
    response.headers.update(SECURITY_HEADERS)
    return response


def actor(visitor: Visitor) -> str:
    """Who the audit names for a change made here: the console and the owner key's id."""
    return f"console:{visitor.principal.key_id}"


def refused_unless_owner(request: Request, visitor: Visitor) -> Response | None:
    """403 unless the visitor's key is an owner key: only owners change lessons."""
    if visitor.principal.may("owner"):
        return None
    return error_page(
        request, 403, "Lessons are the database's: only an owner key changes them.", visitor
    )


async def _change_status(request: Request, visitor: Visitor, fields: dict[str, str]) -> Response:
    entity_id = request.path_params["entity_id"]
    action = request.path_params["action"]
    if action not in ("activate", "retire"):
        return error_page(request, 404, "There is no such page.", visitor)
    refused = refused_unless_owner(request, visitor)
    if refused is not None:
        return refused
    backends = console(request).backends()
    lessons = backends.lessons.as_actor(actor(visitor))
    change = lessons.activate if action == "activate" else lessons.retire
    try:
        await backends.call(lambda: change(entity_id))
    except NotFoundError:
        return error_page(request, 404, f"There is no lesson {entity_id!r}.", visitor)
    except ValidationError as exc:  # the lifecycle refuses it (a superseded lesson)
        return await _show(request, visitor, entity_id, status=422, error=str(exc))
    return _back(entity_id, "activated" if action == "activate" else "retired")


async def _edit(request: Request, visitor: Visitor, fields: dict[str, str]) -> Response:
    entity_id = request.path_params["entity_id"]
    refused = refused_unless_owner(request, visitor)
    if refused is not None:
        return refused
    draft = {
        name: fields.get(name, "").replace("\r\n", "\n")
        for name in ("severity", "summary", "detail", "injection_form", "applies_to")
    }
    backends = console(request).backends()
    try:
        await backends.call(
            lambda: backends.lessons.as_actor(actor(visitor)).update(
                entity_id,
                severity=draft["severity"],
                summary=draft["summary"],
                detail=draft["detail"],
                injection_form=draft["injection_form"],
                applies_to=_split(draft["applies_to"]),
            )
        )
    except NotFoundError:
        return error_page(request, 404, f"There is no lesson {entity_id!r}.", visitor)
    except ValidationError as exc:
        return await _show(request, visitor, entity_id, status=422, error=str(exc), draft=draft)
    return _back(entity_id, "saved")


lessons_list = page(_list)
scope = page(_explain)
detail = page(_detail)
change_status = form_action(_change_status)
edit = form_action(_edit)
