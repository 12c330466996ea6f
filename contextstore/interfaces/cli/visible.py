"""Stored text shown on a terminal as text: control characters written visibly, never raw.

A lesson's form, a document or a worker's name can hold any character an API caller sent,
an escape sequence included (``ESC ] 52`` writes the clipboard, ``ESC [ 2 J`` clears the
screen). Everything the command line prints for people goes through ``visible``: each C0
control but line breaks and tabs, DEL and each C1 control becomes ``\\xNN``. Rich already
leaves markup in stored text alone (it is printed as ``Text``); ``VisibleControls``, pushed
on the command line's consoles, applies ``visible`` to whatever they render, so no command
can forget it. Machine formats keep values exact: JSON escapes these characters itself
(``escape_json_text``), and ``plain`` and ``csv`` escape them as ``visible`` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderableType, RenderHook
from rich.segment import Segment

_CONTROLS: Final = re.compile("[\x00-\x1f\x7f-\x9f]")


def visible(text: str, keep: str = "\n\t") -> str:
    """``text`` with every control character not in ``keep`` written as ``\\xNN``."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(
        lambda found: found.group() if found.group() in keep else f"\\x{ord(found.group()):02x}",
        text,
    )


class _Visible:
    """``renderable``, its text segments passed through ``visible`` (its own cursor and style
    controls, which Rich sends as control segments, untouched)."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for segment in console.render(self.renderable, options):
            if segment.control or not _CONTROLS.search(segment.text):
                yield segment
            else:
                yield Segment(visible(segment.text), segment.style)


class VisibleControls(RenderHook):
    """A render hook that shows control characters in everything a console prints."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Visible(renderable) for renderable in renderables]
