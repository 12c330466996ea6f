"""The stores behind the service and the console: one ``AsyncStore`` per namespace, and
nothing else; administration runs on the event loop's thread, never in a worker thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from contextstore.config import ContextEngineConfig
from contextstore.core.lessons import LessonRecord
from contextstore.core.matching import Scope
from contextstore.interfaces.web.backends import Backends
from contextstore.interfaces.web.settings import ServiceSettings
from contextstore.interfaces.web.telemetry import Telemetry
from contextstore.store.aio import AsyncStore
from contextstore.store.sync import Store


def test_each_namespace_has_one_async_store_and_there_is_no_other_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[tuple[str, bool]] = []  # (namespace, whether it owns its connections)
    open_async = AsyncStore.__init__

    def counted(
        self: AsyncStore, config: ContextEngineConfig, *, lender: AsyncStore | None = None
    ) -> None:
        opened.append((config.namespace, lender is None))
        open_async(self, config, lender=lender)

    def refused(self: Store, config: ContextEngineConfig) -> None:
        raise AssertionError("a blocking store was opened")

    monkeypatch.setattr(AsyncStore, "__init__", counted)
    monkeypatch.setattr(Store, "__init__", refused)
    settings = ServiceSettings(
        keys_file=tmp_path / "keys.json",
        store=ContextEngineConfig(database_url=f"sqlite:///{tmp_path / 'store.db'}"),
    )
    lesson = LessonRecord(
        entity_id="web.lessons.one",
        status="active",
        severity="info",
        injection_form="Check the runbook first.",
        applies_to=("tag:ops",),
    )

    async def scenario() -> list[str]:
        backends = Backends(settings, Telemetry())
        threads: list[bool] = []

        def add() -> LessonRecord:
            threads.append(threading.current_thread() is threading.main_thread())
            return backends.lessons.as_actor("test").add(lesson)

        try:
            await backends.call(add)
            for namespace in ("a", "b", "a"):
                result = await backends.run(
                    namespace,
                    "runbook?",
                    scope=Scope(tags=("ops",)),
                    filters=None,
                    override_budget=None,
                )
                assert [item.entity_id for item in result.lessons.included] == [lesson.entity_id]
            await backends.call(lambda: backends.documents("b").add("A runbook.", "r.md"))
            found = await backends.search("b", "runbook", 3, None)
            assert [chunk.source for chunk in found] == ["r.md"]
            assert await backends.call(lambda: backends.metrics("a").count()) == 2
            assert await backends.call(lambda: backends.metrics("b").count()) == 1
            assert (await backends.readiness()).status == "ok"
            assert threads == [True]
            return sorted(backends._namespaces)
        finally:
            await backends.aclose()

    assert asyncio.run(scenario()) == ["a", "b", "default"]
    # Only the configured namespace's store opens connections; the others borrow them.
    assert sorted(opened) == [("a", False), ("b", False), ("default", True)]
