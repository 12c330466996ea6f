"""Run async objects from sync test bodies, so one contract test covers both flavours.

``Blocking(target, runner)`` exposes ``target``'s coroutine methods as plain methods that
run to completion on ``runner``'s event loop (the loop the target's clients belong to).
Everything else passes through unchanged.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any


class Blocking:
    def __init__(self, target: Any, runner: asyncio.Runner) -> None:
        self._target = target
        self._runner = runner

    @property
    def target(self) -> Any:
        return self._target

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._runner.run(attribute(*args, **kwargs))

        return call
