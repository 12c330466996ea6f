"""Deletes that may be repeated: ``missing_ok=True`` in Python (sync and async),
``--missing-ok`` on the command line; without it a missing document or lesson is still an
error. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import re

import pytest
from typer.testing import CliRunner

from contextstore import LessonRecord, connect, connect_async
from contextstore.errors import NotFoundError
from contextstore.interfaces.cli import app
from tests.leftovers import unique_name

pytestmark = pytest.mark.usefixtures("clean_environment")


def test_knowledge_and_lessons_deletes_with_and_without_missing_ok(database_url: str) -> None:
    with connect(database_url, "", unique_name("del")) as store:
        store.knowledge.add("Rotate the keys.", "ops/keys.md")
        store.lessons.add(LessonRecord("ops.keys.0001", "Rotate the keys."))
        assert store.knowledge.delete("ops/keys.md", missing_ok=True) is True
        assert store.knowledge.delete("ops/keys.md", missing_ok=True) is False
        with pytest.raises(NotFoundError, match=re.escape("no document 'ops/keys.md'")):
            store.knowledge.delete("ops/keys.md")
        assert store.lessons.delete("ops.keys.0001", missing_ok=True) is True
        assert store.lessons.delete("ops.keys.0001", missing_ok=True) is False
        with pytest.raises(NotFoundError, match=re.escape("no lesson 'ops.keys.0001'")):
            store.lessons.delete("ops.keys.0001")
        # One delete in the audit: the repeated ones wrote nothing.
        assert [event.event for event in store.lessons.history("ops.keys.0001")] == [
            "insert",
            "delete",
        ]


def test_the_async_side_takes_missing_ok_too(database_url: str) -> None:
    async def scenario() -> list[bool]:
        store = connect_async(database_url, "", unique_name("del"))
        try:
            await store.knowledge.add("Rotate the keys.", "ops/keys.md")
            await store.lessons.add(LessonRecord("ops.keys.0002", "Rotate the keys."))
            found = [
                await store.knowledge.delete("ops/keys.md", missing_ok=True),
                await store.knowledge.delete("ops/keys.md", missing_ok=True),
                await store.lessons.delete("ops.keys.0002", missing_ok=True),
                await store.lessons.delete("ops.keys.0002", missing_ok=True),
            ]
            with pytest.raises(NotFoundError):
                await store.lessons.delete("ops.keys.0002")
            with pytest.raises(NotFoundError):
                await store.knowledge.delete("ops/keys.md")
            return found
        finally:
            await store.aclose()

    assert asyncio.run(scenario()) == [True, False, True, False]


def test_the_command_line_says_what_it_did(database_url: str) -> None:
    namespace = unique_name("del")
    with connect(database_url, "", namespace) as store:
        store.knowledge.add("Rotate the keys.", "ops/keys.md")
        store.lessons.add(LessonRecord("ops.keys.0003", "Rotate the keys."))
    common = ["--database-url", database_url]
    docs = ["docs", "delete", "ops/keys.md", "--namespace", namespace, *common]
    lessons = ["lessons", "delete", "ops.keys.0003", "--yes", *common]
    runner = CliRunner()
    outputs = []
    for args in (docs, docs, lessons, lessons):
        result = runner.invoke(app, [*args, "--missing-ok"])
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout)
    assert outputs == [
        "deleted ops/keys.md\n",
        "no document ops/keys.md: nothing to delete\n",
        "deleted ops.keys.0003\n",
        "no lesson ops.keys.0003: nothing to delete\n",
    ]
    for args, message in (
        (docs, f"error: no document 'ops/keys.md' in namespace '{namespace}'\n"),
        (lessons, "error: entity_id: no lesson 'ops.keys.0003'\n"),
    ):
        result = runner.invoke(app, args)
        assert (result.exit_code, result.stderr) == (1, message)
