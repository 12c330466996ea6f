"""Which namespaces a ``MetricsRepository`` call may touch: its own, unless asked for all.

A store's metrics are bound to the store's namespace (a tenant): reads, prunes and writes
stay inside it unless the caller passes ``all_namespaces=True``. Refusals are
``ValidationError`` naming the field, raised before any statement is built.
"""

from __future__ import annotations

from typing import Any

from contextstore.backends.sql.metrics.validation import TEXT_LIMITS, checked_text, row_values
from contextstore.backends.sql.unreadable import printable
from contextstore.core.metrics import QueryMetric
from contextstore.errors import ValidationError

__all__ = ["bound_namespace", "bound_row", "scoped_namespace"]


def bound_namespace(namespace: str) -> str:
    """``namespace`` if a repository may be bound to it (what the column can hold)."""
    return checked_text("namespace", namespace, limit=TEXT_LIMITS["namespace"], required=True)


def scoped_namespace(bound: str | None, namespace: str | None, all_namespaces: bool) -> str | None:
    """The namespace a call covers (``None``: every namespace).

    Unbound (``bound is None``) or with ``all_namespaces``: ``namespace`` as given. Bound:
    the bound namespace; naming another one is refused, so a tenant's call never reaches
    another tenant's rows by a typo.
    """
    if not isinstance(all_namespaces, bool):
        raise ValidationError("all_namespaces", f"must be true or false, got {all_namespaces!r}")
    if bound is None or all_namespaces:
        return namespace
    if namespace is not None and namespace != bound:
        raise ValidationError(
            "namespace",
            f"this store is bound to namespace {bound!r}; "
            f"pass all_namespaces=True to reach {printable(str(namespace))!r}",
        )
    return bound


def bound_row(bound: str | None, metric: QueryMetric) -> dict[str, Any]:
    """The INSERT values of ``metric`` (``row_values``), refused when a bound repository is
    given a metric of another namespace."""
    values = row_values(metric)
    if bound is not None and values["namespace"] != bound:
        raise ValidationError(
            "namespace",
            f"this store records namespace {bound!r} only, "
            f"got a metric of {printable(values['namespace'])!r}",
        )
    return values
