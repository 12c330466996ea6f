"""The async surface is typed: no ``Any`` in the signatures of the async engine, the async
store and the async protocols, and the same shape as the sync side where both exist."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from functools import cached_property
from typing import Protocol

import pytest

from contextstore import (
    AsyncContextCache,
    AsyncContextEngine,
    AsyncLessonSource,
    AsyncMetricsSink,
    AsyncRetriever,
    AsyncRunReads,
    AsyncRunState,
    AsyncStore,
    AsyncVersionedRetriever,
    ContextCache,
    ContextEngine,
    Store,
)

ANY = re.compile(r"\bAny\b")


def members(cls: type) -> dict[str, Callable[..., object]]:
    """The public callables of ``cls``: methods, properties' getters, cached properties."""
    found: dict[str, Callable[..., object]] = {}
    for name, value in vars(cls).items():
        if name.startswith("_") and (name != "__init__" or Protocol in cls.__mro__):
            continue
        if isinstance(value, property) and value.fget is not None:
            found[name] = value.fget
        elif isinstance(value, cached_property):
            found[name] = value.func
        elif inspect.isfunction(value):
            found[name] = value
    return found


def annotations(function: Callable[..., object]) -> list[str]:
    return [str(text) for text in function.__annotations__.values()]


@pytest.mark.parametrize(
    "cls",
    [
        AsyncContextEngine,
        AsyncStore,
        AsyncLessonSource,
        AsyncMetricsSink,
        AsyncRetriever,
        AsyncVersionedRetriever,
        AsyncRunState,
        AsyncRunReads,
    ],
    ids=lambda cls: cls.__name__,
)
def test_no_any_in_the_async_signatures(cls: type) -> None:
    untyped = {
        name: [text for text in annotations(function) if ANY.search(text)]
        for name, function in members(cls).items()
    }
    assert {name: texts for name, texts in untyped.items() if texts} == {}
    assert all(annotations(function) for function in members(cls).values())


@pytest.mark.parametrize(
    ("sync", "asynchronous"),
    [(ContextEngine, AsyncContextEngine), (Store, AsyncStore), (ContextCache, AsyncContextCache)],
    ids=lambda cls: cls.__name__,
)
def test_both_sides_have_the_same_shape(sync: type, asynchronous: type) -> None:
    """A name both sides have is a method on both or a property on both (``stats`` is a
    method on both caches); the async one's methods are coroutines where the sync ones do
    I/O."""
    mine, theirs = vars(sync), vars(asynchronous)
    for name in sorted(set(mine) & set(theirs) - {"__init__"}):
        if name.startswith("__"):
            continue
        kinds = {type(mine[name]) is property, type(theirs[name]) is property}
        assert len(kinds) == 1, name
    assert inspect.iscoroutinefunction(AsyncContextCache.stats)
    assert inspect.isfunction(ContextCache.stats)
