"""JSON Lines, read a line at a time with a bound on each line.

Lessons and documents are imported from JSON Lines. A line longer than ``MAX_LINE_BYTES``
is refused (``ValidationError("line N")``) as soon as that many bytes of it are read: from
a file, the rest of the line is never read, so a file of one endless line costs no more
memory than the bound. Lines are split at ``\\n`` only (a ``\\r`` before it is dropped),
never at U+2028 and the other characters ``str.splitlines`` breaks at.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final, Protocol

from contextstore.errors import ValidationError

MAX_LINE_BYTES: Final = 16 * 1024 * 1024
"""The longest JSON line accepted, in UTF-8 bytes without its line ending (16 MiB): a
lesson is a few kilobytes; a document's text up to this."""


# What json.dumps(ensure_ascii=False) leaves raw and should not: line breaks other than "\n"
# that str.splitlines and editors break at (U+0085, U+2028, U+2029), and DEL and the C1
# controls, which a terminal may act on. Escaped, a line stays one record and is safe to print.
_UNSAFE_IN_JSON: Final = str.maketrans(
    {chr(code): f"\\u{code:04x}" for code in (0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)}
)


def escape_json_text(encoded: str) -> str:
    """JSON text from ``json.dumps(..., ensure_ascii=False)`` with DEL, the C1 controls,
    U+2028 and U+2029 written as ``\\uXXXX`` escapes: the same JSON value, one line whoever
    splits it, and nothing a terminal acts on (JSON already escapes the C0 controls)."""
    return encoded.translate(_UNSAFE_IN_JSON)


class Readable(Protocol):
    """A file opened for reading, in binary or text mode."""

    def readline(self, size: int = -1, /) -> bytes | str: ...


def jsonl_lines(
    source: Readable | Iterable[str | bytes], limit: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, str]]:
    """``(number, text)`` of each line of ``source``, numbered from 1, blank ones included.

    ``source`` is a file (read with ``readline``, never more than ``limit`` + 2 bytes of a
    line at once) or any iterable of lines (``str`` or ``bytes``, each one line, its line
    ending optional). A line longer than ``limit`` UTF-8 bytes, or bytes that are not UTF-8,
    raise ``ValidationError("line N")``.
    """
    if isinstance(source, Iterable) and not _is_file(source):
        lines: Iterator[str | bytes] = iter(source)
    else:
        lines = _read_bounded(source, limit)
    for number, raw in enumerate(lines, start=1):
        yield number, _text(number, raw, limit)


def _is_file(source: object) -> bool:
    return callable(getattr(source, "readline", None))


def _read_bounded(source: Readable | Iterable[str | bytes], limit: int) -> Iterator[str | bytes]:
    readline = source.readline  # type: ignore[union-attr]
    number = 0
    while True:
        # Enough for the longest line and its "\r\n"; a longer one stops here, unread.
        line = readline(limit + 2)
        if not line:
            return
        number += 1
        ending = b"\n" if isinstance(line, bytes) else "\n"
        if len(line) >= limit + 2 and not line.endswith(ending):  # type: ignore[arg-type]
            _refuse(number, limit)
        yield line


def _text(number: int, raw: str | bytes, limit: int) -> str:
    if isinstance(raw, bytes):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            where = f"line {number}"
            raise ValidationError(where, f"is not valid UTF-8 (byte {error.start})") from None
    else:
        line = raw
    line = line.removesuffix("\n").removesuffix("\r")
    if _too_long(line, limit):
        _refuse(number, limit)
    return line


def _too_long(line: str | bytes, limit: int) -> bool:
    if len(line) <= limit // 4:  # no character is longer than 4 UTF-8 bytes
        return False
    size = len(line) if isinstance(line, bytes) else len(line.encode("utf-8", "surrogatepass"))
    return size > limit


def _refuse(number: int, limit: int) -> None:
    raise ValidationError(
        f"line {number}", f"is longer than {limit:,} bytes, the longest line JSON Lines may have"
    )
