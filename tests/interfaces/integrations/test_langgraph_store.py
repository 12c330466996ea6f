"""``ContextStoreStore`` against LangGraph's own ``InMemoryStore``: random operation
sequences, the same results on SQLite and PostgreSQL.

Each step sends the same operations to both stores, as one call (``put``, ``get``, …) or as
one ``batch`` of several, and requires the same answer: the same items (namespace, key,
value), the same namespaces, the same refusals. Two differences of ``InMemoryStore`` are
normalised, and only these: it keeps listing a namespace once any operation touched it, even
one that never held an item (a ``get`` makes it), where a SQL store lists the namespaces
holding items, as LangGraph's ``PostgresStore`` does; so empty namespaces are dropped from it
after each step, and a listing is never batched with other operations. And it returns search
results in the order its namespaces were first touched; ``ContextStoreStore`` sorts the
namespaces (as ``list_namespaces`` does), so the reference's full result is sorted the same
way (stably: the order of keys within a namespace is compared as it is) before the limit
and offset are applied.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from contextstore import connect, connect_async
from contextstore.errors import ConfigurationError, ValidationError
from contextstore.interfaces.integrations.langgraph import ContextStoreStore
from tests.conftest import FULL_RUN

LABELS = ("a", "b", "A", "a-b", "é", "users")
KEYS = ("k1", "k2", "K1", "", "memory 1", "k/2")
# A few thousand operations on each database in a full run; the quick loop runs fewer.
STEPS = 3000 if FULL_RUN else 400
NOT_SLICED = 10**6


def random_path(rng: random.Random, least: int = 1) -> tuple[str, ...]:
    return tuple(rng.choice(LABELS) for _ in range(rng.randint(least, 3)))


def random_value(rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {}
    if rng.random() < 0.9:
        value["n"] = rng.choice([0, 1, 2, 3, 2.5, -1, True, "7"])
    if rng.random() < 0.05:
        # Not a number: an order comparison of "m" is refused by both stores.
        value["m"] = rng.choice(["x", None, [1]])
    if rng.random() < 0.6:
        value["s"] = rng.choice(["red", "blue", "Red", ""])
    if rng.random() < 0.4:
        value["tags"] = rng.choice([[], ["a"], ["a", "b"], ["b", "a"], [1, "a"]])
    if rng.random() < 0.4:
        value["nested"] = {"x": rng.choice([1, 2, 3]), "y": rng.choice(["p", "q"])}
    return value


def random_condition(rng: random.Random) -> tuple[str, Any]:
    kind = rng.random()
    if kind < 0.3:
        return "n", rng.choice([1, 2, 2.5, True, "7", None])
    if kind < 0.5:
        operator = rng.choice(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"])
        operand = rng.choice([0, 1, 2, 2.5]) if operator not in ("$eq", "$ne") else 2
        return "n", {operator: operand}
    if kind < 0.6:
        return "n", {"$gte": 1, "$lt": 3}
    if kind < 0.62:
        return "m", {"$gt": 0}
    if kind < 0.75:
        return "s", rng.choice(["red", "blue", {"$ne": "red"}])
    if kind < 0.85:
        return "tags", rng.choice([["a"], ["a", "b"], []])
    return "nested", rng.choice([{"x": 1}, {"x": {"$gt": 1}}, {"y": "q", "x": 3}])


def random_filter(rng: random.Random) -> dict[str, Any] | None:
    if rng.random() < 0.4:
        return None
    return dict(random_condition(rng) for _ in range(rng.randint(1, 2)))


def random_search(rng: random.Random) -> SearchOp:
    return SearchOp(
        namespace_prefix=random_path(rng, least=0)[: rng.randint(0, 2)],
        filter=random_filter(rng),
        limit=rng.randint(1, 12),
        offset=rng.choice([0, 0, 1, 3]),
        query=rng.choice([None, "anything"]),
    )


def random_listing(rng: random.Random) -> ListNamespacesOp:
    conditions = []
    for match_type in ("prefix", "suffix"):
        if rng.random() < 0.4:
            labels = [rng.choice((*LABELS, "*")) for _ in range(rng.randint(1, 2))]
            conditions.append(MatchCondition(match_type=match_type, path=tuple(labels)))
    return ListNamespacesOp(
        match_conditions=tuple(conditions) or None,
        max_depth=rng.choice([None, None, 1, 2]),
        limit=rng.randint(1, 20),
        offset=rng.choice([0, 0, 1, 2]),
    )


def random_op(rng: random.Random) -> Op:
    kind = rng.random()
    if kind < 0.45:
        return PutOp(random_path(rng), rng.choice(KEYS), random_value(rng))
    if kind < 0.6:
        return PutOp(random_path(rng), rng.choice(KEYS), None)
    if kind < 0.78:
        return GetOp(random_path(rng), rng.choice(KEYS))
    return random_search(rng)


def items(found: Any) -> Any:
    """What is compared of a result: (namespace, key, value) of each item, or as it is."""
    if found is None:
        return None
    if isinstance(found, list):
        return [items(one) for one in found]
    if isinstance(found, tuple):
        return found
    return (tuple(found.namespace), found.key, found.value)


def unsliced(op: Op) -> Op:
    """The reference's form of ``op``: a search without limit or offset (see the doc)."""
    if isinstance(op, SearchOp):
        return SearchOp(op.namespace_prefix, op.filter, NOT_SLICED, 0, op.query)
    return op


def expected(op: Op, found: Any) -> Any:
    if isinstance(op, SearchOp):
        ordered = sorted(found, key=lambda item: tuple(item.namespace))
        return items(ordered[op.offset : op.offset + op.limit])
    return items(found)


def prune(reference: InMemoryStore) -> None:
    for namespace in [name for name, held in reference._data.items() if not held]:
        del reference._data[namespace]


def reference_batch(reference: InMemoryStore, ops: list[Op]) -> Any:
    """The reference's results (or its refusal) for ``ops``, normalised as the doc says."""
    try:
        results = reference.batch([unsliced(op) for op in ops])
    except (ValueError, TypeError):
        outcome: Any = "refused"
    else:
        outcome = [expected(op, found) for op, found in zip(ops, results, strict=True)]
    prune(reference)
    return outcome


def steps(seed: int, count: int) -> list[list[Op]]:
    rng = random.Random(seed)
    planned: list[list[Op]] = []
    for _ in range(count):
        if rng.random() < 0.1:
            planned.append([random_listing(rng)])
        elif rng.random() < 0.15:
            planned.append([random_op(rng) for _ in range(rng.randint(2, 5))])
        else:
            planned.append([random_op(rng)])
    return planned


def ours(store: ContextStoreStore, ops: list[Op]) -> Any:
    try:
        return [items(found) for found in store.batch(ops)]
    except ValidationError as error:
        assert error.field == "filter", error  # only a comparison of non-numbers is refused
        return "refused"


def test_random_operations_answer_as_the_in_memory_store(database_url: str) -> None:
    reference = InMemoryStore()
    compared = {"get": 0, "search": 0, "list": 0, "refused": 0, "items": 0}
    with connect(database_url=database_url, redis_url="", namespace="graph") as store:
        graph_store = ContextStoreStore(store=store)
        for number, ops in enumerate(steps(seed=24, count=STEPS)):
            want = reference_batch(reference, ops)
            got = ours(graph_store, ops)
            assert got == want, f"step {number}: {ops}"
            if got == "refused":
                compared["refused"] += 1
                continue
            for op, found in zip(ops, got, strict=True):
                kind = type(op).__name__
                if kind == "GetOp":
                    compared["get"] += found is not None
                elif kind == "SearchOp":
                    compared["search"] += 1
                    compared["items"] += len(found)
                elif kind == "ListNamespacesOp":
                    compared["list"] += len(found) > 0
        # The sequence reached every kind of answer, not only empty ones.
        assert min(compared.values()) > 0, compared
        # What is stored at the end is the same, item for item.
        final = SearchOp((), None, NOT_SLICED, 0)
        assert ours(graph_store, [final]) == reference_batch(reference, [final])


def test_the_same_answers_through_an_async_store(database_url: str) -> None:
    reference = InMemoryStore()

    async def scenario() -> None:
        async with connect_async(database_url=database_url, redis_url="") as store:
            graph_store = ContextStoreStore(store=store)
            for number, ops in enumerate(steps(seed=7, count=STEPS // 4)):
                want = reference_batch(reference, ops)
                try:
                    got: Any = [items(found) for found in await graph_store.abatch(ops)]
                except ValidationError:
                    got = "refused"
                assert got == want, f"step {number}: {ops}"
            with pytest.raises(ConfigurationError, match="AsyncStore"):
                graph_store.batch([GetOp(("a",), "k1")])

    asyncio.run(scenario())


def test_items_are_shared_through_the_database_and_namespaced(database_url: str) -> None:
    with (
        connect(database_url=database_url, redis_url="", namespace="one") as first,
        connect(database_url=database_url, redis_url="", namespace="one") as second,
        connect(database_url=database_url, redis_url="", namespace="two") as other,
    ):
        ContextStoreStore(store=first).put(("users", "u1"), "prefs", {"tone": "terse"})
        found = ContextStoreStore(store=second).get(("users", "u1"), "prefs")
        assert found is not None
        assert (found.value, found.key, found.namespace) == (
            {"tone": "terse"},
            "prefs",
            ("users", "u1"),
        )
        assert ContextStoreStore(store=other).get(("users", "u1"), "prefs") is None
        assert ContextStoreStore(store=other).list_namespaces() == []
        # An update keeps created_at and moves updated_at.
        ContextStoreStore(store=second).put(("users", "u1"), "prefs", {"tone": "warm"})
        again = ContextStoreStore(store=first).get(("users", "u1"), "prefs")
        assert again is not None
        assert again.value == {"tone": "warm"}
        assert again.created_at == found.created_at
        assert again.updated_at > found.updated_at


@pytest.mark.parametrize(
    ("op", "field"),
    [
        (PutOp(("a.b",), "k", {"x": 1}), "namespace"),
        (PutOp((), "k", {"x": 1}), "namespace"),
        (PutOp(("a",), "k\x00", {"x": 1}), "key"),
        (PutOp(("a",), "k", {"x": float("nan")}), "value"),
        (PutOp(("a",), "k", {"x": object()}), "value"),
        (SearchOp(("a",), {"n": {"$regex": "x"}}), "filter"),
        (SearchOp(("a",), {"n": {"$gt": 1, "x": 2}}), "filter"),
        (SearchOp(("a",), None, -1), "limit"),
        (ListNamespacesOp(None, 0), "max_depth"),
    ],
)
def test_malformed_operations_are_refused_naming_the_field_and_write_nothing(
    database_url: str, op: Op, field: str
) -> None:
    with connect(database_url=database_url, redis_url="") as store:
        graph_store = ContextStoreStore(store=store)
        with pytest.raises(ValidationError) as refused:
            graph_store.batch([PutOp(("kept",), "k", {"x": 1}), op])
        assert refused.value.field == field
        assert graph_store.list_namespaces() == []


WRITER = """
import sys
from contextstore import connect
from contextstore.interfaces.integrations.langgraph import ContextStoreStore

url, worker = sys.argv[1], sys.argv[2]
with connect(database_url=url, redis_url="", namespace="fleet") as store:
    graph_store = ContextStoreStore(store=store)
    for number in range(25):
        # Every process makes and empties the namespace ("tmp",) over and over.
        graph_store.put(("tmp",), worker, {"n": number})
        graph_store.put(("shared", "common"), f"{worker}-{number}", {"n": number})
        graph_store.put(("shared", worker), str(number), {"n": number})
        graph_store.delete(("tmp",), worker)
"""


@pytest.mark.slow
def test_processes_writing_at_once_lose_nothing(database_url: str) -> None:
    import subprocess
    import sys

    workers = [
        subprocess.Popen([sys.executable, "-c", WRITER, database_url, f"w{index}"])
        for index in range(3)
    ]
    assert [worker.wait(timeout=300) for worker in workers] == [0, 0, 0]
    with connect(database_url=database_url, redis_url="", namespace="fleet") as store:
        graph_store = ContextStoreStore(store=store)
        assert graph_store.list_namespaces() == [
            ("shared", "common"),
            ("shared", "w0"),
            ("shared", "w1"),
            ("shared", "w2"),
        ]
        common = graph_store.search(("shared", "common"), limit=1000)
        assert sorted(item.key for item in common) == sorted(
            f"w{index}-{number}" for index in range(3) for number in range(25)
        )
        assert len(graph_store.search(("shared",), limit=1000)) == 150
        assert graph_store.search(("tmp",)) == []
