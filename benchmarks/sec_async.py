"""``AsyncContextEngine`` on PostgreSQL + Redis: throughput and event-loop stalls.

- Throughput: the same workload (a fresh query's miss, then its hit) run by the sync engine
  one run after another, and by the async engine with 32 concurrent callers and 32 runs in
  flight (``concurrency=32``) on one event loop: asyncio's default loop, and uvloop (the
  loop ``contextstore serve`` runs on); rounds interleaved. Ratio: async runs/s over sync
  runs/s (every sync round).
- Stall: 200 runs gathered at once on a warm engine while a task sleeps 1 ms at a time; the
  largest wait of that task beyond its 1 ms (wall clock), repeated, as the median of the
  repetitions' largest waits and the largest of all; and the largest wait less the time the
  OS kept the loop's thread waiting for a CPU (what this process's own work cost, whatever
  the machine's other load).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from typing import Any

import uvloop

from benchmarks.context import Bench
from benchmarks.demo_knowledge import demo_retriever
from benchmarks.report import Row, ms
from benchmarks.timing import run_queue_seconds
from contextstore.engine.aio import DEFAULT_CONCURRENCY
from contextstore.sample_data import load_demo_queries, load_lessons
from contextstore.store.aio import connect_async
from contextstore.store.sync import connect

SECTION = "Async engine, PostgreSQL + Redis"
CONCURRENT = 32


def _work(count: int, tag: str) -> list[tuple[str, Any]]:
    """``count`` runs: each fresh query twice in a row (a miss, then a hit)."""
    items = load_demo_queries()
    runs = []
    for i in range(count // 2):
        item = items[i % len(items)]
        runs += [(f"{item.query} ({tag} {i})", item.scope)] * 2
    return runs


async def _async_rounds(
    url: str,
    redis_url: str,
    namespace: str,
    rounds: int,
    per_round: int,
    sync_round: Any,
    stalls: int,
) -> tuple[list[float], list[float], list[float], list[float], list[float]]:
    """(async runs/s per round, sync runs/s per round, largest stall wait of each repetition
    in s, largest loop CPU between two ticks of each repetition in s, largest stall wait of
    each repetition with 32 runs in flight, in s)."""
    async with connect_async(url, redis_url, namespace) as store:
        # 32 runs in flight (the engine's ``concurrency``) for the throughput; the stall is
        # measured on an engine with the default concurrency, as an application gets it.
        engine = store.engine(
            retriever=demo_retriever(), worker="bench-async", concurrency=CONCURRENT
        )
        await asyncio.gather(*(engine.run(f"warm-up {i}") for i in range(64)))
        async_rates: list[float] = []
        sync_rates: list[float] = []
        for round_number in range(rounds):
            work = _work(per_round, f"async {round_number}")
            slots = asyncio.Semaphore(CONCURRENT)

            async def one(query: str, scope: Any, slots: asyncio.Semaphore = slots) -> None:
                async with slots:  # 32 callers at a time, as 32 concurrent requests would
                    await engine.run(query, scope=scope)

            # The sync round runs in a thread: the loop must stay free for nothing else, and
            # the two never overlap.
            if round_number % 2:
                sync_rates.append(await asyncio.to_thread(sync_round, round_number))
            started = time.perf_counter()
            await asyncio.gather(*(one(query, scope) for query, scope in work))
            async_rates.append(len(work) / (time.perf_counter() - started))
            if not round_number % 2:
                sync_rates.append(await asyncio.to_thread(sync_round, round_number))
        default = store.engine(retriever=demo_retriever(), worker="bench-async")
        worst: list[float] = []
        busiest: list[float] = []
        wide: list[float] = []
        for repetition in range(stalls):
            waits, busy = await _stall(default, repetition)
            worst.append(max(waits))
            busiest.append(max(busy))
        # The same with 32 runs in flight, for the note: a loop turn runs every step that
        # became ready, so its longest turn grows with the runs in flight.
        for repetition in range(stalls):
            waits, _ = await _stall(engine, stalls + repetition)
            wide.append(max(waits))
        return async_rates, sync_rates, worst, busiest, wide


async def _stall(engine: Any, repetition: int) -> tuple[list[float], list[float]]:
    """(each tick's wait beyond its 1 ms, the same less the OS's run-queue delay), in s."""
    loop = asyncio.get_running_loop()
    waits: list[float] = []
    own: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            before, queued = loop.time(), run_queue_seconds()
            await asyncio.sleep(0.001)
            waits.append(loop.time() - before - 0.001)
            own.append(waits[-1] - (run_queue_seconds() - queued))

    work = _work(200, f"stall {repetition}")
    # What the rest of the process left on the heap is not the engine's to collect.
    gc.collect()
    gc.freeze()
    ticker = asyncio.create_task(tick())
    await asyncio.gather(*(engine.run(query, scope=scope) for query, scope in work))
    done.set()
    await ticker
    gc.unfreeze()
    return waits, own


def run(bench: Bench) -> list[Row]:
    bench.services.require_postgres()
    bench.services.require_redis()
    bench.say("async engine: preparing the database")
    url = bench.services.database_url("postgresql", "async_engine")
    redis_url = bench.services.redis_url
    namespace = bench.services.namespace("async-engine")
    rounds, per_round = bench.pick(4, 10), bench.pick(64, 256)
    with connect(url, redis_url, namespace) as store:
        store.lessons.import_records(load_lessons())
        engine = store.engine(retriever=demo_retriever(), worker="bench-sync")
        for i in range(32):
            engine.run(f"sync warm-up {i}")

        def sync_round(round_number: int) -> float:
            bench.say(f"async engine: round {round_number + 1}/{rounds}")
            work = _work(per_round, f"sync {round_number}")
            started = time.perf_counter()
            for query, scope in work:
                engine.run(query, scope=scope)
            return len(work) / (time.perf_counter() - started)

        stalls = bench.pick(3, 7)
        # The default loop, then uvloop (how ``contextstore serve`` runs the engine), each
        # with sync rounds of its own interleaved; the stall is measured on the default loop.
        with asyncio.Runner() as runner:
            async_rates, sync_rates, waits, busy, wide = runner.run(
                _async_rounds(url, redis_url, namespace, rounds, per_round, sync_round, stalls)
            )
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            uv_rates, uv_sync_rates, _, _, _ = runner.run(
                _async_rounds(url, redis_url, namespace, rounds, per_round, sync_round, 0)
            )
    all_sync_rates = sync_rates + uv_sync_rates
    theirs = statistics.median(all_sync_rates)
    worst_wait, worst_busy = statistics.median(waits) * 1000, max(busy) * 1000
    largest = max(waits) * 1000
    rows = []
    for loop, rates in (("asyncio's default loop", async_rates), ("uvloop", uv_rates)):
        ours = statistics.median(rates)
        rows.append(
            Row(
                SECTION,
                f"throughput, {CONCURRENT} concurrent runs (misses and hits), on {loop}",
                f"{ours:,.0f} runs/s",
                "sync engine, sequential",
                f"{theirs:,.0f} runs/s",
                ours / theirs,
                "≥ 2×",
                ours / theirs >= 2.0,
                values={"async_runs_per_s": rates, "sync_runs_per_s": all_sync_rates},
            )
        )
    return [
        *rows,
        Row(
            SECTION,
            f"largest event-loop stall during 200 gathered runs (1 ms ticker, wall clock; "
            f"median of {len(waits)} repetitions)",
            ms(worst_wait),
            "the ticker's own 1 ms",
            ms(1.0),
            None,
            "≤ 50 ms",
            worst_wait <= 50.0,
            note=f"the engine's default concurrency ({DEFAULT_CONCURRENCY} runs in flight); "
            f"largest of all repetitions {largest:.1f} ms; without the time the OS kept the "
            f"loop's thread waiting for a CPU, at most {worst_busy:.1f} ms; with "
            f"{CONCURRENT} runs in flight, as in the throughput rows, "
            f"{statistics.median(wide) * 1000:.1f} ms (median)",
            values={
                "wait_ms": [w * 1000 for w in waits],
                "loop_ms": [b * 1000 for b in busy],
                "wait_ms_32_in_flight": [w * 1000 for w in wide],
            },
        ),
    ]
