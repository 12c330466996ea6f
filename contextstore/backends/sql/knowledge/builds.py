"""Background builds of the local index: one at a time per index, off the caller's thread.

A search that finds its namespace's index missing or stale is answered by the SQL ranking
while a build runs here (decision 0098): on a daemon thread for ``KnowledgeBase``, as a task
of the event loop whose CPU work runs on a daemon thread for ``AsyncKnowledgeBase``. Daemon,
so that a process exits without waiting for a build; each such thread is registered until it
ends, so ``wait_for_builds`` can wait for every build of the process (tests do before they
drop a database).

``BuildState`` is the bookkeeping one ``LocalIndex`` keeps: whether a build is in flight
(``claim`` refuses a second), how many were started, and failures. A failed build is logged
once (a ``WARNING`` with its traceback; further failures in a row at ``DEBUG``, so a namespace
that cannot be read does not flood the log) and is not started again before ``retry_after``
seconds on ``clock``; ``claim(now=True)`` (``wait_for_index``) ignores that delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

__all__ = [
    "RETRY_AFTER",
    "BuildState",
    "in_daemon_thread",
    "running_builds",
    "start_daemon",
    "start_task",
    "wait_for_build_tasks",
    "wait_for_builds",
]

logger = logging.getLogger(__name__)

RETRY_AFTER: Final = 5.0
"""Seconds after a failed build before a search starts another."""

T = TypeVar("T")

_RUNNING: set[threading.Thread] = set()
_RUNNING_LOCK = threading.Lock()
_TASKS: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


def start_daemon(work: Callable[[], None], name: str) -> threading.Thread:
    """Run ``work`` on a new daemon thread, registered until it ends (``running_builds``)."""

    def run() -> None:
        try:
            work()
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(thread)

    thread = threading.Thread(target=run, name=name, daemon=True)
    with _RUNNING_LOCK:
        _RUNNING.add(thread)
    thread.start()
    return thread


def running_builds() -> list[threading.Thread]:
    """The build threads of this process still running."""
    with _RUNNING_LOCK:
        return [thread for thread in _RUNNING if thread.is_alive()]


def wait_for_builds(timeout: float | None = None) -> bool:
    """Wait until no build thread of this process runs; ``False`` if some still does after
    ``timeout`` seconds (``None``: no limit). Builds started meanwhile are waited for too."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        threads = running_builds()
        if not threads:
            return True
        for thread in threads:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)
            if thread.is_alive():
                return False


def start_task(build: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """``build`` as a task of the running loop, registered for ``wait_for_build_tasks``."""
    task = asyncio.get_running_loop().create_task(build)
    _TASKS.add(task)
    return task


async def wait_for_build_tasks() -> None:
    """Await the builds still running as tasks of the running loop (each logs its own
    failure; none is raised here)."""
    loop = asyncio.get_running_loop()
    running = [task for task in list(_TASKS) if task.get_loop() is loop and not task.done()]
    await asyncio.gather(*running, return_exceptions=True)


async def in_daemon_thread(work: Callable[[], T], name: str) -> T:
    """``work()`` on a registered daemon thread, awaited. Cancelling the await leaves the
    thread to finish on its own (its result is dropped)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = work()
        except BaseException as raised:  # handed to the awaiting task, not lost in the thread
            error = raised
        # RuntimeError: the loop closed meanwhile, nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, error)

    start_daemon(run, name)
    return await future


class BuildState:
    """Whether one index's build is in flight, and what became of the last ones."""

    def __init__(
        self,
        name: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        retry_after: float = RETRY_AFTER,
    ) -> None:
        self.name = name
        self._clock = clock
        self._retry_after = retry_after
        self._changed = threading.Condition()
        self._building = False
        self._failed_at: float | None = None
        self.failures_in_a_row = 0
        self.started = 0
        """Builds started (each ``claim`` granted)."""

    @property
    def building(self) -> bool:
        return self._building

    def claim(self, *, now: bool = False) -> bool:
        """Take the right to build: ``False`` while another build runs, or (unless ``now``)
        within ``retry_after`` seconds of a failed one."""
        with self._changed:
            if self._building:
                return False
            if (
                not now
                and self._failed_at is not None
                and self._clock() - self._failed_at < self._retry_after
            ):
                return False
            self._building = True
            self.started += 1
            return True

    def release(self, error: BaseException | None = None) -> None:
        """End the build ``claim`` granted; ``error``: it failed (logged, retried later)."""
        with self._changed:
            self._building = False
            if error is None:
                self._failed_at = None
                self.failures_in_a_row = 0
            else:
                self._failed_at = self._clock()
                self.failures_in_a_row += 1
            first = self.failures_in_a_row == 1
            self._changed.notify_all()
        if error is not None:
            level = logging.WARNING if first else logging.DEBUG
            logger.log(
                level,
                "the local index of %s could not be built (searched in SQL meanwhile, "
                "tried again on a later search): %s",
                self.name,
                error,
                exc_info=(type(error), error, error.__traceback__),
            )

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no build is in flight; ``False`` if one still is after ``timeout``."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._building, timeout)
