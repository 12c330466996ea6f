"""Proposed: the review queue of lessons agents proposed — who, from which namespace, what
taught it — each to activate as it is, to edit and then activate, or to reject with a reason.

Activating (with or without edits) is ``LessonRepository.accept`` and rejecting is ``reject``:
one transaction each, the review recorded with the signed-in key as the reviewer. Any signed-in
key sees the queue; its forms need an owner key, as every lesson write in the console does.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from contextstore.core.lessons import SEVERITIES
from contextstore.errors import NotFoundError, ValidationError
from contextstore.interfaces.console.pages.lessons import actor, refused_unless_owner
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

QUEUE_SIZE: Final = 200
"""Most proposals the queue shows at once (the oldest ids first)."""
FIELDS: Final = ("severity", "summary", "detail", "injection_form", "applies_to")


def _keys(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.replace("\n", ",").split(",") if part.strip())


async def _queue(
    request: Request,
    visitor: Visitor,
    *,
    status: int = 200,
    error: str | None = None,
    failed: str | None = None,
    draft: dict[str, str] | None = None,
) -> Response:
    backends = console(request).backends()

    def read() -> tuple[list[Any], dict[str, Any]]:
        found = backends.lessons.list(status="proposed", limit=QUEUE_SIZE + 1)
        return found, backends.lessons.proposals([record.entity_id for record in found])

    found, made = await backends.call(read)
    entries = []
    for record in found[:QUEUE_SIZE]:
        form = {
            "severity": record.severity,
            "summary": record.summary,
            "detail": record.detail,
            "injection_form": record.injection_form,
            "applies_to": "\n".join(record.applies_to),
        }
        if draft is not None and record.entity_id == failed:
            form = draft
        entries.append({"lesson": record, "proposal": made.get(record.entity_id), "form": form})
    context = {
        "entries": entries,
        "more": len(found) > QUEUE_SIZE,
        "severities": SEVERITIES,
        "error": error,
        "failed": failed,
        "done": request.query_params.get("done", ""),
        "lesson": request.query_params.get("lesson", ""),
    }
    return render(request, "proposals.html", context, status=status, visitor=visitor)


async def _list(request: Request, visitor: Visitor) -> Response:
    return await _queue(request, visitor)


def _back(done: str, entity_id: str) -> Response:
    target = url("/proposals") + "?" + urlencode({"done": done, "lesson": entity_id})
    response = RedirectResponse(target, status_code=303)
    response.headers.update(SECURITY_HEADERS)
    return response


async def _activate(request: Request, visitor: Visitor, fields: dict[str, str]) -> Response:
    """Activate the proposal with the form's fields: those that differ are saved first."""
    if (refused := refused_unless_owner(request, visitor)) is not None:
        return refused
    entity_id = request.path_params["entity_id"]
    draft = {name: fields.get(name, "").replace("\r\n", "\n") for name in FIELDS}
    backends = console(request).backends()
    lessons = backends.lessons.as_actor(actor(visitor))

    def accept() -> None:
        current = lessons.get(entity_id)
        wanted: dict[str, Any] = {
            "severity": draft["severity"],
            "summary": draft["summary"],
            "detail": draft["detail"],
            "injection_form": draft["injection_form"],
            "applies_to": _keys(draft["applies_to"]),
        }
        changes = {
            name: value
            for name, value in wanted.items()
            if name in fields and value != getattr(current, name)
        }
        lessons.accept(entity_id, **changes)

    try:
        await backends.call(accept)
    except NotFoundError:
        return error_page(request, 404, f"There is no lesson {entity_id!r}.", visitor)
    except ValidationError as exc:
        return await _queue(
            request, visitor, status=422, error=str(exc), failed=entity_id, draft=draft
        )
    return _back("activated", entity_id)


async def _reject(request: Request, visitor: Visitor, fields: dict[str, str]) -> Response:
    if (refused := refused_unless_owner(request, visitor)) is not None:
        return refused
    entity_id = request.path_params["entity_id"]
    backends = console(request).backends()
    lessons = backends.lessons.as_actor(actor(visitor))
    try:
        await backends.call(lambda: lessons.reject(entity_id, fields.get("reason", "")))
    except NotFoundError:
        return error_page(request, 404, f"There is no lesson {entity_id!r}.", visitor)
    except ValidationError as exc:
        return await _queue(request, visitor, status=422, error=str(exc), failed=entity_id)
    return _back("rejected", entity_id)


queue = page(_list)
activate = form_action(_activate)
reject = form_action(_reject)
