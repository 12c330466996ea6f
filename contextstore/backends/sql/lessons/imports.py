"""How an import of lessons is planned and paced: what it inserts, updates and leaves
alone, checked in full before anything is written, and on a database with one writer at a
time (``Dialect.chunks_imports``) written in short transactions with pauses between them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

from sqlalchemy.orm import Session

from contextstore.backends.sql.lessons.queries import fetch
from contextstore.core.lessons import LessonRecord, check_transition
from contextstore.errors import ValidationError

__all__ = [
    "IMPORT_CHUNK",
    "IMPORT_CHUNK_LIMITS",
    "IMPORT_PAUSE_S",
    "IMPORT_TARGET_S",
    "ImportSummary",
    "check_unique",
    "paced",
    "plan_import",
    "referents_first",
    "stamped",
]

Records = list[LessonRecord]

# A large SQLite import writes in transactions sized to hold the write lock about
# IMPORT_TARGET_S each (starting at IMPORT_CHUNK records, then resized from the time the last
# one took), pausing in between for longer than SQLite's busy handler sleeps (100 ms at
# most), so a waiting writer always gets the lock within about one chunk's time. A chunk
# shrinks at once when the last one was slow but grows at most twofold, and never past the
# upper limit: on a loaded machine the next chunk can run far slower than the last did.
IMPORT_CHUNK: Final = 200
IMPORT_CHUNK_LIMITS: Final = (20, 500)
IMPORT_TARGET_S: Final = 0.03
IMPORT_PAUSE_S: Final = 0.12


@dataclass(frozen=True)
class ImportSummary:
    """What an import did: lessons ``added``, ``updated``, and left ``unchanged``."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0

    @property
    def total(self) -> int:
        """Records in the import."""
        return self.added + self.updated + self.unchanged

    @property
    def written(self) -> int:
        """Records that changed the database (added or updated)."""
        return self.added + self.updated


def check_unique(batch: Records) -> set[str]:
    """The entity ids of ``batch``; the same one twice is refused (``entity_id``)."""
    seen: set[str] = set()
    for record in batch:
        if record.entity_id in seen:
            raise ValidationError(
                "entity_id", f"{record.entity_id!r} appears more than once in the import"
            )
        seen.add(record.entity_id)
    return seen


def paced(
    ordered: Records,
    write: Callable[[Records], ImportSummary],
    sleep: Callable[[float], None],
    checkpoint: Callable[[], None],
) -> ImportSummary:
    """``ordered`` written chunk by chunk with ``write`` (each chunk its own transaction),
    pausing with ``sleep`` between chunks and checkpointing after each (see above)."""
    added = updated = unchanged = 0
    start, size = 0, IMPORT_CHUNK
    while start < len(ordered):
        if start:
            sleep(IMPORT_PAUSE_S)
        chunk = ordered[start : start + size]
        began = time.monotonic()
        done = write(chunk)
        elapsed = max(time.monotonic() - began, 0.001)
        checkpoint()
        start += len(chunk)
        low, high = IMPORT_CHUNK_LIMITS
        wanted = int(len(chunk) * IMPORT_TARGET_S / elapsed)
        size = max(low, min(high, 2 * len(chunk), wanted))
        added, updated, unchanged = (
            added + done.added,
            updated + done.updated,
            unchanged + done.unchanged,
        )
    return ImportSummary(added=added, updated=updated, unchanged=unchanged)


def stamped(record: LessonRecord, now: datetime) -> LessonRecord:
    created = record.created_at or now
    return replace(record, created_at=created, updated_at=record.updated_at or created)


def _merged(current: LessonRecord, record: LessonRecord, now: datetime) -> LessonRecord:
    """What ``record`` asks the stored ``current`` to become (missing timestamps kept)."""
    if record.created_at is not None and record.created_at != current.created_at:
        raise ValidationError(
            "created_at",
            f"lesson {record.entity_id!r} was created at {current.created_at}; "
            "created_at is immutable",
        )
    wanted = replace(record, created_at=current.created_at, updated_at=current.updated_at)
    if wanted == current:
        return current
    return replace(wanted, updated_at=record.updated_at or now)


def plan_import(
    session: Session, batch: Records, now: datetime, known: set[str] | None = None
) -> tuple[Records, list[tuple[LessonRecord, LessonRecord]], int]:
    """What importing ``batch`` (referents first) writes: inserts, updates, unchanged count.

    Raises ``ValidationError`` for anything the import must refuse: a changed ``created_at``,
    a lifecycle violation, a ``superseded_by`` naming a lesson that is neither stored nor in
    ``known`` (ids arriving in the same import; ``None``: only earlier records of ``batch``).
    """
    stored = {r.entity_id: r for r in fetch(session, [r.entity_id for r in batch])}
    referents = {r.superseded_by for r in batch if r.superseded_by is not None}
    present = {r.entity_id for r in fetch(session, sorted(referents - set(stored)))}
    present |= set(stored) | (known or set())
    inserts: Records = []
    updates: list[tuple[LessonRecord, LessonRecord]] = []
    unchanged = 0
    for record in batch:
        if record.superseded_by is not None and record.superseded_by not in present:
            raise ValidationError("superseded_by", f"no lesson {record.superseded_by!r}")
        present.add(record.entity_id)
        current = stored.get(record.entity_id)
        if current is None:
            inserts.append(stamped(record, now))
            continue
        wanted = _merged(current, record, now)
        check_transition(record.entity_id, current.status, wanted.status)
        if wanted == current:
            unchanged += 1
        else:
            updates.append((current, wanted))
    return inserts, updates, unchanged


def referents_first(records: Records) -> Records:
    """Order inserts so a lesson comes after the lesson it is superseded by."""
    pending = {r.entity_id: r for r in records}
    ordered: Records = []
    placing: set[str] = set()

    def place(record: LessonRecord) -> None:
        if record.entity_id not in pending:
            return
        if record.entity_id in placing:
            raise ValidationError(
                "superseded_by", f"lesson {record.entity_id!r} is in a supersede cycle"
            )
        placing.add(record.entity_id)
        target = pending.get(record.superseded_by or "")
        if target is not None:
            place(target)
        placing.discard(record.entity_id)
        ordered.append(pending.pop(record.entity_id))

    for record in records:
        place(record)
    return ordered
