"""JSON Lines read a bounded line at a time: an overlong line is refused unread."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from contextstore.core.jsonl import MAX_LINE_BYTES, escape_json_text, jsonl_lines
from contextstore.core.knowledge import parse_jsonl
from contextstore.core.lessons import LessonRecord, read_jsonl, write_jsonl
from contextstore.errors import ValidationError


class EndlessLine(io.RawIOBase):
    """A binary stream of one line that never ends, counting the bytes anyone read."""

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self.served = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        size = len(buffer)
        chunk = (self.prefix + b"a" * size)[:size] if self.served == 0 else b"a" * size
        buffer[:size] = chunk
        self.served += size
        return size


def test_an_endless_line_is_refused_after_the_bound_is_read() -> None:
    stream = io.BufferedReader(EndlessLine(b'{"entity_id": "a.b", "injection_form": "'))
    with pytest.raises(ValidationError) as raised:
        list(read_jsonl(stream))
    assert raised.value.field == "line 1"
    assert raised.value.message == (
        f"is longer than {MAX_LINE_BYTES:,} bytes, the longest line JSON Lines may have"
    )
    # The bound, its line ending and one buffer's read-ahead: never the rest of the line.
    assert stream.raw.served <= MAX_LINE_BYTES + 2 + io.DEFAULT_BUFFER_SIZE  # type: ignore[attr-defined]


@pytest.mark.parametrize("ending", ["\n", "\r\n", ""])
def test_a_line_of_exactly_the_bound_is_read_and_one_byte_more_is_not(ending: str) -> None:
    limit = 64
    fits = "x" * limit
    over = "y" * (limit + 1)
    stream = io.BytesIO(f"{fits}\n{fits}{ending}".encode())
    assert list(jsonl_lines(stream, limit)) == [(1, fits), (2, fits)]
    stream = io.BytesIO(f"{fits}\n{over}{ending}".encode())
    with pytest.raises(ValidationError) as raised:
        list(jsonl_lines(stream, limit))
    assert raised.value.field == "line 2"
    # Counted in UTF-8 bytes: 16 three-byte characters (48 bytes) fit, 22 (66) do not.
    assert list(jsonl_lines(["€" * 16], limit)) == [(1, "€" * 16)]
    with pytest.raises(ValidationError):
        list(jsonl_lines(["€" * 22], limit))


def test_lines_split_at_newline_only_and_bytes_not_utf8_name_their_line() -> None:
    text = "one\u2028two\x85three\rfour"
    stream = io.BytesIO(f"{text}\nsecond\r\n".encode())
    assert list(jsonl_lines(stream)) == [(1, text), (2, "second")]
    with pytest.raises(ValidationError) as raised:
        list(jsonl_lines(io.BytesIO(b"fine\nbad \xff byte\n")))
    assert (raised.value.field, raised.value.message) == ("line 2", "is not valid UTF-8 (byte 4)")


def test_lessons_and_documents_read_from_files_and_from_lines_alike(tmp_path: Path) -> None:
    record = LessonRecord("a.b", "Check the lag.", status="active", applies_to=("tag:ops",))
    exported = "".join(write_jsonl([record]))
    path = tmp_path / "lessons.jsonl"
    path.write_text(exported, encoding="utf-8")
    with path.open("rb") as binary, path.open(encoding="utf-8") as text:
        assert list(read_jsonl(binary)) == list(read_jsonl(text)) == [record]
    assert list(read_jsonl(exported.splitlines())) == [record]
    documents = tmp_path / "docs.jsonl"
    documents.write_bytes(
        b'{"source": "a.md", "text": "failover"}\n\n{"source": "b.md", "text": "x"}'
    )
    with documents.open("rb") as handle:
        assert [d.source for d in parse_jsonl(handle)] == ["a.md", "b.md"]


def test_exported_json_escapes_what_a_terminal_acts_on() -> None:
    value = {"form": "x\x1b]52;c;aGk=\x07 \x1b[2J \x9b \x7f \u2028 é"}
    encoded = escape_json_text(json.dumps(value, ensure_ascii=False))
    assert not any(0x7F <= ord(c) <= 0x9F or ord(c) < 0x20 for c in encoded)
    assert "é" in encoded and json.loads(encoded) == value
    record = LessonRecord("a.b", "x\x9b[31m", summary="\x1b]0;title\x07")
    line = "".join(write_jsonl([record]))
    assert "\x9b" not in line and "\x1b" not in line and "\x07" not in line
    assert list(read_jsonl([line])) == [record]
