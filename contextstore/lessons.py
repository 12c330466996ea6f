"""Lesson records: the full durable form, its validation, JSON Lines, and lesson sources.

A ``LessonRecord`` is what storage keeps; ``Lesson`` (in ``matching``) is the projection the
pure matcher reads. Validation lives here once, so the in-memory source, the SQL repository
and the CLI refuse the same inputs with the same messages. The database enforces the same
rules again (check constraints, triggers) for people writing plain SQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, Protocol, runtime_checkable

from contextstore.errors import ValidationError
from contextstore.matching import Lesson, Scope, lookup_keys

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


# Bounds on an agent's scope, so no input makes the candidate lookup grow faster than
# linearly: every entity id yields one key per segment, every tag one key.
MAX_SCOPE_ENTITY_IDS = 64
MAX_SCOPE_TAGS = 64
MAX_SCOPE_VALUE_LENGTH = 255


def validate_scope(scope: Scope) -> Scope:
    """Refuse a scope beyond the documented bounds (``ValidationError("scope.entity_ids")``
    / ``("scope.tags")``): at most 64 entity ids and 64 tags, each a string of at most 255
    characters without NUL or lone surrogates. An empty scope is valid (it matches nothing).
    """
    for name, values, limit in (
        ("scope.entity_ids", scope.entity_ids, MAX_SCOPE_ENTITY_IDS),
        ("scope.tags", scope.tags, MAX_SCOPE_TAGS),
    ):
        if isinstance(values, str) or not isinstance(values, tuple | list):
            raise ValidationError(name, "must be a tuple of strings")
        if len(values) > limit:
            raise ValidationError(name, f"holds {len(values)} values; the limit is {limit}")
        for value in values:
            if not isinstance(value, str):
                raise ValidationError(name, f"must hold strings, got {type(value).__name__}")
            if len(value) > MAX_SCOPE_VALUE_LENGTH:
                raise ValidationError(
                    name,
                    f"a value is {len(value)} characters; the limit is {MAX_SCOPE_VALUE_LENGTH}",
                )
            validate_text(value, name)
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
    """Refuse text no database stores faithfully: a NUL (PostgreSQL cannot hold one) or a
    lone surrogate (not valid Unicode, so not UTF-8: e.g. invalid bytes in a command-line
    argument)."""
    if "\x00" in value:
        raise ValidationError(field_name, "contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValidationError(
            field_name, f"is not valid Unicode text (lone surrogate at position {error.start})"
        ) from error
    return value


def validate_record(record: LessonRecord) -> LessonRecord:
    """Return ``record`` if every field is acceptable, else raise ``ValidationError(field)``."""
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
    try:
        encoded = json.dumps(record.evidence, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError("evidence", f"must be JSON-serialisable ({exc})") from exc
    validate_text(encoded, "evidence")
    if _holds_nul(record.evidence):  # PostgreSQL's jsonb cannot hold one
        raise ValidationError("evidence", "contains a NUL character")
    return record


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


def read_jsonl(lines: Iterable[str]) -> Iterator[LessonRecord]:
    """Parse JSON Lines; blank lines are skipped; errors name the line: ``line 3: severity: …``."""
    for number, line in enumerate(lines, start=1):
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


# Characters Python's str.splitlines (and some editors) break lines at, which JSON leaves raw
# with ensure_ascii=False; escaped, a line holds exactly one record whoever splits it.
_LINE_BREAKS: Final = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_LINE_BREAK_TABLE: Final = str.maketrans(_LINE_BREAKS)


def write_jsonl(records: Iterable[LessonRecord]) -> Iterator[str]:
    """One line per record (sorted keys, UTF-8 kept readable), each ending in ``\\n``.

    U+0085, U+2028 and U+2029 are written as JSON escapes, so splitting the file at any line
    break still yields whole records (``read_jsonl`` itself expects lines split at ``\\n``).
    """
    for record in records:
        line = json.dumps(record.to_json(), ensure_ascii=False, sort_keys=True)
        yield line.translate(_LINE_BREAK_TABLE) + "\n"


def split_jsonl(text: str) -> list[str]:
    """``text`` split into JSON Lines at ``\\n`` only (``\\r\\n`` too), never at U+2028 and
    the other characters ``str.splitlines`` also breaks at."""
    return [line.removesuffix("\r") for line in text.split("\n")]


class LessonSource(Protocol):
    """Where the engine gets lesson candidates. The SQL ``LessonRepository`` implements it."""

    def candidates(self, scope: Scope) -> list[Lesson]:
        """Active lessons having at least one key the matcher could accept for ``scope``."""
        ...


@runtime_checkable
class LessonsWithGeneration(Protocol):
    """A lesson source that also reads the knowledge generation of ``knowledge`` (a
    ``VersionedRetriever``) in the same round trip as the candidates.

    An engine whose retriever *is* ``knowledge`` reads both through
    ``candidates_with_generation`` and never calls ``knowledge.generation()``: one read
    instead of two. ``connect()`` wires one for the SQL lessons and knowledge base.
    """

    @property
    def knowledge(self) -> object: ...

    def candidates_with_generation(self, scope: Scope) -> Any:
        """(``candidates(scope)``, the generation), or an awaitable of it (async sources)."""
        ...


def joint_reads(lessons: object, retriever: object) -> Any:
    """``lessons`` when it reads ``retriever``'s generation with its candidates, else ``None``."""
    if isinstance(lessons, LessonsWithGeneration) and lessons.knowledge is retriever:
        return lessons
    return None


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
        keys = lookup_keys(scope)
        return [
            record.to_lesson()
            for record in self._records.values()
            if (include_inactive or record.status == "active")
            and not keys.isdisjoint(record.applies_to)
        ]
