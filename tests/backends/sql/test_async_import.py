"""An import awaited on an event loop never blocks the loop, pauses between chunks included.

The SQLite import writes in short transactions with a pause between them; awaited through
``AsyncLessonRepository`` the pause is an ``asyncio.sleep``, so other tasks keep running.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import contextstore.backends.sql.lessons.imports as imports
from contextstore.backends.sql.aio import AsyncLessonRepository, create_async_database_engine
from contextstore.core.lessons import LessonRecord
from tests.backends.sql.conftest import SQLITE_ONLY

PAUSE_S = 0.25  # distinguishes the import's pauses from the ticker's own sleeps
CHUNK = 20
RECORDS = 3 * CHUNK  # three transactions, two pauses


@SQLITE_ONLY
def test_the_loop_keeps_ticking_through_an_async_import(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(imports, "IMPORT_CHUNK", CHUNK)
    monkeypatch.setattr(imports, "IMPORT_CHUNK_LIMITS", (CHUNK, CHUNK))
    monkeypatch.setattr(imports, "IMPORT_PAUSE_S", PAUSE_S)
    # A blocking sleep on the loop's thread while the loop runs is the fault looked for.
    blocking: list[float] = []
    real_sleep = time.sleep

    def guarded_sleep(seconds: float) -> None:
        try:
            asyncio.get_running_loop()
            blocking.append(seconds)
        except RuntimeError:
            pass
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", guarded_sleep)
    # Each of the import's pauses, as (start, end) on the loop's clock.
    pauses: list[tuple[float, float]] = []
    real_async_sleep = asyncio.sleep

    async def watched_sleep(seconds: float, result: object = None) -> object:
        began = time.monotonic()
        await real_async_sleep(seconds)
        if seconds == PAUSE_S:
            pauses.append((began, time.monotonic()))
        return result

    monkeypatch.setattr(asyncio, "sleep", watched_sleep)
    records = [
        LessonRecord(f"bulk.l{n:03d}", f"Lesson {n}.", status="active", applies_to=("tag:x",))
        for n in range(RECORDS)
    ]

    async def scenario() -> tuple[int, list[float]]:
        engine = create_async_database_engine(database_url)
        repo = AsyncLessonRepository(engine)
        ticks: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        try:
            summary = await repo.import_records(records)
        finally:
            done.set()
            await task
            await engine.dispose()
        return summary.added, ticks

    added, ticks = asyncio.run(scenario())
    assert added == RECORDS
    assert blocking == []
    # Both pauses were awaited on the loop, and the ticker ran inside each of them: its
    # 10 ms timer is due long before the pause's, whatever the machine's load.
    assert len(pauses) == 2
    for began, ended in pauses:
        assert any(began < tick < ended for tick in ticks)
