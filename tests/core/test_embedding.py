"""HashingEmbedder: deterministic, normalised, similarity-preserving, never raises."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.embedding import HashingEmbedder, normalize_text
from contextstore.errors import ValidationError

SAMPLES = [
    "Before failing over Postgres, confirm replica lag < 5 s.",
    "ما هي سياسة الاسترداد للاشتراكات السنوية؟",
    "refund refund refund",
    "x",
    "",
]

# Characters that stress tokenisation and hashing: lone surrogates, Arabic marks and folds,
# newlines, combining marks, NUL.
AWKWARD = st.sampled_from(
    ["\ud800", "\udfff", "\u064b", "إ", "آ", "ا", " ", "\n", "\x00", "\u0301"]
)
ANY_TEXT = st.text(st.one_of(st.characters(exclude_categories=()), AWKWARD), max_size=200)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


@pytest.mark.slow
def test_same_bytes_in_another_process_with_another_hash_seed() -> None:
    script = (
        "import json, sys\n"
        "from contextstore.core.embedding import HashingEmbedder\n"
        "texts = json.loads(sys.stdin.read())\n"
        "embed = HashingEmbedder()\n"
        "print(json.dumps([embed(t).tobytes().hex() for t in texts]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(SAMPLES),
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    embed = HashingEmbedder()
    assert json.loads(done.stdout) == [embed(t).tobytes().hex() for t in SAMPLES]


def test_shape_dtype_and_unit_norm() -> None:
    embed = HashingEmbedder(dim=64)
    vector = embed("TLS certificate rotation with cert-manager")
    assert vector.shape == (64,)
    assert vector.dtype == np.float32
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("text", ["", "   ", "!!! ... ---", "\n\n\t"])
def test_text_without_words_is_the_zero_vector(text: str) -> None:
    vector = HashingEmbedder()(text)
    assert vector.shape == (256,)
    assert not vector.any()


def test_similar_texts_are_closer_than_unrelated_ones() -> None:
    embed = HashingEmbedder()
    query = embed("postgres replica failover lag")
    related = embed("fail over the Postgres replica only when its lag is low")
    unrelated = embed("refund policy for annual plans")
    assert cosine(query, related) > cosine(query, unrelated) + 0.3


def test_character_grams_tolerate_inflection() -> None:
    embed = HashingEmbedder()
    assert cosine(embed("rollbacks"), embed("rollback")) > 0.5
    assert cosine(embed("rollbacks"), embed("invoices")) < 0.3


def test_arabic_diacritics_and_alef_forms_do_not_matter() -> None:
    embed = HashingEmbedder()
    assert np.array_equal(embed("قيّم الأداء"), embed("قيم الاداء"))
    assert np.array_equal(embed("إلغاء آلي"), embed("الغاء الي"))
    assert normalize_text("إأآ Ü") == "ااا ü"


def test_case_is_ignored() -> None:
    embed = HashingEmbedder()
    assert np.array_equal(embed("Redis Memory"), embed("redis memory"))


def test_embed_many_matches_single_calls() -> None:
    embed = HashingEmbedder(dim=128)
    texts = [*SAMPLES, "Redis queue memory pressure", "postmortem INC-2103"]
    matrix = embed.embed_many(texts)
    assert matrix.shape == (len(texts), 128)
    assert matrix.dtype == np.float32
    for row, text in zip(matrix, texts, strict=True):
        np.testing.assert_allclose(row, embed(text), atol=1e-6)


def test_embed_many_of_nothing_has_zero_rows() -> None:
    assert HashingEmbedder(dim=32).embed_many([]).shape == (0, 32)


def test_repeated_words_count_sublinearly() -> None:
    embed = HashingEmbedder()
    once = embed("refund invoice")
    many = embed("refund refund refund refund invoice")
    # Still clearly about both words: 4 repetitions do not drown "invoice".
    assert cosine(many, embed("invoice")) > 0.25
    assert cosine(once, many) > 0.8


@pytest.mark.parametrize("dim", [0, -1, 2.5, True, "256"])
def test_dim_must_be_a_positive_integer(dim: object) -> None:
    with pytest.raises(ValidationError) as raised:
        HashingEmbedder(dim=dim)  # type: ignore[arg-type]
    assert raised.value.field == "dim"


def test_the_word_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("contextstore.core.embedding._MAX_CACHED_WORDS", 10)
    embed = HashingEmbedder()
    before = embed("alpha beta")
    embed(" ".join(f"word{i}" for i in range(50)))
    assert len(embed._cache) <= 10
    assert np.array_equal(embed("alpha beta"), before)


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT)
def test_never_raises_and_is_zero_or_unit(text: str) -> None:
    vector = HashingEmbedder(dim=32)(text)
    assert vector.shape == (32,)
    assert np.isfinite(vector).all()
    norm = float(np.linalg.norm(vector))
    assert norm == 0.0 or norm == pytest.approx(1.0, abs=1e-5)


@settings(max_examples=100, deadline=None)
@given(st.lists(ANY_TEXT, max_size=8))
def test_embed_many_never_raises(texts: list[str]) -> None:
    matrix = HashingEmbedder(dim=16).embed_many(texts)
    assert matrix.shape == (len(texts), 16)
    assert np.isfinite(matrix).all()
