"""JSON request bodies, parsed and validated strictly in one step, and their OpenAPI entries.

The body's bytes go straight to pydantic's JSON validator in strict mode: a string where a
number belongs (``"5"``), a float for an integer, an unknown field — each is refused with
the field's path, and JSON arrays still fill the library's tuples. Bytes that are not UTF-8
or not JSON are refused before any validation. (FastAPI's own body handling decodes to
Python objects first, and strict validation of Python objects would refuse a JSON object for
a dataclass.)

Since these bodies bypass FastAPI's body parameters, ``document`` adds their schemas to the
OpenAPI document under ``components/schemas`` and each route names its body with
``body_spec``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

M = TypeVar("M")
REF = "#/components/schemas/{model}"

_documented: dict[str, Any] = {}


class BodyNotUtf8(Exception):
    """The body's bytes are not UTF-8 text."""


@cache
def _adapter(model: Any) -> TypeAdapter[Any]:
    return TypeAdapter(model)


async def parse_body(request: Request, model: type[M]) -> M:
    """The request body as ``model``; ``RequestValidationError`` (field paths under ``body``)."""
    raw = await request.body()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyNotUtf8 from exc
    try:
        value: M = _adapter(model).validate_json(raw, strict=True)  # type: ignore[arg-type]
    except pydantic.ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        raise RequestValidationError(errors) from exc
    return value


def body_spec(model: type[Any]) -> dict[str, Any]:
    """The ``openapi_extra`` of a route whose body is ``model`` (and records its schema)."""
    name = model.__name__
    _documented[name] = model
    schema = {"$ref": REF.format(model=name)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def document(app: FastAPI, *amendments: Callable[[dict[str, Any]], None]) -> None:
    """Make ``app.openapi()`` include the schemas of the bodies ``body_spec`` named, then
    apply each of ``amendments`` to the document."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            schemas = spec.setdefault("components", {}).setdefault("schemas", {})
            for name, model in sorted(_documented.items()):
                found = _adapter(model).json_schema(ref_template=REF, mode="validation")
                for inner, definition in found.pop("$defs", {}).items():
                    schemas.setdefault(inner, definition)
                schemas[name] = found
            for amend in amendments:
                amend(spec)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
