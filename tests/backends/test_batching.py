"""``backends.batching.Batcher``: what goes together, and what each caller gets back."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from contextstore.backends.batching import Batcher


class Refused(Exception):
    pass


class Recorder:
    """A ``send`` that takes one loop turn per batch, records each batch, and answers each
    item doubled; an item in ``refuse`` fails the whole batch, an item in ``odd`` only
    itself."""

    def __init__(self, refuse: frozenset[int] = frozenset(), odd: frozenset[int] = frozenset()):
        self.batches: list[list[int]] = []
        self.refuse = refuse
        self.odd = odd

    async def send(self, items: list[int]) -> Sequence[int | BaseException]:
        self.batches.append(list(items))
        await asyncio.sleep(0)
        if self.refuse & set(items):
            raise Refused(f"refused {sorted(self.refuse & set(items))}")
        return [ValueError(item) if item in self.odd else item * 2 for item in items]


@pytest.mark.asyncio
async def test_a_lone_item_is_sent_alone_and_answered() -> None:
    recorder = Recorder()
    batcher = Batcher(recorder.send, limit=8)
    assert await batcher.submit(3) == 6
    assert await batcher.submit(4) == 8
    assert recorder.batches == [[3], [4]]


@pytest.mark.asyncio
async def test_items_submitted_while_a_batch_is_out_go_together_as_the_next() -> None:
    recorder = Recorder()
    batcher = Batcher(recorder.send, limit=8)
    results = await asyncio.gather(*(batcher.submit(item) for item in range(20)))
    assert results == [item * 2 for item in range(20)]
    # All 20 were queued in the same loop turn: batches of the limit, in order.
    assert recorder.batches == [list(range(0, 8)), list(range(8, 16)), list(range(16, 20))]


@pytest.mark.asyncio
async def test_each_caller_gets_its_own_outcome() -> None:
    recorder = Recorder(odd=frozenset({2}))
    batcher = Batcher(recorder.send, limit=8)
    results = await asyncio.gather(
        *(batcher.submit(item) for item in range(4)), return_exceptions=True
    )
    assert results[0] == 0 and results[1] == 2 and results[3] == 6
    assert isinstance(results[2], ValueError) and results[2].args == (2,)
    assert recorder.batches == [[0, 1, 2, 3]]


@pytest.mark.asyncio
async def test_a_failed_batch_fails_every_caller_unless_the_error_may_be_one_items() -> None:
    recorder = Recorder(refuse=frozenset({1}))
    batcher: Batcher[int, int] = Batcher(recorder.send, limit=8)
    results = await asyncio.gather(
        *(batcher.submit(item) for item in range(3)), return_exceptions=True
    )
    assert all(isinstance(result, Refused) for result in results)
    assert recorder.batches == [[0, 1, 2]]

    recorder = Recorder(refuse=frozenset({1}))
    batcher = Batcher(recorder.send, limit=8, alone=lambda error: isinstance(error, Refused))
    results = await asyncio.gather(
        *(batcher.submit(item) for item in range(3)), return_exceptions=True
    )
    assert results[0] == 0 and results[2] == 4
    assert isinstance(results[1], Refused)
    # The batch, then each item on its own.
    assert recorder.batches == [[0, 1, 2], [0], [1], [2]]


@pytest.mark.asyncio
async def test_a_cancelled_caller_leaves_the_others_answered() -> None:
    recorder = Recorder()
    batcher = Batcher(recorder.send, limit=8)
    first = asyncio.ensure_future(batcher.submit(1))
    second = asyncio.ensure_future(batcher.submit(2))
    await asyncio.sleep(0)  # both queued, the batch is out
    first.cancel()
    assert await second == 4
    with pytest.raises(asyncio.CancelledError):
        await first
    assert recorder.batches == [[1, 2]]  # a cancelled caller does not withdraw its item
    assert await batcher.submit(5) == 10


class Stalled:
    """A ``send`` that records each batch and waits until released (or cancelled)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()

    async def send(self, items: list[int]) -> Sequence[int | BaseException]:
        self.batches.append(list(items))
        await self.release.wait()
        return [item * 2 for item in items]


@pytest.mark.asyncio
async def test_a_cancelled_sender_leaves_no_caller_waiting() -> None:
    stalled = Stalled()
    batcher: Batcher[int, int] = Batcher(stalled.send, limit=2)
    callers = [asyncio.ensure_future(batcher.submit(item)) for item in range(5)]
    await asyncio.sleep(0)  # the first batch is out, three items queued behind it
    await asyncio.sleep(0)
    assert stalled.batches == [[0, 1]]
    sender = batcher._sender
    assert sender is not None
    sender.cancel()  # as a loop shutting down cancels its tasks
    # Every caller is answered at once (cancelled), in flight or queued: none hangs.
    done, pending = await asyncio.wait(callers, timeout=5)
    assert pending == set()
    assert all(caller.cancelled() for caller in done)
    assert stalled.batches == [[0, 1]]
    # The batcher still works: a new sender takes the next item.
    stalled.release.set()
    assert await asyncio.wait_for(batcher.submit(7), timeout=5) == 14
