"""The Lua scripts of ``redis/lua/``, loaded once, with their includes resolved.

A script may include a library file with a line ``--! include lib_<name>.lua``: the line is
replaced by that file's text. So the cache's get, the cache's put and the windows' record
are each written once, and both the single-purpose scripts (``cache_get.lua``, …) and the
run's two phase scripts (``run_read.lua``, ``run_write.lua``) are built from them. The SHA1
Redis knows a script by is that of the resolved text.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["Script", "script"]

_INCLUDE = re.compile(r"^--! include (\S+)$", re.MULTILINE)


def _read(name: str) -> str:
    return (
        resources.files("contextstore.backends.redis")
        .joinpath("lua")
        .joinpath(name)
        .read_text("utf-8")
    )


@dataclass(frozen=True, slots=True)
class Script:
    """One resolved script: ``name`` (its file), ``source`` (includes resolved), ``sha``."""

    name: str
    source: str
    sha: str


@functools.cache
def script(name: str) -> Script:
    """The script ``redis/lua/<name>``; each library is included at most once."""
    included: set[str] = set()

    def resolve(match: re.Match[str]) -> str:
        library = match.group(1)
        if library in included:
            return ""
        included.add(library)
        return _INCLUDE.sub(resolve, _read(library))

    source = _INCLUDE.sub(resolve, _read(name))
    sha = hashlib.sha1(source.encode("utf-8"), usedforsecurity=False).hexdigest()
    return Script(name, source, sha)
