"""Knowledge documents of the key's namespace: list by source prefix, search, read, delete.

Each read is one ``KnowledgeBase`` call (``list``, ``search``, ``get``), the calls the
command line and the engine make; deleting is ``delete`` (one transaction, passages with it).
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

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
"""Most documents one list shows; a longer prefix shows the rest."""
SEARCH_RESULTS: Final = 20


async def _list(request: Request, visitor: Visitor) -> Response:
    params = request.query_params
    prefix = params.get("prefix", "")
    query = params.get("q", "")
    backends = console(request).backends()
    namespace = visitor.principal.namespace
    context: dict[str, Any] = {
        "prefix": prefix,
        "q": query,
        "namespace": namespace,
        "deleted": params.get("deleted", ""),
        "page_size": PAGE_SIZE,
        "documents": [],
        "results": None,
        "more": False,
        "error": None,
    }
    try:
        if query.strip():
            context["results"] = await backends.call(
                lambda: backends.documents(namespace).search(query, top_k=SEARCH_RESULTS)
            )
        else:
            found = await backends.call(
                lambda: backends.documents(namespace).list(
                    prefix=prefix or None, limit=PAGE_SIZE + 1
                )
            )
            context.update(documents=found[:PAGE_SIZE], more=len(found) > PAGE_SIZE)
    except ValidationError as exc:
        context["error"] = str(exc)
        return render(request, "documents.html", context, status=422, visitor=visitor)
    return render(request, "documents.html", context, visitor=visitor)


async def _view(request: Request, visitor: Visitor) -> Response:
    source = request.query_params.get("source", "")
    backends = console(request).backends()
    namespace = visitor.principal.namespace
    try:
        document = await backends.call(lambda: backends.documents(namespace).get(source))
    except NotFoundError:
        return error_page(request, 404, f"There is no document {source!r}.", visitor)
    return render(request, "document.html", {"document": document}, visitor=visitor)


async def _delete(request: Request, visitor: Visitor, fields: dict[str, str]) -> Response:
    source = fields.get("source", "")
    backends = console(request).backends()
    namespace = visitor.principal.namespace
    try:
        await backends.call(lambda: backends.documents(namespace).delete(source))
    except NotFoundError:
        return error_page(request, 404, f"There is no document {source!r}.", visitor)
    response = RedirectResponse(
        url("/documents") + "?" + urlencode({"deleted": source}), status_code=303
    )
    response.headers.update(SECURITY_HEADERS)
    return response


documents_list = page(_list)
view = page(_view)
delete = form_action(_delete)
