"""What one MCP tool call may reach, and as whom: ``Access``.

The tools are written once, against ``Access``. Over stdio every call gets ``LocalAccess``:
the sync store the local user opened, with every role (decision 0055). Over HTTP each call
gets the access of its bearer key (``contextstore.interfaces.mcp.http``): the key's
namespace on the service's async stores, and the key's role, as the HTTP API gives it.

``TOOL_ROLES`` is the one table of which tool needs which role; a call whose key lacks it is
refused as a tool error naming both (decision 0077).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar

import anyio.to_thread

from contextstore.core.compose import Chunk
from contextstore.core.knowledge import Document
from contextstore.core.lessons import LessonRecord, default_actor
from contextstore.core.matching import Lesson, Scope
from contextstore.engine.pipeline import ContextResult
from contextstore.interfaces.apikeys import Role
from contextstore.store.sync import Store

__all__ = ["TOOL_ROLES", "Access", "LocalAccess", "missing_role"]

T = TypeVar("T")

# Every other tool and resource is open to any key of the namespace (role "agent" or up):
# reading what a run would read, and proposing a lesson, which stays inert until activated.
TOOL_ROLES: Final[Mapping[str, Role]] = {
    "add_document": "admin",
    "delete_document": "admin",
}


def missing_role(tool: str, role: Role) -> str | None:
    """Why a key of ``role`` may not call ``tool`` (``None``: it may)."""
    needed = TOOL_ROLES.get(tool, "agent")
    if needed == "admin" and role != "admin":
        return f"this tool needs an admin key; this key's role is {role}"
    return None


class Access(Protocol):
    """A namespace's run, lessons and knowledge, as one caller may reach them."""

    @property
    def role(self) -> Role: ...

    async def run(
        self,
        query: str,
        scope: Scope,
        filters: Mapping[str, object] | None,
        budget: int | None,
    ) -> ContextResult: ...

    async def candidates(self, scope: Scope, include_inactive: bool) -> Sequence[Lesson]: ...

    async def search(
        self, query: str, top_k: int, filters: Mapping[str, object] | None
    ) -> Sequence[Chunk]: ...

    async def document(self, source: str) -> Document: ...

    async def add_document(
        self, text: str, source: str, metadata: Mapping[str, Any] | None
    ) -> Document: ...

    async def delete_document(self, source: str) -> None: ...

    async def propose(self, record: LessonRecord) -> LessonRecord: ...

    async def lesson(self, entity_id: str) -> LessonRecord: ...


class LocalAccess:
    """The local user's access over stdio: a sync ``Store``, every role.

    Each call runs in a worker thread (the store blocks). The engine's process-local parts
    (windows, cache) are not shared between threads, so runs take a lock.
    """

    role: Role = "admin"

    def __init__(self, store: Store) -> None:
        self.store = store
        self.engine = store.engine()
        self.engine_lock = threading.Lock()
        self.proposer = store.lessons.as_actor(f"mcp:{default_actor()}"[:255])

    @staticmethod
    async def _blocking(work: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(work)

    async def run(
        self,
        query: str,
        scope: Scope,
        filters: Mapping[str, object] | None,
        budget: int | None,
    ) -> ContextResult:
        def locked() -> ContextResult:
            with self.engine_lock:
                return self.engine.run(query, scope=scope, filters=filters, override_budget=budget)

        return await self._blocking(locked)

    async def candidates(self, scope: Scope, include_inactive: bool) -> Sequence[Lesson]:
        lessons = self.store.lessons
        return await self._blocking(
            lambda: lessons.candidates(scope, include_inactive=include_inactive)
        )

    async def search(
        self, query: str, top_k: int, filters: Mapping[str, object] | None
    ) -> Sequence[Chunk]:
        return await self._blocking(lambda: self.store.knowledge.search(query, top_k, filters))

    async def document(self, source: str) -> Document:
        return await self._blocking(lambda: self.store.knowledge.get(source))

    async def add_document(
        self, text: str, source: str, metadata: Mapping[str, Any] | None
    ) -> Document:
        return await self._blocking(lambda: self.store.knowledge.add(text, source, metadata))

    async def delete_document(self, source: str) -> None:
        await self._blocking(lambda: self.store.knowledge.delete(source))

    async def propose(self, record: LessonRecord) -> LessonRecord:
        return await self._blocking(lambda: self.proposer.propose(record))

    async def lesson(self, entity_id: str) -> LessonRecord:
        return await self._blocking(lambda: self.store.lessons.get(entity_id))
