"""``contextstore lessons`` and proposals: ``list --status proposed`` says who proposed what,
``reject`` keeps the reason, ``proposal-limit`` shows and sets a namespace's cap.

Runs on SQLite and PostgreSQL through the SQL test fixtures.
"""

from __future__ import annotations

import json

from contextstore import LessonRecord, connect
from tests.backends.sql.conftest import database_url, empty_database_url
from tests.interfaces.cli.test_cli_lessons import Invoke, cli, ok, refused

__all__ = ["cli", "database_url", "empty_database_url"]  # fixtures, re-used


def propose(url: str, namespace: str, actor: str, entity_id: str) -> None:
    with connect(database_url=url, redis_url="", namespace=namespace) as store:
        store.lessons.as_actor(actor).propose(
            LessonRecord(
                entity_id,
                f"Form of {entity_id}.",
                applies_to=("tag:ops",),
                evidence={"query": f"what taught {entity_id}?"},
            )
        )


def test_list_proposed_shows_who_proposed_what(cli: Invoke, database_url: str) -> None:
    propose(database_url, "ops", "api:0123456789ab", "ops.a")
    propose(database_url, "billing", "mcp:alice", "ops.b")
    ok(cli("add", "ops.c", "--form", "Active.", "--key", "tag:ops", "--status", "active"))
    listed = json.loads(ok(cli("list", "--status", "proposed", "--json")).stdout)
    assert [
        (row["entity_id"], row["proposed_by"], row["proposed_from"], row["evidence"])
        for row in listed
    ] == [
        ("ops.a", "api:0123456789ab", "ops", {"query": "what taught ops.a?"}),
        ("ops.b", "mcp:alice", "billing", {"query": "what taught ops.b?"}),
    ]
    assert all(row["proposed_at"].endswith("Z") for row in listed)
    table = ok(cli("list", "--status", "proposed")).stdout
    assert "proposed_by" in table and "mcp:alice" in table and "billing" in table
    # Other listings keep their columns.
    assert "proposed_by" not in ok(cli("list", "--json")).stdout


def test_reject_keeps_the_reason_and_refuses_what_is_not_proposed(
    cli: Invoke, database_url: str
) -> None:
    propose(database_url, "ops", "api:0123456789ab", "ops.a")
    shown = json.loads(
        ok(cli("reject", "ops.a", "--reason", "Duplicates a runbook.", "--json")).stdout
    )
    assert shown["status"] == "retired"
    with connect(database_url=database_url, redis_url="") as store:
        review = store.lessons.proposals(["ops.a"])["ops.a"]
    assert review.reason == "Duplicates a runbook."
    refused(cli("reject", "ops.a", "--reason", "again"), "status", "retired, not proposed")
    refused(cli("reject", "ops.missing", "--reason", "x"), "no lesson", code=1)


def test_proposal_limit_shows_sets_and_lifts_the_cap(cli: Invoke) -> None:
    assert ok(cli("proposal-limit", "--namespace", "ops")).stdout == (
        "namespace 'ops': lesson proposals no cap\n"
    )
    assert ok(cli("proposal-limit", "5", "--namespace", "ops")).stdout == (
        "namespace 'ops': lesson proposals at most 5 an hour\n"
    )
    assert "no cap" in ok(cli("proposal-limit", "--namespace", "billing")).stdout
    refused(cli("proposal-limit", "five", "--namespace", "ops"), "per_hour")
    refused(cli("proposal-limit", "1.5", "--namespace", "ops"), "per_hour")
    refused(cli("proposal-limit", "2000000", "--namespace", "ops"), "per_hour")
    assert "at most 5" in ok(cli("proposal-limit", "--namespace", "ops")).stdout
    assert "no cap" in ok(cli("proposal-limit", "none", "--namespace", "ops")).stdout
