"""``contextstore lessons``: administer lessons (add, list, show, edit, status changes, JSON
Lines) and see how runs use them (``stats``).

Every command opens the store from ``--database-url`` (else ``CONTEXTSTORE_DATABASE_URL``,
else ``sqlite:///contextstore.db``), migrating it on first use. A refused input prints one
``error:`` line on stderr and exits with status 2; nothing is written in that case.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from contextstore.backends.sql.metrics.report import LessonStats
from contextstore.backends.sql.repository import UNSET, LessonEvent, LessonRepository
from contextstore.core.lesson_changes import describe_changes
from contextstore.core.lessons import (
    LessonRecord,
    parse_timestamp,
)
from contextstore.errors import NotFoundError, ValidationError
from contextstore.interfaces.cli.common import (
    EXIT_USAGE,
    cli_errors,
    console,
    console_err,
    fail,
    plural,
    print_import_summary,
    print_json,
    table,
)
from contextstore.interfaces.cli.options import (
    AllNamespaces,
    DatabaseUrl,
    Json,
    MissingOk,
    Namespace,
    describe_namespace,
    jsonl_file,
    open_store,
    tenant_store,
)
from contextstore.interfaces.cli.output import Format, OutputFormat, chosen_format, emit_rows
from contextstore.interfaces.cli.times import Since, Until, parse_range
from contextstore.interfaces.results import lesson_json, rfc3339

app = typer.Typer(
    help="Administer lessons: their content, status and history, JSON Lines in and out, "
    "and which lessons runs use (stats).",
    no_args_is_help=True,
)

Keys = Annotated[
    list[str] | None,
    typer.Option("--key", "-k", help="Applies-to key, 'tag:<name>' or 'id:<prefix>' (repeatable)"),
]


Actor = Annotated[
    str | None,
    typer.Option(
        "--actor",
        help="Who makes this change, as the audit records it \\[default: the OS user]",
        show_default=False,
    ),
]


@contextmanager
def repository(database_url: str | None, actor: str | None = None) -> Iterator[LessonRepository]:
    with cli_errors(), open_store(database_url, None, None) as store:
        yield store.lessons if actor is None else store.lessons.as_actor(actor)


# What a lessons table shows: the whole record (created_at, detail, evidence…) goes to plain,
# CSV and JSON, and ``show`` has every field of one lesson.
_LIST_COLUMNS = ["entity_id", "status", "severity", "applies_to", "injection_form"]
_RECORD_FIELDS = list(LessonRecord("a", "").to_json())
_USAGE_FIELDS = ["entity_id", "status", "runs_matched", "runs_included", "last_included_at"]


def _show(record: LessonRecord, as_json: bool, events: list[LessonEvent] | None = None) -> None:
    if as_json:
        data = lesson_json(record)
        if events is not None:
            data["history"] = [_event_json(event) for event in events]
        print_json(data)
        return
    fields = lesson_json(record)
    fields["applies_to"] = ", ".join(record.applies_to)
    fields["evidence"] = json.dumps(record.evidence, ensure_ascii=False)
    details = [[name, value] for name, value in fields.items()]
    console.print(table(record.entity_id, ["field", "value"], details, flexible="value", wrap=True))
    if events:
        # A status change is one of the columns changed: "status: proposed → active".
        history: list[list[Any]] = [
            [_second(e.occurred_at), e.event, e.actor, _changed(e)] for e in events
        ]
        columns = ["occurred (UTC)", "event", "actor", "changed"]
        shown = table("history", columns, history, flexible=("actor", "changed"), wrap=True)
        console.print(shown)


def _second(moment: datetime) -> str:
    """To the second, in UTC: a history table's time (``--json`` has it whole)."""
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S}"


def _changed(event: LessonEvent) -> str:
    """What an event changed: ``column: old → new`` for each column, one per line."""
    return "\n".join(describe_changes(event.event, event.changes))


def _event_json(event: LessonEvent) -> dict[str, Any]:
    return {
        "event": event.event,
        "old_status": event.old_status,
        "new_status": event.new_status,
        "occurred_at": rfc3339(event.occurred_at),
        "actor": event.actor,
        "changes": event.changes,
    }


@app.command("add")
def add(
    entity_id: Annotated[str, typer.Argument(help="Dot-separated id, e.g. fleet.ops.db.0001")],
    form: Annotated[str, typer.Option("--form", "-f", help="Injection form (≤ 320 bytes)")],
    keys: Keys = None,
    severity: Annotated[str, typer.Option(help="critical, warning or info")] = "info",
    status: Annotated[str, typer.Option(help="proposed or active")] = "proposed",
    summary: Annotated[str, typer.Option(help="One-line summary")] = "",
    detail: Annotated[str, typer.Option(help="Longer explanation")] = "",
    created_at: Annotated[
        str | None,
        typer.Option(
            help="RFC 3339 creation time with an offset, e.g. 2026-05-01T12:00:00Z (default: now)"
        ),
    ] = None,
    actor: Actor = None,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """Add a new lesson (proposed unless --status active)."""
    with repository(database_url, actor) as lessons:
        record = LessonRecord(
            entity_id=entity_id,
            injection_form=form,
            severity=severity,
            status=status,
            applies_to=tuple(keys or ()),
            summary=summary,
            detail=detail,
            created_at=parse_timestamp(created_at, "created_at"),
        )
        _show(lessons.add(record), as_json)


@app.command("list")
def list_lessons(
    status: Annotated[str | None, typer.Option(help="Only this status")] = None,
    severity: Annotated[str | None, typer.Option(help="Only this severity")] = None,
    key: Annotated[
        str | None, typer.Option("--key", "-k", help="Only lessons with this key")
    ] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", "-t", help="Shorthand for --key tag:X")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many", min=0)] = None,
    offset: Annotated[
        int, typer.Option(help="Skip this many first (with --limit: one page)", min=0)
    ] = 0,
    output: Format = None,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """List lessons by entity id (a table cuts long text; other formats keep it whole)."""
    fmt = chosen_format(output, as_json)
    with repository(database_url) as lessons:
        found = lessons.list(
            status=status, severity=severity, key=key, tag=tag, limit=limit, offset=offset
        )
        # Who proposed each one, from which namespace and when (lesson_proposals).
        made = lessons.proposals([r.entity_id for r in found]) if status == "proposed" else {}
    records = [lesson_json(record) for record in found]
    columns, fields = _LIST_COLUMNS, _RECORD_FIELDS
    if status == "proposed":
        for record in records:
            proposal = made.get(record["entity_id"])
            record["proposed_by"] = proposal.proposer if proposal else None
            record["proposed_from"] = proposal.namespace if proposal else None
            record["proposed_at"] = rfc3339(proposal.proposed_at) if proposal else None
        columns = [*_LIST_COLUMNS[:1], "proposed_by", "proposed_from", *_LIST_COLUMNS[2:]]
        fields = [*_RECORD_FIELDS, "proposed_by", "proposed_from", "proposed_at"]
    shown = plural(len(found), "lesson") + (f" from #{offset + 1}" if offset and found else "")
    emit_rows(
        fmt,
        shown,
        records,
        columns=columns,
        fields=fields,
        flexible=("injection_form", "applies_to"),
        identifiers="entity_id",
        empty="no lessons"
        + (" match these filters" if status or severity or key or tag else "")
        + (f" after the first {offset}" if offset else ""),
    )


@app.command("show")
def show(entity_id: str, database_url: DatabaseUrl = None, as_json: Json = False) -> None:
    """Show one lesson with every field and its audit history."""
    with repository(database_url) as lessons:
        _show(lessons.get(entity_id), as_json, lessons.history(entity_id))


@app.command("edit")
def edit(
    entity_id: str,
    form: Annotated[
        str | None, typer.Option("--form", "-f", help="New injection form (≤ 320 bytes)")
    ] = None,
    summary: Annotated[str | None, typer.Option(help="New one-line summary")] = None,
    detail: Annotated[str | None, typer.Option(help="New longer explanation")] = None,
    severity: Annotated[str | None, typer.Option(help="critical, warning or info")] = None,
    keys: Annotated[
        list[str] | None,
        typer.Option("--key", "-k", help="Replace every applies-to key with these (repeatable)"),
    ] = None,
    no_keys: Annotated[
        bool, typer.Option("--no-keys", help="Remove every applies-to key (never matched)")
    ] = False,
    actor: Actor = None,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """Change a lesson's form, summary, detail, severity or applies-to keys (audited)."""
    if keys and no_keys:
        fail("--key and --no-keys contradict each other", code=EXIT_USAGE)
    changes: dict[str, Any] = {
        "injection_form": UNSET if form is None else form,
        "summary": UNSET if summary is None else summary,
        "detail": UNSET if detail is None else detail,
        "severity": UNSET if severity is None else severity,
        "applies_to": () if no_keys else (tuple(keys) if keys else UNSET),
    }
    if all(value is UNSET for value in changes.values()):
        fail(
            "nothing to change: give --form, --summary, --detail, --severity, --key or --no-keys",
            code=EXIT_USAGE,
        )
    with repository(database_url, actor) as lessons:
        _show(lessons.update(entity_id, **changes), as_json)


@app.command("stats")
def stats(
    since: Since = None,
    until: Until = None,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    output: Format = None,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """Per lesson, the runs that matched and included it; and the active lessons none used.

    Counted from the runs' traces in SQL. The runs are the namespace's (--namespace, else
    CONTEXTSTORE_NAMESPACE, else default), every namespace's with --all-namespaces; the
    lessons are shared by all of them.
    """
    fmt = chosen_format(output, as_json)
    start, end = parse_range(since, until)
    with cli_errors(), tenant_store(database_url, namespace, all_namespaces) as store:
        result = store.metrics.lesson_stats(since=start, until=end, all_namespaces=all_namespaces)
    chosen = result.namespace
    if fmt is OutputFormat.JSON:
        print_json(result.as_dict())
        return
    records = _usage_records(result)
    if fmt is not OutputFormat.TABLE:
        for record in records:
            moment = record["last_included_at"]
            record["last_included_at"] = None if moment is None else rfc3339(moment)
        emit_rows(fmt, "", records, fields=_USAGE_FIELDS, empty="")
        return
    where = describe_namespace(chosen)
    if result.runs == 0:
        active = len(result.unused)
        console.print(
            f"no runs recorded in {where}{_since_text(start, end)}; "
            f"{plural(active, 'active lesson')}, none included",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return
    title = f"lesson use over {plural(result.runs, 'run')} in {where}"
    rows = [
        {
            "lesson": record["entity_id"],
            "status": record["status"],
            "matched": record["runs_matched"],
            "included": record["runs_included"],
            "last included (UTC)": _minute(record["last_included_at"]),
        }
        for record in records
    ]
    emit_rows(fmt, title, rows, identifiers="lesson", empty="")


def _since_text(start: datetime | None, end: datetime | None) -> str:
    parts = [f"since {_minute(start)}" if start else "", f"until {_minute(end)}" if end else ""]
    text = " ".join(part for part in parts if part)
    return f" {text} UTC" if text else ""


def _minute(moment: datetime | None) -> str | None:
    return None if moment is None else f"{moment.astimezone(UTC):%Y-%m-%d %H:%M}"


def _usage_records(result: LessonStats) -> list[dict[str, Any]]:
    """One row per lesson used, then one per unused active lesson (both with the same keys)."""
    records: list[dict[str, Any]] = [
        {
            "entity_id": usage.entity_id,
            "status": usage.status or "deleted",
            "runs_matched": usage.runs_matched,
            "runs_included": usage.runs_included,
            "last_included_at": usage.last_included_at,
        }
        for usage in result.lessons
    ]
    used = {usage.entity_id for usage in result.lessons}
    records.extend(
        {
            "entity_id": entity_id,
            "status": "active",
            "runs_matched": 0,
            "runs_included": 0,
            "last_included_at": None,
        }
        for entity_id in result.unused
        if entity_id not in used
    )
    return records


@app.command("activate")
def activate(
    entity_id: str, actor: Actor = None, database_url: DatabaseUrl = None, as_json: Json = False
) -> None:
    """Make a lesson active (matched from now on)."""
    with repository(database_url, actor) as lessons:
        _show(lessons.activate(entity_id), as_json)


@app.command("retire")
def retire(
    entity_id: str, actor: Actor = None, database_url: DatabaseUrl = None, as_json: Json = False
) -> None:
    """Retire a lesson (kept, never matched)."""
    with repository(database_url, actor) as lessons:
        _show(lessons.retire(entity_id), as_json)


@app.command("reject")
def reject(
    entity_id: str,
    reason: Annotated[str, typer.Option("--reason", "-r", help="Why (kept in its review)")],
    actor: Actor = None,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """Reject a proposed lesson: retired, with the reason and the reviewer recorded."""
    with repository(database_url, actor) as lessons:
        _show(lessons.reject(entity_id, reason), as_json)


@app.command("proposal-limit")
def proposal_limit(
    per_hour: Annotated[
        str | None,
        typer.Argument(help="Most proposals an hour; 'none' lifts the cap (omitted: show it)"),
    ] = None,
    namespace: Namespace = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Show or set the namespace's cap on lessons proposed per hour."""
    with cli_errors(), open_store(database_url, None, namespace) as store:
        if per_hour is not None:
            cap = None if per_hour.strip().lower() == "none" else _whole(per_hour, "per_hour")
            store.lessons.set_proposal_limit(cap)
        current = store.lessons.proposal_limit()
    shown = "no cap" if current is None else f"at most {current} an hour"
    console.print(f"namespace {store.namespace!r}: lesson proposals {shown}")


def _whole(text: str, field: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise ValidationError(field, f"{text!r} is not a whole number or 'none'") from exc


@app.command("supersede")
def supersede(
    old: Annotated[str, typer.Argument(help="The lesson being replaced")],
    new: Annotated[str, typer.Argument(help="Its replacement (activated if proposed)")],
    actor: Actor = None,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """Mark OLD superseded by NEW; a proposed NEW is activated at the same time."""
    with repository(database_url, actor) as lessons:
        _show(lessons.supersede(old, new), as_json)


@app.command("delete")
def delete(
    entity_id: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")] = False,
    missing_ok: MissingOk = False,
    actor: Actor = None,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """Delete a lesson (its audit history stays in lesson_events)."""
    with repository(database_url, actor) as lessons:
        try:
            lessons.get(entity_id)
        except NotFoundError:
            if not missing_ok:
                raise
        else:
            if not yes and not typer.confirm(f"Delete lesson {entity_id}?"):
                raise typer.Exit(1)
        deleted = lessons.delete(entity_id, missing_ok=missing_ok)
        if as_json:
            print_json({"deleted": entity_id if deleted else None})
        elif deleted:
            console.print(f"deleted {entity_id}")
        else:
            console.print(f"no lesson {entity_id}: nothing to delete")


@app.command("import")
def import_lessons(
    path: Annotated[Path, typer.Argument(help="JSON Lines file, '-' for stdin")],
    actor: Actor = None,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """Import lessons from JSON Lines; all or nothing, identical records are left alone."""
    with cli_errors(), jsonl_file(path) as lines, repository(database_url, actor) as lessons:
        summary = lessons.import_jsonl(lines)
    print_import_summary(summary, f"imported {path}", as_json)


@app.command("export")
def export(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout")
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Export every lesson as JSON Lines (re-importable; created_at included)."""
    with repository(database_url) as lessons:
        lines = list(lessons.export_jsonl())
        if output is None:
            sys.stdout.write("".join(lines))
        else:
            output.write_text("".join(lines), encoding="utf-8")
            console_err.print(f"exported {plural(len(lines), 'lesson')} to {output}")
