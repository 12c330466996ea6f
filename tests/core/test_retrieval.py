"""InMemoryRetriever: BM25 scores, fusion, filters, passages, bounds, threads, fuzzing."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.compose import Chunk
from contextstore.core.embedding import HashingEmbedder
from contextstore.core.retrieval import InMemoryRetriever, Retriever, split_passages, tokenize
from contextstore.errors import ValidationError
from contextstore.sample_data import load_corpus, sample_retriever
from tests.factories import make_analysis


def ask(
    retriever: InMemoryRetriever, query: str, top_k: int = 5, filters: dict[str, Any] | None = None
) -> list[Chunk]:
    return retriever.retrieve(query, make_analysis(query), top_k, filters)


def sources(chunks: list[Chunk]) -> list[str]:
    return [chunk.source for chunk in chunks]


# --- BM25 ----------------------------------------------------------------------------------


def tiny() -> InMemoryRetriever:
    retriever = InMemoryRetriever()
    retriever.add("apple banana apple", "d0")  # 3 tokens
    retriever.add("banana cherry", "d1")  # 2 tokens
    retriever.add("cherry date elderberry fig", "d2")  # 4 tokens
    return retriever


def test_bm25_scores_match_the_formula_by_hand() -> None:
    # N = 3, avgdl = (3 + 2 + 4) / 3 = 3, k1 = 1.5, b = 0.75.
    # idf(apple)  = ln(1 + (3 - 1 + 0.5) / (1 + 0.5)) = ln(8/3)
    # idf(cherry) = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6)
    # d0: tf(apple)=2,  |d|=3: 2·2.5 / (2 + 1.5·(0.25 + 0.75·3/3)) = 5 / 3.5   = 10/7
    # d1: tf(cherry)=1, |d|=2: 1·2.5 / (1 + 1.5·(0.25 + 0.75·2/3)) = 2.5/2.125 = 20/17
    # d2: tf(cherry)=1, |d|=4: 1·2.5 / (1 + 1.5·(0.25 + 0.75·4/3)) = 2.5/2.875 = 20/23
    expected = {
        "d0": math.log(8 / 3) * 10 / 7,
        "d1": math.log(1.6) * 20 / 17,
        "d2": math.log(1.6) * 20 / 23,
    }
    chunks = ask(tiny(), "apple cherry")
    assert sources(chunks) == ["d0", "d1", "d2"]
    for chunk in chunks:
        assert chunk.score == pytest.approx(expected[chunk.source], rel=1e-12)


def test_bm25_parameters_are_used() -> None:
    retriever = InMemoryRetriever(k1=1.2, b=0.0)
    retriever.add("apple banana apple", "d0")
    retriever.add("banana cherry", "d1")
    retriever.add("cherry date elderberry fig", "d2")
    # b = 0: no length normalisation, d1 and d2 score the same for "cherry".
    chunks = ask(retriever, "cherry")
    assert sources(chunks) == ["d1", "d2"]
    assert chunks[0].score == pytest.approx(math.log(1.6) * 2.2 / 2.2)
    assert chunks[0].score == chunks[1].score


def test_a_repeated_query_term_counts_once() -> None:
    assert ask(tiny(), "apple apple apple")[0].score == ask(tiny(), "apple")[0].score


def test_stop_words_are_ignored_unless_the_query_has_nothing_else() -> None:
    retriever = InMemoryRetriever()
    retriever.add("the cat sat on the mat", "cat")
    retriever.add("the dog barked at the postman", "dog")
    assert sources(ask(retriever, "what is the cat")) == ["cat"]
    assert sources(ask(retriever, "the")) == ["cat", "dog"]


def test_statistics_cover_the_whole_index_not_the_filtered_part() -> None:
    retriever = InMemoryRetriever()
    retriever.add("cherry pie", "a", {"team": "x"})
    retriever.add("cherry jam", "b", {"team": "y"})
    retriever.add("plum jam", "c", {"team": "y"})
    unfiltered = {c.source: c.score for c in ask(retriever, "cherry")}
    filtered = ask(retriever, "cherry", filters={"team": "y"})
    assert sources(filtered) == ["b"]
    assert filtered[0].score == unfiltered["b"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What is the replica lag limit for a Postgres failover?", "runbook-postgres"),
        ("redis queue cluster memory noeviction", "redis"),
        ("How do I roll back a Shipyard deploy?", "ops/runbook-deploy-rollback.md"),
        ("refund policy for annual plans", "support/refund-policy.md"),
        ("lost 2FA device only admin", "support/2fa-recovery.md"),
        ("feature flag expiry Beacon", "coding/feature-flags.md"),
        ("CVSS security patch deadline", "coding/dependency-upgrade-policy.md"),
        ("ما هي سياسة الاسترداد للاشتراكات السنوية؟", "support/ar/refund-policy-mena.md"),
        ("حذف الحساب وتصدير البيانات", "support/ar/data-export-and-deletion.md"),
        ("تصعيد التذكرة إلى فريق العمليات", "support/ar/escalation-matrix-mena.md"),
    ],
)
def test_bm25_ranks_the_obvious_document_first(query: str, expected: str) -> None:
    top = ask(shared_sample(), query, top_k=1)
    assert top and expected in top[0].source


_SAMPLE: list[InMemoryRetriever] = []


def shared_sample() -> InMemoryRetriever:
    if not _SAMPLE:
        _SAMPLE.append(sample_retriever())
    return _SAMPLE[0]


# --- Normalisation and tokens --------------------------------------------------------------


def test_tokens_are_lowercased_normalised_and_stripped_of_the_article() -> None:
    assert tokenize("Rotate the TLS-certs, a b") == ["rotate", "the", "tls", "certs"]
    assert tokenize("الاسترداد") == ["استرداد"]
    assert tokenize("وبالتالي") == tokenize("وبالتالي")  # stable
    assert tokenize("قيّم الأداء") == tokenize("قيم الاداء")
    # Light stemming is blind: "الغاء" (cancellation) loses a root "ال" too, but documents
    # and queries lose it alike, so they still meet.
    assert tokenize("إلغاء") == tokenize("الغاء") == ["غاء"]
    assert tokenize("الى") == ["الى"]  # at least three letters are kept
    assert tokenize("") == []


def test_arabic_query_with_diacritics_finds_plain_text() -> None:
    retriever = InMemoryRetriever()
    retriever.add("سياسة الاسترداد للاشتراكات السنوية", "ar")
    retriever.add("refund policy", "en")
    assert sources(ask(retriever, "سِيَاسَة استرداد")) == ["ar"]


# --- Fusion --------------------------------------------------------------------------------


def table_embedder(table: dict[str, list[float]]) -> Callable[[str], np.ndarray]:
    def embed(text: str) -> np.ndarray:
        return np.asarray(table.get(text, [0.0, 0.0]), dtype=np.float64)

    return embed


FUSION_DOCS = {
    "repair repair repair bicycles": [0.0, 1.0],
    "engine noise at idle": [1.0, 0.0],
    "bread recipe": [0.0, 1.0],
}


def fusion_retriever(embed_fn: Callable[[str], np.ndarray] | None) -> InMemoryRetriever:
    retriever = InMemoryRetriever(embed_fn)
    for number, text in enumerate(FUSION_DOCS):
        retriever.add(text, f"d{number}")
    return retriever


def test_fusion_changes_the_ranking_and_follows_the_formula() -> None:
    assert sources(ask(fusion_retriever(None), "engine repair")) == ["d0", "d1"]
    bm25 = {c.source: c.score for c in ask(fusion_retriever(None), "engine repair")}

    embed = table_embedder({**FUSION_DOCS, "engine repair": [1.0, 0.0]})
    fused = ask(fusion_retriever(embed), "engine repair")
    assert sources(fused) == ["d1", "d0"]
    # min-max: bm25 d0 → 1, d1 → bm25[d1]/bm25[d0], d2 → 0; cosine d1 → 1, others → 0.
    scores = {c.source: c.score for c in fused}
    assert scores["d0"] == pytest.approx(0.6)
    assert scores["d1"] == pytest.approx(0.6 * bm25["d1"] / bm25["d0"] + 0.4)


def test_fusion_can_find_a_passage_without_any_keyword() -> None:
    embed = table_embedder({**FUSION_DOCS, "motor": [1.0, 0.0]})
    assert ask(fusion_retriever(None), "motor") == []
    assert sources(ask(fusion_retriever(embed), "motor")) == ["d1"]


def test_keyword_weight_one_is_pure_bm25_order() -> None:
    embed = table_embedder({**FUSION_DOCS, "engine repair": [1.0, 0.0]})
    retriever = InMemoryRetriever(embed, keyword_weight=1.0)
    for number, text in enumerate(FUSION_DOCS):
        retriever.add(text, f"d{number}")
    assert sources(ask(retriever, "engine repair")) == ["d0", "d1"]


def test_hashing_embedder_fusion_on_the_sample_corpus() -> None:
    hybrid = sample_retriever(HashingEmbedder())
    top = ask(hybrid, "rollbacks of shipyard releases", top_k=3)
    assert top[0].source == "ops/runbook-deploy-rollback.md"
    assert all(0.0 < c.score <= 1.0 for c in top)


def test_an_embed_fn_failing_on_the_query_falls_back_to_bm25(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def embed(text: str) -> np.ndarray:
        if text == "engine repair":
            raise RuntimeError("model offline")
        return np.asarray(FUSION_DOCS[text])

    chunks = ask(fusion_retriever(embed), "engine repair")
    assert sources(chunks) == ["d0", "d1"]
    assert "BM25 only" in caplog.text or "BM25" in caplog.text


def test_an_embed_fn_failing_on_passages_does_not_break_retrieval() -> None:
    def embed(text: str) -> np.ndarray:
        raise RuntimeError("model offline")

    assert sources(ask(fusion_retriever(embed), "engine repair")) == ["d0", "d1"]


def test_a_query_vector_of_the_wrong_shape_falls_back_to_bm25() -> None:
    embed = table_embedder({**FUSION_DOCS, "engine repair": [1.0, 0.0, 0.0]})
    assert sources(ask(fusion_retriever(embed), "engine repair")) == ["d0", "d1"]


def test_passages_are_embedded_once_and_in_batches() -> None:
    class CountingEmbedder:
        def __init__(self) -> None:
            self.inner = HashingEmbedder(dim=32)
            self.batches: list[int] = []
            self.single = 0

        def __call__(self, text: str) -> np.ndarray:
            self.single += 1
            return self.inner(text)

        def embed_many(self, texts: list[str]) -> np.ndarray:
            self.batches.append(len(texts))
            return self.inner.embed_many(texts)

    embed = CountingEmbedder()
    retriever = InMemoryRetriever(embed)
    retriever.add("first document about postgres", "a")
    retriever.add("second document about redis", "b")
    ask(retriever, "postgres")
    ask(retriever, "redis")
    retriever.add("third document about tls", "c")
    assert sources(ask(retriever, "tls"))[0] == "c"
    assert embed.batches == [2, 1]
    assert embed.single == 3  # one per query


# --- Filters, bounds, order ----------------------------------------------------------------


def filtered() -> InMemoryRetriever:
    retriever = InMemoryRetriever()
    retriever.add("postgres failover runbook", "ops-1", {"team": "ops", "kind": "runbook"})
    retriever.add("postgres failover postmortem", "ops-2", {"team": "ops", "kind": "postmortem"})
    retriever.add("postgres questions from customers", "sup-1", {"team": "support"})
    retriever.add("postgres migrations", "code-1", {"team": "coding", "kind": "guide"})
    return retriever


def test_filters_require_every_key_to_match() -> None:
    chunks = ask(filtered(), "postgres", filters={"team": "ops", "kind": "runbook"})
    assert sources(chunks) == ["ops-1"]


def test_a_list_in_a_filter_means_any_of() -> None:
    chunks = ask(filtered(), "postgres", filters={"team": ["support", "coding"]})
    assert sorted(sources(chunks)) == ["code-1", "sup-1"]


def test_a_chunk_without_the_filter_key_is_not_eligible() -> None:
    chunks = ask(filtered(), "postgres", filters={"kind": ["runbook", "guide", "postmortem"]})
    assert "sup-1" not in sources(chunks)


def test_filters_nothing_matches_give_no_chunks() -> None:
    assert ask(filtered(), "postgres", filters={"team": "finance"}) == []
    assert ask(filtered(), "postgres", filters={"team": []}) == []


def test_empty_filters_mean_no_filtering() -> None:
    assert len(ask(filtered(), "postgres", filters={})) == 4
    assert len(filtered().retrieve("postgres", make_analysis("postgres"), 5, None)) == 4


def test_filter_values_that_cannot_be_compared_do_not_raise() -> None:
    retriever = InMemoryRetriever()
    retriever.add("postgres", "a", {"vector": np.array([1, 2])})
    assert ask(retriever, "postgres", filters={"vector": 1}) == []


def test_top_k_bounds_the_result() -> None:
    assert len(ask(filtered(), "postgres", top_k=2)) == 2
    assert ask(filtered(), "postgres", top_k=0) == []
    assert ask(filtered(), "postgres", top_k=-3) == []


def test_only_positive_scores_are_returned() -> None:
    chunks = ask(filtered(), "failover", top_k=10)
    assert sources(chunks) == ["ops-1", "ops-2"]
    assert all(chunk.score > 0 for chunk in chunks)


def test_ties_keep_insertion_order() -> None:
    retriever = InMemoryRetriever()
    for name in ["first", "second", "third"]:
        retriever.add("same words here", name)
    assert sources(ask(retriever, "words")) == ["first", "second", "third"]


def test_empty_index_and_blank_queries_give_nothing() -> None:
    assert ask(InMemoryRetriever(), "anything") == []
    assert ask(InMemoryRetriever(HashingEmbedder()), "anything") == []
    assert ask(filtered(), "") == []
    assert ask(filtered(), "   ?!") == []
    assert ask(fusion_retriever(HashingEmbedder()), "") == []


# --- Documents and passages ----------------------------------------------------------------


def test_long_documents_become_passages_with_metadata() -> None:
    paragraphs = [
        f"Paragraph {n}. " + " ".join(f"word{n}x{i}." for i in range(60)) for n in range(4)
    ]
    text = "# Title\n\n" + "\n\n".join(paragraphs)
    retriever = InMemoryRetriever()
    count = retriever.add(text, "long.md", {"team": "ops", "passage": "ignored"})
    assert count == len(retriever) > 1
    chunks = ask(retriever, "word3x59", top_k=10)
    assert len(chunks) == 1
    assert chunks[0].metadata == {"team": "ops", "passage": count - 1}
    assert chunks[0].source == "long.md"


def test_split_passages_packs_paragraphs_and_cuts_long_ones_at_sentences() -> None:
    assert split_passages("  short text  ") == ["short text"]
    assert split_passages(" \n\n ") == []
    packed = split_passages("# Heading\n\nBody one.\n\n" + "x" * 30, max_chars=40)
    assert packed == ["# Heading\n\nBody one.", "x" * 30]
    sentences = " ".join(f"Sentence number {i} ends here." for i in range(40))
    pieces = split_passages(sentences, max_chars=200)
    assert all(len(piece) <= 200 for piece in pieces)
    assert all(piece.endswith(".") for piece in pieces)
    assert " ".join(pieces) == sentences
    giant = "a" * 450
    assert [len(p) for p in split_passages(giant, max_chars=200)] == [200, 200, 50]


def test_long_paragraphs_are_cut_into_verbatim_slices() -> None:
    steps = "\n".join(f"{n}. Run step number {n} of the procedure" for n in range(1, 30))
    pieces = split_passages(steps, max_chars=120)
    assert len(pieces) > 1
    assert all(len(piece) <= 120 and piece in steps for piece in pieces)
    # Cut after a sentence or at a line break, never between "12." and its text.
    assert all(piece[0].isdigit() for piece in pieces)
    assert "\n".join(pieces) == steps


def test_sample_passages_stay_near_the_target_size() -> None:
    passages = [p for doc in load_corpus() for p in split_passages(doc["text"])]
    assert len(passages) == len(shared_sample())
    # 20..4000 is what composition keeps (docs/design/composition.md); 800 is the target maximum.
    assert all(20 <= len(passage) <= 800 for passage in passages)


def test_blank_documents_add_nothing() -> None:
    retriever = InMemoryRetriever()
    assert retriever.add("   \n\n  ", "blank") == 0
    assert len(retriever) == 0


def test_add_documents_accepts_tuples_and_mappings() -> None:
    retriever = InMemoryRetriever()
    added = retriever.add_documents(
        [
            ("alpha text", "a"),
            ("beta text", "b", {"team": "ops"}),
            {"text": "gamma text", "source": "c", "metadata": {"team": "support"}},
            {"text": "delta text", "source": "d"},
        ]
    )
    assert added == 4
    assert ask(retriever, "beta")[0].metadata == {"team": "ops", "passage": 0}
    assert sources(ask(retriever, "text", filters={"team": "support"})) == ["c"]


@pytest.mark.parametrize(
    "document",
    [{"text": "no source"}, ("only text",), "a bare string", ("t", "s", "not a mapping"), 42],
)
def test_malformed_documents_are_refused(document: object) -> None:
    with pytest.raises(ValidationError):
        InMemoryRetriever().add_documents([document])  # type: ignore[list-item]


def test_add_refuses_non_string_text_and_source() -> None:
    with pytest.raises(ValidationError):
        InMemoryRetriever().add(b"bytes", "s")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        InMemoryRetriever().add("text", None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [{"keyword_weight": 1.5}, {"keyword_weight": -0.1}, {"k1": -1.0}, {"k1": math.inf},
     {"b": 2.0}, {"max_passage_chars": 0}],
)  # fmt: skip
def test_bad_parameters_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        InMemoryRetriever(**kwargs)  # type: ignore[arg-type]


def test_returned_metadata_is_a_copy() -> None:
    retriever = InMemoryRetriever()
    retriever.add("postgres", "a", {"team": "ops"})
    first = ask(retriever, "postgres")[0]
    first.metadata["team"] = "changed"  # type: ignore[index]
    assert ask(retriever, "postgres")[0].metadata["team"] == "ops"


def test_it_is_a_retriever() -> None:
    assert isinstance(InMemoryRetriever(), Retriever)


def test_adds_after_a_retrieve_are_seen() -> None:
    retriever = tiny()
    assert ask(retriever, "grape") == []
    retriever.add("grape juice", "d3")
    assert sources(ask(retriever, "grape")) == ["d3"]


# --- Threads -------------------------------------------------------------------------------


def test_concurrent_retrieves_agree() -> None:
    retriever = sample_retriever(HashingEmbedder())
    expected = sources(ask(retriever, "postgres failover lag", top_k=5))
    retriever.add("an extra document about nothing in particular", "extra")  # dirty again
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(20):
                results.append(sources(ask(retriever, "postgres failover lag", top_k=5)))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 160
    assert all(result == expected for result in results)


def test_adds_racing_retrieves_never_break_them() -> None:
    retriever = InMemoryRetriever(HashingEmbedder(dim=32))
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                for chunk in ask(retriever, "document number"):
                    assert chunk.source.startswith("doc-")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(4)]
    for thread in readers:
        thread.start()
    for n in range(200):
        retriever.add(f"document number {n}", f"doc-{n}")
    stop.set()
    for thread in readers:
        thread.join()
    assert not errors
    # Every document matches "document", so none may be normalised away as the weakest.
    assert len(ask(retriever, "document", top_k=1000)) == 200


# --- Fuzzing -------------------------------------------------------------------------------

# Pieces that stress the tokeniser: lone surrogates, Arabic marks, folds and the article,
# paragraph breaks, stop words, noise punctuation, words that are in the sample corpus.
AWKWARD = st.sampled_from(
    ["\ud800", "\udfff", "\u064b", "إ", "ال", " ", "\n\n", ".", "the", "*****", "postgres"]
)
ANY_TEXT = st.lists(
    st.one_of(st.text(st.characters(exclude_categories=()), max_size=10), AWKWARD), max_size=12
).map("".join)
FILTERS = st.none() | st.dictionaries(
    st.sampled_from(["team", "kind", "lang", "passage", "missing"]),
    st.one_of(st.text(max_size=5), st.integers(), st.lists(st.text(max_size=5), max_size=3)),
    max_size=3,
)
_FUZZ = [sample_retriever(), sample_retriever(HashingEmbedder())]


@settings(max_examples=200, deadline=None)
@given(query=ANY_TEXT, top_k=st.integers(-2, 50), filters=FILTERS, hybrid=st.booleans())
def test_retrieve_never_raises(
    query: str, top_k: int, filters: dict[str, object] | None, hybrid: bool
) -> None:
    chunks = _FUZZ[int(hybrid)].retrieve(query, make_analysis(query), top_k, filters)
    assert len(chunks) <= max(top_k, 0)
    scores = [chunk.score for chunk in chunks]
    assert scores == sorted(scores, reverse=True)
    assert all(score > 0 and math.isfinite(score) for score in scores)


@settings(max_examples=50, deadline=None)
@given(documents=st.lists(ANY_TEXT, max_size=5), query=ANY_TEXT)
def test_any_documents_can_be_indexed_and_searched(documents: list[str], query: str) -> None:
    retriever = InMemoryRetriever(HashingEmbedder(dim=16))
    for number, text in enumerate(documents):
        retriever.add(text, f"d{number}")
    assert len(ask(retriever, query, top_k=10)) <= 10


def test_unhashable_metadata_and_filter_values_compare_by_equality() -> None:
    retriever = InMemoryRetriever()
    retriever.add("postgres one", "list", {"labels": ["db", "ops"]})
    retriever.add("postgres two", "plain", {"labels": "db"})
    assert sources(ask(retriever, "postgres", filters={"labels": [["db", "ops"]]})) == ["list"]
    assert sources(ask(retriever, "postgres", filters={"labels": ["db"]})) == ["plain"]
    assert ask(retriever, "postgres", filters={"labels": [{"db": 1}]}) == []


def test_numbers_filter_by_value_equality() -> None:
    retriever = InMemoryRetriever()
    retriever.add("postgres one", "one", {"tier": 1})
    retriever.add("postgres two", "two", {"tier": 2})
    assert sources(ask(retriever, "postgres", filters={"tier": 1.0})) == ["one"]
    assert sources(ask(retriever, "postgres", filters={"passage": 0, "tier": [2, 3]})) == ["two"]
