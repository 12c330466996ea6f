"""The plain ports in process memory: the async engine answers every run as the sync one.

The sync engine on a memory cache and memory windows is the reference; the async engine on
sync memory parts (wrapped) and on the async memory parts, with a sync and an async lesson
source, must return the same results run for run and leave the same windows.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from contextstore.backends.memory.cache import AsyncMemoryContextCache, MemoryContextCache
from contextstore.backends.memory.windows import AsyncMemoryWindows, MemoryWindows
from contextstore.core.lessons import InMemoryLessons
from contextstore.core.matching import Lesson, Scope
from contextstore.engine.aio import AsyncContextEngine
from contextstore.engine.separate import AsyncSeparateRunReads, AsyncSeparateRunState
from contextstore.engine.sync import ContextEngine
from contextstore.sample_data import load_lessons, sample_retriever
from tests.backends.contract.runs import adriven, assert_same_runs, driven, engine_options


class AwaitedLessons:
    """``lessons`` behind the async lesson source protocol."""

    def __init__(self, lessons: InMemoryLessons) -> None:
        self.lessons = lessons

    async def candidates(self, scope: Scope) -> list[Lesson]:
        return self.lessons.candidates(scope)


def test_the_async_engine_on_memory_answers_as_the_sync_one() -> None:
    retriever = sample_retriever()
    lessons = InMemoryLessons(load_lessons())
    reference = ContextEngine(
        retriever=retriever,
        lessons=lessons,
        cache=MemoryContextCache(),
        windows=MemoryWindows(),
        **engine_options(),
    )
    wrapped = AsyncContextEngine(
        retriever=retriever,
        lessons=lessons,
        cache=MemoryContextCache(),
        windows=MemoryWindows(),
        **engine_options(),
    )
    native = AsyncContextEngine(
        retriever=retriever,
        lessons=AwaitedLessons(lessons),
        cache=AsyncMemoryContextCache(),
        windows=AsyncMemoryWindows(),
        **engine_options(),
    )
    assert isinstance(native.state, AsyncSeparateRunState)
    assert isinstance(native.reads, AsyncSeparateRunReads)

    def change() -> None:
        retriever.add("Failover drills run every quarter, on a Tuesday.", "drills.md")
        lessons.add(replace(load_lessons()[1], entity_id="nw.lessons.ops.contract.0001"))

    with asyncio.Runner() as runner:
        assert_same_runs(
            [
                driven("sync", reference),
                adriven("async, sync parts", wrapped, runner),
                adriven("async, async parts", native, runner),
            ],
            change,
        )
