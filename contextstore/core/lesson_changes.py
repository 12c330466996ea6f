"""What one audit event changed in a lesson, column by column, as ``old → new``.

The audit trail (``lesson_events``) stores an ``update``/``status`` event's ``changes`` as
``{"column": {"old": …, "new": …}}`` and a ``scope`` event's as ``{"added": key}`` or
``{"removed": key}``; an ``insert``/``delete`` holds the whole row, which is no change of a
column. The command line's ``lessons show`` and the console's lesson page both show a
history through these functions, so they say the same thing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ARROW = "→"
NOTHING = "—"
# A scope event changes the lesson's applies-to keys (a separate table in SQL).
SCOPE_COLUMN = "applies_to"


@dataclass(frozen=True, slots=True)
class ColumnChange:
    """One column's value before and after an event (``None``: absent on that side)."""

    column: str
    old: Any
    new: Any

    def describe(self, limit: int | None = None) -> str:
        """``severity: info → critical``; each value cut to ``limit`` characters if given.

        A scope key added reads ``applies_to: + tag:x``, one removed ``applies_to: − tag:x``.
        """
        if self.column == SCOPE_COLUMN and (self.old is None) != (self.new is None):
            sign, key = ("+", self.new) if self.old is None else ("−", self.old)
            return f"{self.column}: {sign} {change_value(key, limit)}"
        old, new = change_value(self.old, limit), change_value(self.new, limit)
        return f"{self.column}: {old} {ARROW} {new}"


def column_changes(event: str, changes: Any) -> tuple[ColumnChange, ...]:
    """The columns an audit event changed, in the order stored (``update``/``status``), or
    the applies-to key a ``scope`` event added or removed; nothing for ``insert``/``delete``
    or a ``changes`` that is not a mapping (events recorded before the audit kept them)."""
    if not isinstance(changes, Mapping) or event in ("insert", "delete"):
        return ()
    if event == "scope":
        if "added" in changes:
            return (ColumnChange(SCOPE_COLUMN, None, changes["added"]),)
        if "removed" in changes:
            return (ColumnChange(SCOPE_COLUMN, changes["removed"], None),)
        return ()
    return tuple(
        ColumnChange(str(column), _side(value, "old"), _side(value, "new"))
        for column, value in changes.items()
    )


def describe_changes(event: str, changes: Any, limit: int | None = None) -> list[str]:
    """``column_changes`` as lines, ``column: old → new`` each (see ``ColumnChange.describe``)."""
    return [change.describe(limit) for change in column_changes(event, changes)]


def change_value(value: Any, limit: int | None = None) -> str:
    """A value as a history shows it: ``—`` for none, ``""`` for empty text, text as it is,
    anything else as JSON; longer than ``limit`` characters, cut with ``…`` at the end."""
    if value is None:
        text = NOTHING
    elif value == "":
        text = '""'
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if limit is not None and len(text) > limit:
        return text[: max(limit - 1, 0)] + "…"
    return text


def _side(value: Any, side: str) -> Any:
    return value.get(side) if isinstance(value, Mapping) else None
