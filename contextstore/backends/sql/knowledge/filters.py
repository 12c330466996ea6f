"""Metadata filters in SQL: which documents' metadata hold one of the allowed values.

A statement's SQL depends on the filters' shape (``filter_shape``: the kinds of the allowed
values), never on their values, which are bound (``filter_parameters``): one compiled
statement serves every filter of a shape. How a value is compared is the database's
(``KnowledgeStrategy.metadata_equals``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from contextstore.core.knowledge import FilterValue

if TYPE_CHECKING:
    from contextstore.backends.sql.knowledge.strategy import KnowledgeStrategy

__all__ = ["Filters", "filter_conditions", "filter_kind", "filter_parameters", "filter_shape"]

Filters = Mapping[str, tuple[FilterValue, ...]]


def filter_kind(option: FilterValue) -> str:
    """``null``, ``true``, ``false``, ``text`` or ``number``."""
    if option is None:
        return "null"
    if isinstance(option, bool):
        return "true" if option else "false"
    return "text" if isinstance(option, str) else "number"


def filter_shape(filters: Filters) -> tuple[tuple[str, ...], ...]:
    """What the SQL of ``filters`` depends on (their values are bound): the kinds of values."""
    return tuple(tuple(filter_kind(option) for option in options) for options in filters.values())


def filter_parameters(strategy: KnowledgeStrategy, filters: Filters) -> dict[str, Any]:
    """The bound values of ``filter_conditions``: each key, and each value to compare."""
    values: dict[str, Any] = {}
    for i, (key, options) in enumerate(filters.items()):
        values[f"fk{i}"] = strategy.json_key(key)
        for j, value in strategy.bound_filter_values(options).items():
            values[f"fv{i}_{j}"] = value
    return values


def filter_conditions(
    strategy: KnowledgeStrategy, shape: tuple[tuple[str, ...], ...]
) -> list[sa.ColumnElement[bool]]:
    """One condition per key: the document's metadata holds one of the allowed values.

    Compared as JSON values: numbers by value, a bool only with a bool, a string only with a
    string, ``None`` only with a present null (``contextstore.core.knowledge.validate_filters``).
    """
    conditions: list[sa.ColumnElement[bool]] = []
    for i, kinds in enumerate(shape):
        alternatives = [strategy.metadata_equals(i, j, kind) for j, kind in enumerate(kinds)]
        conditions.append(sa.or_(*alternatives) if alternatives else sa.false())
    return conditions
