"""Lesson records: the full durable form, its validation, JSON Lines, and lesson sources.

A ``LessonRecord`` is what storage keeps; ``Lesson`` (in ``matching``) is the projection the
pure matcher reads. Validation lives here once, so the in-memory source, the SQL repository
and the CLI refuse the same inputs with the same messages. The database enforces the same
rules again (check constraints, triggers) for people writing plain SQL.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from contextstore.core.jsonl import Readable, escape_json_text, jsonl_lines
from contextstore.core.matching import Lesson, Scope, lookup_keys
from contextstore.core.validation import (
    MAX_SCOPE_ENTITY_IDS as MAX_SCOPE_ENTITY_IDS,
)
from contextstore.core.validation import (
    MAX_SCOPE_TAGS as MAX_SCOPE_TAGS,
)
from contextstore.core.validation import (
    MAX_SCOPE_VALUE_LENGTH as MAX_SCOPE_VALUE_LENGTH,
)
from contextstore.core.validation import (
    check_scope_values,
    storable_text,
)
from contextstore.errors import ValidationError

STATUSES = ("proposed", "active", "retired", "superseded")
SEVERITIES = ("critical", "warning", "info")
MAX_INJECTION_FORM_BYTES = 320
MAX_ENTITY_ID_LENGTH = 255
SCOPE_KEY_PREFIXES = ("tag:", "id:")
# The lifecycle (the database enforces it too): where each status may move next.
TRANSITIONS: dict[str, tuple[str, ...]] = {
    "proposed": ("active", "retired"),
    "active": ("retired", "superseded"),
    "retired": ("active",),
    "superseded": (),
}
MAX_ACTOR_LENGTH = 255
MAX_EVIDENCE_DEPTH = 64
"""The deepest nesting of arrays and objects ``evidence`` may have (``{}`` is 1, ``{"a": []}``
2): every reader and writer walks it without running out of stack, and the databases refuse
deeper (revision 0012)."""


@dataclass(frozen=True)
class LessonRecord:
    """One lesson as stored. ``created_at`` is timezone-aware and never changes once written."""

    entity_id: str
    injection_form: str
    severity: str = "info"
    status: str = "proposed"
    applies_to: tuple[str, ...] = ()
    summary: str = ""
    detail: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    superseded_by: str | None = None
    evidence: Any = field(default_factory=dict)

    def to_lesson(self) -> Lesson:
        """The matcher's view; ``created_at`` rendered as RFC 3339 (empty when unknown)."""
        return Lesson(
            entity_id=self.entity_id,
            status=self.status,
            severity=self.severity,
            created_at=format_timestamp(self.created_at) if self.created_at else "",
            applies_to=self.applies_to,
            injection_form=self.injection_form,
            summary=self.summary,
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with every field, timestamps as RFC 3339 strings."""
        return {
            "entity_id": self.entity_id,
            "status": self.status,
            "severity": self.severity,
            "created_at": format_timestamp(self.created_at) if self.created_at else None,
            "updated_at": format_timestamp(self.updated_at) if self.updated_at else None,
            "summary": self.summary,
            "detail": self.detail,
            "injection_form": self.injection_form,
            "applies_to": list(self.applies_to),
            "superseded_by": self.superseded_by,
            "evidence": self.evidence,
        }


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 with microseconds, normalised to UTC (``2026-01-02T03:04:05.000006+00:00``)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def validate_entity_id(value: object, field_name: str = "entity_id") -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError(field_name, "must be a non-empty string")
    if len(value) > MAX_ENTITY_ID_LENGTH:
        raise ValidationError(field_name, f"must be at most {MAX_ENTITY_ID_LENGTH} characters")
    if any(segment == "" for segment in value.split(".")):
        raise ValidationError(field_name, f"{value!r} has an empty dot-separated segment")
    if value != value.strip():
        raise ValidationError(field_name, f"{value!r} has leading or trailing white space")
    return value


def validate_scope(scope: Scope) -> Scope:
    """Refuse a scope beyond the documented bounds (``ValidationError("scope.entity_ids")``
    / ``("scope.tags")``): at most 64 entity ids and 64 tags, each a string of at most 255
    characters without NUL or lone surrogates. An empty scope is valid (it matches nothing).
    """
    check_scope_values(scope.entity_ids, scope.tags)
    return scope


def check_transition(entity_id: str, old: str, new: str) -> None:
    """Refuse (``ValidationError("status")``) a status change the lifecycle does not allow.

    Staying in the same status is not a change and always passes.
    """
    if old == new or new in TRANSITIONS.get(old, ()):
        return
    allowed = " or ".join(TRANSITIONS.get(old, ())) or "nothing (superseded is final)"
    raise ValidationError(
        "status", f"lesson {entity_id!r} is {old} and cannot become {new}; it may become {allowed}"
    )


def validate_actor(value: object) -> str:
    """An audit actor: a non-empty printable string of at most ``MAX_ACTOR_LENGTH`` characters."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("actor", "must be a non-empty string")
    if len(value) > MAX_ACTOR_LENGTH:
        raise ValidationError("actor", f"must be at most {MAX_ACTOR_LENGTH} characters")
    if not value.isprintable():
        raise ValidationError("actor", f"{value!r} holds control characters")
    return value


def default_actor() -> str:
    """The operating-system user running this process (``sql`` when it has none)."""
    import getpass

    try:
        return getpass.getuser() or "sql"
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (some containers)
        return "sql"


def validate_scope_key(value: object) -> str:
    if not isinstance(value, str) or not any(
        value.startswith(prefix) and len(value) > len(prefix) for prefix in SCOPE_KEY_PREFIXES
    ):
        raise ValidationError(
            "applies_to", f"scope key {value!r} must be 'tag:<name>' or 'id:<entity-id prefix>'"
        )
    return value


def validate_text(value: str, field_name: str) -> str:
    """Refuse text no database stores faithfully (``storable_text``)."""
    return storable_text(value, field_name)


def validate_record(record: LessonRecord) -> LessonRecord:
    """Return ``record`` if every field is acceptable, else raise ``ValidationError(field)``."""
    validate_fields(record)
    validate_evidence(record.evidence)
    return record


def validate_fields(record: LessonRecord) -> LessonRecord:
    """``validate_record`` of every field but ``evidence``."""
    validate_entity_id(record.entity_id)
    if record.status not in STATUSES:
        raise ValidationError("status", f"{record.status!r} is not one of {', '.join(STATUSES)}")
    if record.severity not in SEVERITIES:
        raise ValidationError(
            "severity", f"{record.severity!r} is not one of {', '.join(SEVERITIES)}"
        )
    if not isinstance(record.injection_form, str):
        raise ValidationError("injection_form", "must be a string")
    size = len(record.injection_form.encode("utf-8", "surrogatepass"))
    if size > MAX_INJECTION_FORM_BYTES:
        raise ValidationError(
            "injection_form", f"is {size} UTF-8 bytes; the limit is {MAX_INJECTION_FORM_BYTES}"
        )
    for name in ("summary", "detail"):
        if not isinstance(getattr(record, name), str):
            raise ValidationError(name, "must be a string")
    for name in ("entity_id", "injection_form", "summary", "detail"):
        validate_text(getattr(record, name), name)
    if isinstance(record.applies_to, str):
        raise ValidationError("applies_to", "must be a list of scope keys, not one string")
    for key in record.applies_to:
        validate_text(validate_scope_key(key), "applies_to")
    if len(set(record.applies_to)) != len(record.applies_to):
        raise ValidationError("applies_to", "lists the same scope key twice")
    if record.status == "superseded":
        if not record.superseded_by:
            raise ValidationError("superseded_by", "is required when status is 'superseded'")
        validate_entity_id(record.superseded_by, "superseded_by")
        if record.superseded_by == record.entity_id:
            raise ValidationError("superseded_by", "a lesson cannot supersede itself")
    elif record.superseded_by is not None:
        raise ValidationError("superseded_by", "is allowed only when status is 'superseded'")
    if record.superseded_by is not None:
        validate_text(record.superseded_by, "superseded_by")
    for name in ("created_at", "updated_at"):
        moment = getattr(record, name)
        if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
            raise ValidationError(name, "must be a timezone-aware datetime")
        if moment is not None:
            _check_utc_range(moment, name)
    return record


def validate_evidence(evidence: Any) -> Any:
    """``validate_record`` of ``evidence``: JSON every database stores (``check_evidence``,
    serialisable, valid Unicode, no NUL)."""
    check_evidence(evidence)
    try:
        encoded = json.dumps(evidence, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError("evidence", f"must be JSON-serialisable ({exc})") from exc
    validate_text(encoded, "evidence")
    if _holds_nul(evidence):  # PostgreSQL's jsonb cannot hold one
        raise ValidationError("evidence", "contains a NUL character")
    return evidence


def check_evidence(value: Any, limit: int = MAX_EVIDENCE_DEPTH) -> Any:
    """``value`` unchanged if it nests at most ``limit`` deep and holds no number a 64-bit
    float cannot hold (``inf``, ``nan``: JSON has no such value), else
    ``ValidationError("evidence")``. Walked with a stack of its own, never by recursion."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list | tuple):
            depth += 1
            if depth > limit:
                raise ValidationError("evidence", f"nests deeper than {limit} arrays or objects")
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth) for child in children)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValidationError("evidence", f"holds {item}, a number JSON cannot carry")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise OverflowError(text)
    return number


def load_evidence(text: str) -> Any:
    """``evidence`` from its stored JSON text, checked by ``check_evidence``; a number beyond
    a 64-bit float (``1e400``), ``NaN``, nesting too deep to read, or text that is not JSON
    raise ``ValidationError("evidence")``."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except RecursionError:
        raise ValidationError(
            "evidence", f"nests deeper than {MAX_EVIDENCE_DEPTH} arrays or objects"
        ) from None
    except OverflowError as error:
        raise ValidationError("evidence", f"holds {error}, a number JSON cannot carry") from None
    except ValueError as error:  # JSONDecodeError too, and an integer of too many digits
        raise ValidationError("evidence", f"is not JSON ({error})") from error
    # Fewer brackets than the bound cannot nest past it: most evidence needs no walk.
    if text.count("[") + text.count("{") <= MAX_EVIDENCE_DEPTH:
        return value
    return check_evidence(value)


def unrestorable(records: Iterable[LessonRecord]) -> dict[str, str]:
    """``entity_id`` → why a backup of ``records`` must leave that lesson out: its
    ``superseded_by`` names a lesson not among ``records`` (deleted with foreign keys off,
    or itself left out), or runs in a cycle. An import refuses such a line, so an export
    writes none. Empty when every record restores."""
    target = {record.entity_id: record.superseded_by for record in records}
    verdict: dict[str, str | None] = {}  # None: restorable
    for start in target:
        path: list[str] = []
        walked: set[str] = set()
        node: str | None = start
        while node in target and node not in verdict and node not in walked:
            path.append(node)
            walked.add(node)
            node = target[node]
        if node is None or verdict.get(node, "") is None:
            end: str | None = None
        elif node in verdict:
            end = f"is superseded by {node!r}, which a backup leaves out"
        elif node in walked:
            cycle = path[path.index(node) :]
            reason = "is in a supersede cycle: " + " -> ".join([*cycle, node])
            for member in cycle:
                verdict[member] = reason
            path = path[: path.index(node)]
            end = f"is superseded by {node!r}, which a backup leaves out"
        else:
            end = f"is superseded by {node!r}, which is not a lesson"
        for member in reversed(path):
            verdict[member] = end
            end = None if end is None else f"is superseded by {member!r}, which a backup leaves out"
    return {entity_id: reason for entity_id, reason in verdict.items() if reason is not None}


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_nul(item) for item in value)
    return False


def _check_utc_range(moment: datetime, name: str) -> None:
    """The instant must exist in UTC within years 1–9999 (year 1 at +01:00 does not)."""
    try:
        moment.astimezone(UTC)
    except OverflowError as error:
        raise ValidationError(
            name, f"{moment.isoformat()} is outside years 1–9999 in UTC"
        ) from error


def parse_timestamp(value: object, field_name: str) -> datetime | None:
    """Parse an ISO 8601 / RFC 3339 timestamp that carries an offset; ``None`` stays ``None``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(field_name, "must be an RFC 3339 timestamp string")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValidationError(field_name, f"{value!r} is not an RFC 3339 timestamp") from exc
    if moment.tzinfo is None:
        raise ValidationError(field_name, f"{value!r} has no UTC offset")
    _check_utc_range(moment, field_name)
    return moment


_JSON_FIELDS = frozenset(LessonRecord.__dataclass_fields__)


def record_from_json(data: Mapping[str, Any]) -> LessonRecord:
    """Build and validate a record from a dict as written by ``LessonRecord.to_json``."""
    if not isinstance(data, Mapping):
        raise ValidationError("record", "each line must be a JSON object")
    unknown = sorted(set(data) - _JSON_FIELDS)
    if unknown:
        raise ValidationError(unknown[0], "is not a lesson field")
    if "entity_id" not in data:
        raise ValidationError("entity_id", "is required")
    applies_to = data.get("applies_to", [])
    if not isinstance(applies_to, list):
        raise ValidationError("applies_to", "must be a list of scope keys")
    record = LessonRecord(
        entity_id=data["entity_id"],
        status=data.get("status", "proposed"),
        severity=data.get("severity", "info"),
        injection_form=data.get("injection_form", ""),
        applies_to=tuple(applies_to),
        summary=data.get("summary") or "",
        detail=data.get("detail") or "",
        created_at=parse_timestamp(data.get("created_at"), "created_at"),
        updated_at=parse_timestamp(data.get("updated_at"), "updated_at"),
        superseded_by=data.get("superseded_by"),
        evidence=data.get("evidence", {}) if data.get("evidence") is not None else {},
    )
    return validate_record(record)


def read_jsonl(lines: Readable | Iterable[str | bytes]) -> Iterator[LessonRecord]:
    """Parse JSON Lines; blank lines are skipped; errors name the line: ``line 3: severity: …``.

    ``lines`` is a file or an iterable of lines, each at most ``MAX_LINE_BYTES``
    (``contextstore.core.jsonl``; a longer one, or one not UTF-8, is ``line 3``).
    """
    for number, line in jsonl_lines(lines):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            yield record_from_json(data)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"line {number}", f"is not valid JSON ({exc.msg})") from exc
        except RecursionError as exc:  # arrays or objects nested thousands deep
            raise ValidationError(f"line {number}", "is nested too deeply to read") from exc
        except ValidationError as exc:
            raise ValidationError(f"line {number}: {exc.field}", exc.message) from exc
        except ValueError as exc:  # an integer of more digits than Python converts
            raise ValidationError(f"line {number}", f"is not readable JSON ({exc})") from exc


def write_jsonl(records: Iterable[LessonRecord]) -> Iterator[str]:
    """One line per record (sorted keys, UTF-8 kept readable), each ending in ``\\n``.

    U+0085, U+2028 and U+2029 are written as JSON escapes, so splitting the file at any line
    break still yields whole records (``read_jsonl`` itself expects lines split at ``\\n``);
    so are DEL and the other C1 controls, so an export printed to a terminal is only text
    (``escape_json_text``).
    """
    for record in records:
        line = json.dumps(record.to_json(), ensure_ascii=False, sort_keys=True)
        yield escape_json_text(line) + "\n"


def split_jsonl(text: str) -> list[str]:
    """``text`` split into JSON Lines at ``\\n`` only (``\\r\\n`` too), never at U+2028 and
    the other characters ``str.splitlines`` also breaks at."""
    return [line.removesuffix("\r") for line in text.split("\n")]


class LessonSource(Protocol):
    """Where the engine gets lesson candidates. The SQL ``LessonRepository`` implements it."""

    def candidates(self, scope: Scope) -> list[Lesson]:
        """Active lessons having at least one key the matcher could accept for ``scope``."""
        ...


class AsyncLessonSource(Protocol):
    """``LessonSource`` for an event loop (``AsyncLessonRepository`` implements it)."""

    async def candidates(self, scope: Scope) -> list[Lesson]:
        """Active lessons having at least one key the matcher could accept for ``scope``."""
        ...


class InMemoryLessons:
    """A ``LessonSource`` over records held in process memory (tests, files, the CLI)."""

    def __init__(self, records: Iterable[LessonRecord] = ()) -> None:
        self._records: dict[str, LessonRecord] = {}
        for record in records:
            self.add(record)

    def add(self, record: LessonRecord) -> LessonRecord:
        validate_record(record)
        if record.created_at is None:
            record = replace(record, created_at=datetime.now(UTC))
        self._records[record.entity_id] = record
        return record

    def all(self) -> list[LessonRecord]:
        return list(self._records.values())

    def candidates(self, scope: Scope, *, include_inactive: bool = False) -> list[Lesson]:
        """As ``LessonRepository.candidates``: the active lessons sharing a key with
        ``lookup_keys(scope)``, or those of every status with ``include_inactive``."""
        keys = lookup_keys(validate_scope(scope))
        return [
            record.to_lesson()
            for record in self._records.values()
            if (include_inactive or record.status == "active")
            and not keys.isdisjoint(record.applies_to)
        ]
