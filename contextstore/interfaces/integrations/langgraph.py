"""LangGraph: ``ContextStoreStore``, a ``BaseStore`` in SQL, and ``context_node``.

``ContextStoreStore(store=store)`` keeps a graph's long-term memory in the store's database
(tables ``graph_namespaces`` and ``graph_items``), under the store's namespace, so every
process of a fleet reads and writes the same items::

    store = contextstore.connect()
    memory = ContextStoreStore(store=store)
    graph = builder.compile(store=memory)

It answers as LangGraph's ``InMemoryStore`` does (a differential test holds it to that):
``get``, ``put``, ``delete``, ``search`` (namespace prefix, ``filter`` with LangGraph's
operators ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, nested objects and lists,
``limit`` and ``offset``) and ``list_namespaces`` (prefix and suffix with ``*`` wildcards,
``max_depth``, ``limit``, ``offset``). A batch is one transaction; its reads see the state
before its writes, and of several writes to one key the last wins. Search returns items by
namespace (sorted as ``list_namespaces`` sorts them) and then by key (in the order each was
first put); the filter is applied in Python to the items under the prefix. There is no
vector index: a ``query`` is accepted and ranks nothing, as in ``InMemoryStore`` without an
index; items carry no score. No TTL.

An ``AsyncStore`` is accepted too: ``abatch`` (``aget``, ``aput``, ``asearch``, …) then runs
on its event loop; ``batch`` needs a ``Store``.

``context_node(store, scope=…)`` is a graph node that puts the lesson block and the
composed context into the state before the node that calls the model (see its doc).

Requires ``pip install 'contextstore[langgraph]'``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypedDict

from contextstore.backends.sql.graph_items import (
    AsyncGraphItems,
    GraphItems,
    GraphItemSession,
    Path,
    StoredItem,
    check_key,
    check_path,
    check_value,
    page,
)
from contextstore.core.matching import Scope
from contextstore.errors import ConfigurationError, MissingExtraError, ValidationError
from contextstore.store.aio import AsyncStore
from contextstore.store.sync import Store

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as exc:  # pragma: no cover (the extra is installed where tests run)
    raise MissingExtraError("The LangGraph integration", "langgraph", "langgraph") from exc

__all__ = ["ContextState", "ContextStoreStore", "context_node"]

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


class ContextStoreStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items live in the store's SQL database."""

    supports_ttl = False

    def __init__(self, *, store: Store | AsyncStore) -> None:
        if isinstance(store, AsyncStore):
            self._async: AsyncGraphItems | None = AsyncGraphItems(
                store.sql_engine, store.namespace, ready=store.ready
            )
            self._sync: GraphItems | None = None
        elif isinstance(store, Store):
            self._async = None
            self._sync = GraphItems(store.sql_engine, store.namespace)
        else:
            raise ValidationError("store", f"must be a Store or an AsyncStore, not {store!r}")

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in one transaction; results in the order of ``ops``."""
        if self._sync is None:
            raise ConfigurationError(
                "store: this ContextStoreStore was built from an AsyncStore; "
                "use the async methods (abatch, aget, aput, asearch, …)"
            )
        listed = _checked(ops)
        return self._sync.transact(lambda tx: _apply(tx, listed), writes=_writes(listed))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch``, awaited: on the ``AsyncStore``'s loop, or a ``Store`` in a thread."""
        listed = _checked(ops)
        if self._async is None:
            return await asyncio.to_thread(self.batch, listed)
        return await self._async.transact(lambda tx: _apply(tx, listed), writes=_writes(listed))


def _checked(ops: Iterable[Op]) -> list[Op]:
    """Every op, refused before anything is read or written when one is malformed."""
    listed = list(ops)
    for op in listed:
        if isinstance(op, GetOp):
            check_path(op.namespace)
            check_key(op.key)
        elif isinstance(op, PutOp):
            check_path(op.namespace)
            check_key(op.key)
            if op.value is not None:
                check_value(op.value)
        elif isinstance(op, SearchOp):
            check_path(op.namespace_prefix, "namespace_prefix", empty=True)
            page(op.limit, op.offset)
            _check_filter(op.filter)
        elif isinstance(op, ListNamespacesOp):
            for condition in op.match_conditions or ():
                if condition.match_type not in ("prefix", "suffix"):
                    raise ValidationError("match_type", f"{condition.match_type!r} is unknown")
                check_path(tuple(condition.path), "match_conditions", empty=True)
            page(op.limit, op.offset)
            if op.max_depth is not None and page(op.max_depth, 0)[0] == 0:
                raise ValidationError("max_depth", "must be at least 1")
        else:
            raise ValidationError("op", f"{type(op).__name__} is not a LangGraph store operation")
    return listed


def _writes(ops: list[Op]) -> bool:
    return any(isinstance(op, PutOp) for op in ops)


def _apply(tx: GraphItemSession, ops: list[Op]) -> list[Result]:
    """Reads first, in order, then the writes (the last one per key), as ``InMemoryStore``."""
    results: list[Result] = []
    writes: dict[tuple[Path, str], PutOp] = {}
    for op in ops:
        if isinstance(op, GetOp):
            found = tx.get(op.namespace, op.key)
            results.append(None if found is None else _item(found))
        elif isinstance(op, SearchOp):
            results.append(_search(tx, op))
        elif isinstance(op, ListNamespacesOp):
            results.append(_list_namespaces(tx.paths(), op))
        else:
            assert isinstance(op, PutOp)
            writes[(op.namespace, op.key)] = op
            results.append(None)
    for (path, key), write in writes.items():
        if write.value is None:
            tx.delete(path, key)
        else:
            tx.put(path, key, dict(write.value))
    return results


def _item(found: StoredItem) -> Item:
    return Item(
        value=found.value,
        key=found.key,
        namespace=found.path,
        created_at=found.created_at,
        updated_at=found.updated_at,
    )


def _search(tx: GraphItemSession, op: SearchOp) -> list[SearchItem]:
    found = tx.search(op.namespace_prefix)
    if op.filter:
        found = [item for item in found if _matches(item.value, op.filter)]
    found = found[op.offset : op.offset + op.limit]
    return [
        SearchItem(
            namespace=item.path,
            key=item.key,
            value=item.value,
            created_at=item.created_at,
            updated_at=item.updated_at,
        )
        for item in found
    ]


def _list_namespaces(paths: list[Path], op: ListNamespacesOp) -> list[Path]:
    conditions = op.match_conditions or ()
    kept = [path for path in paths if all(_fits(condition, path) for condition in conditions)]
    if op.max_depth is not None:
        kept = list({path[: op.max_depth] for path in kept})
    return sorted(kept)[op.offset : op.offset + op.limit]


def _fits(condition: MatchCondition, path: Path) -> bool:
    """A namespace matches a prefix (or suffix) label by label, ``*`` matching any label."""
    wanted = tuple(condition.path)
    if len(path) < len(wanted):
        return False
    compared = path[: len(wanted)] if condition.match_type == "prefix" else path[-len(wanted) :]
    return all(want in ("*", label) for label, want in zip(compared, wanted, strict=False))


# -- filters: LangGraph's semantics (those of its stores' JSONB comparisons) ------------------


def _check_filter(filter_: object) -> None:
    if filter_ is None:
        return
    if not isinstance(filter_, Mapping):
        raise ValidationError("filter", "must be a dict of field names and values")
    _check_operators(filter_)


def _check_operators(value: object) -> None:
    if isinstance(value, Mapping):
        # An object naming one operator is all operators (LangGraph reads it so).
        operators = any(isinstance(name, str) and name.startswith("$") for name in value)
        for name, inner in value.items():
            if not isinstance(name, str):
                raise ValidationError("filter", f"field name {name!r} is not a string")
            if operators and name not in OPERATORS:
                raise ValidationError(
                    "filter", f"{name!r} is not an operator; use one of {', '.join(OPERATORS)}"
                )
            _check_operators(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            _check_operators(inner)


def _matches(value: dict[str, Any], filter_: Mapping[str, Any]) -> bool:
    return all(_compare(value.get(name), wanted) for name, wanted in filter_.items())


def _compare(actual: Any, wanted: Any) -> bool:
    """An object with ``$`` keys applies operators; any other object compares field by
    field; a list compares element by element; anything else by equality."""
    if isinstance(wanted, Mapping):
        if any(name.startswith("$") for name in wanted):
            return all(_operator(actual, name, operand) for name, operand in wanted.items())
        if not isinstance(actual, dict):
            return False
        return all(_compare(actual.get(name), inner) for name, inner in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(_compare(a, w) for a, w in zip(actual, wanted, strict=False))
        )
    return bool(actual == wanted)


def _operator(actual: Any, name: str, operand: Any) -> bool:
    if name == "$eq":
        return bool(actual == operand)
    if name == "$ne":
        return bool(actual != operand)
    try:
        left, right = float(actual), float(operand)
    except (TypeError, ValueError) as error:
        raise ValidationError(
            "filter", f"{name} compares numbers; {actual!r} and {operand!r} are not both numbers"
        ) from error
    if name == "$gt":
        return left > right
    if name == "$gte":
        return left >= right
    if name == "$lt":
        return left < right
    return left <= right


# -- the node that puts the lessons and the context into a graph's state ----------------------


class ContextState(TypedDict, total=False):
    """The keys ``context_node`` writes; add them to a graph's state schema."""

    lesson_block: str
    context: str
    prompt: str


QueryOf = Callable[[Mapping[str, Any]], str]


def context_node(
    store: Store | AsyncStore,
    *,
    scope: Scope | None = None,
    query: str | QueryOf = "question",
    scope_key: str = "scope",
) -> Callable[[Mapping[str, Any]], ContextState | Awaitable[ContextState]]:
    """A node that builds the context for the state's question before the model is called.

    The question is ``state[query]`` (a string), or ``query(state)`` when ``query`` is a
    function; with ``query="messages"`` it is the text of the last message. The scope is
    ``state[scope_key]`` when the state has one (a ``Scope``, or a dict of ``tags`` and
    ``entity_ids``), else ``scope``. The node returns ``lesson_block``, ``context`` and
    ``prompt`` (the lesson block, then the context: what to send before the question), so
    the next node reads ``state["prompt"]``. With an ``AsyncStore`` the node is a coroutine
    function, for ``ainvoke``. Runs are recorded as every run is (metrics, traces).
    """
    question_of = query if callable(query) else _field(query)

    def scope_of(state: Mapping[str, Any]) -> Scope | None:
        given = state.get(scope_key)
        if given is None:
            return scope
        if isinstance(given, Scope):
            return given
        if isinstance(given, Mapping):
            return Scope(
                entity_ids=tuple(given.get("entity_ids", ())), tags=tuple(given.get("tags", ()))
            )
        raise ValidationError(scope_key, "must be a Scope or a dict of tags and entity_ids")

    if isinstance(store, AsyncStore):
        async_engine = store.engine()

        async def build_async(state: Mapping[str, Any]) -> ContextState:
            result = await async_engine.run(question_of(state), scope=scope_of(state))
            return _state(result)

        return build_async
    engine = store.engine()

    def build(state: Mapping[str, Any]) -> ContextState:
        return _state(engine.run(question_of(state), scope=scope_of(state)))

    return build


def _field(name: str) -> QueryOf:
    def read(state: Mapping[str, Any]) -> str:
        value = state.get(name)
        if name == "messages" and isinstance(value, list) and value:
            value = getattr(value[-1], "content", value[-1])
        if not isinstance(value, str):
            raise ValidationError(name, "the state holds no question text here")
        return value

    return read


def _state(result: Any) -> ContextState:
    return {"lesson_block": result.lesson_block, "context": result.context, "prompt": result.prompt}
