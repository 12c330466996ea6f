"""Filter, rank and compose retrieved chunks into one context text. SPEC §1.5."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Chunk:
    """One retrieved passage: its text, where it came from, the retriever's score."""

    text: str
    source: str
    score: float = 0.0
    metadata: Mapping[str, Any] = field(default_factory=dict)
