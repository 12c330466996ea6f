"""WordLlamaEmbedder: loads from the wheel with the network impossible, and finds meaning."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from contextstore.backends.embedders import WordLlamaEmbedder
from contextstore.backends.embedders import wordllama as module
from contextstore.core.embedding import Embedder
from contextstore.errors import ValidationError


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every attempt to open a connection raises (and is recorded)."""
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("the network is disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    # A fresh load, not one cached by an earlier test.
    monkeypatch.setattr(module, "_MODELS", {})
    yield attempts
    assert attempts == []


def test_loads_and_embeds_without_the_network(no_network: list[Any]) -> None:
    embedder = WordLlamaEmbedder()
    vector = embedder("How do I fail over Postgres?")
    assert vector.shape == (256,)
    assert vector.dtype == np.float32
    assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-5)
    assert isinstance(embedder, Embedder)
    assert embedder.registry_name == "wordllama"
    assert embedder.dim == 256


def test_similar_meaning_scores_higher_than_shared_topic() -> None:
    embedder = WordLlamaEmbedder()
    query = embedder("How do I fail over Postgres?")
    passages = embedder.embed_many(
        [
            "Failover runbook: promote the standby with pg_ctl promote, then repoint clients.",
            "Refund policy: customers are refunded within fourteen days of purchase.",
            "Rotate the TLS certificates of the load balancer every ninety days.",
        ]
    )
    similarities = passages @ query
    assert int(np.argmax(similarities)) == 0
    assert similarities[0] > similarities[1] + 0.1


def test_batches_equal_single_texts_and_blank_is_zero() -> None:
    embedder = WordLlamaEmbedder()
    texts = ["replica lag alert", "", "disk full on the primary"]
    matrix = embedder.embed_many(texts)
    assert matrix.shape == (3, 256)
    assert matrix[1].tolist() == [0.0] * 256
    np.testing.assert_allclose(matrix[0], embedder(texts[0]), rtol=1e-5, atol=1e-6)
    assert embedder.embed_many([]).shape == (0, 256)


def test_shorter_dimensions_and_bad_ones() -> None:
    assert WordLlamaEmbedder(dim=64)("replica").shape == (64,)
    with pytest.raises(ValidationError) as error:
        WordLlamaEmbedder(dim=100)
    assert error.value.field == "dim"


@pytest.mark.slow
def test_loading_leaves_the_applications_logging_alone() -> None:
    # wordllama configures the root logger at INFO when imported; a fresh interpreter shows
    # whether that reaches the application.
    script = (
        "import logging\n"
        "from contextstore.backends.embedders import WordLlamaEmbedder\n"
        "WordLlamaEmbedder().embed_many(['fail over'])\n"
        "root = logging.getLogger()\n"
        "print(root.level, len(root.handlers))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert run.stdout == f"{logging.WARNING} 0\n"
    assert run.stderr == ""
