"""The error body every refusal carries, ``{"error": {"type", "message", "field"}}``, as
the request layers write it before any application runs."""

from __future__ import annotations

import json

__all__ = ["BodyTooLarge", "error_bytes"]


class BodyTooLarge(Exception):
    """Raised while a body streams in, once it passes the limit (see ``BodyLimit``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the body is larger than the limit of {limit} bytes")


def error_bytes(kind: str, message: str, field: str | None = None) -> bytes:
    """The error body, encoded, for the ASGI layers that answer before the app."""
    body = {"error": {"type": kind, "message": message, "field": field}}
    return json.dumps(body, ensure_ascii=False).encode("utf-8")
