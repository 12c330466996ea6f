"""The shipped sample data: it parses, validates, is consistent, and exercises the engine."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources

import pytest

from contextstore.backends.embedders import WordLlamaEmbedder, embedder_named
from contextstore.core.analysis import QueryComplexity
from contextstore.core.analyzers import analyzer_named
from contextstore.core.embedding import HashingEmbedder
from contextstore.core.lessons import (
    MAX_INJECTION_FORM_BYTES,
    read_jsonl,
    record_from_json,
    write_jsonl,
)
from contextstore.core.matching import match
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.sample_data import (
    DEMO_KNOWLEDGE,
    DemoQuery,
    KnowledgeChoice,
    demo_corpus_lines,
    demo_documents,
    load_corpus,
    load_demo_queries,
    load_lessons,
    reference_documents,
    sample_retriever,
)
from tests.factories import make_analysis

TEAMS = {"support", "ops", "coding"}
KINDS = {"runbook", "policy", "guide", "architecture", "postmortem"}
DATA = resources.files("contextstore").joinpath("data")


# --- Corpus --------------------------------------------------------------------------------


def test_corpus_documents_are_well_formed() -> None:
    corpus = load_corpus()
    assert 40 <= len(corpus) <= 60
    for document in corpus:
        assert set(document) == {"source", "text", "metadata"}
        assert 400 <= len(document["text"]) <= 2500, document["source"]
        assert document["metadata"]["team"] in TEAMS
        assert document["metadata"]["kind"] in KINDS
        assert document["metadata"]["lang"] in {"en", "ar"}
        assert "lorem" not in document["text"].lower()
    assert len({document["source"] for document in corpus}) == len(corpus)


def test_corpus_covers_every_team_and_has_arabic_documents() -> None:
    corpus = load_corpus()
    assert {d["metadata"]["team"] for d in corpus} == TEAMS
    assert {d["metadata"]["kind"] for d in corpus} == KINDS
    arabic = [d for d in corpus if d["metadata"]["lang"] == "ar"]
    assert 4 <= len(arabic) <= 6
    for document in arabic:
        letters = [c for c in document["text"] if not c.isspace()]
        arabic_letters = [c for c in letters if "\u0600" <= c <= "\u06ff"]
        assert len(arabic_letters) / len(letters) > 0.5, document["source"]


def test_incidents_named_in_the_corpus_have_postmortems() -> None:
    corpus = load_corpus()
    postmortems = " ".join(d["source"] for d in corpus if d["metadata"]["kind"] == "postmortem")
    for document in corpus:
        for word in document["text"].replace("(", " ").replace(")", " ").split():
            if word.startswith("INC-") and word[4:8].isdigit():
                assert word[:8] in postmortems, (document["source"], word)


def test_loaders_return_fresh_objects() -> None:
    first = load_corpus()
    first[0]["text"] = "changed"
    assert load_corpus()[0]["text"] != "changed"


# --- Lessons -------------------------------------------------------------------------------


def test_lessons_parse_from_the_file_with_read_jsonl() -> None:
    with (
        resources.as_file(DATA.joinpath("lessons.jsonl")) as path,
        open(path, encoding="utf-8") as f,
    ):
        records = list(read_jsonl(f))
    assert 30 <= len(records) <= 40
    assert records == load_lessons()


def test_lessons_are_valid_and_well_shaped() -> None:
    lessons = load_lessons()
    ids = [lesson.entity_id for lesson in lessons]
    assert len(set(ids)) == len(ids)
    for lesson in lessons:
        parts = lesson.entity_id.split(".")
        assert len(parts) == 6 and parts[:2] == ["nw", "lessons"], lesson.entity_id
        assert parts[2] in TEAMS
        assert len(lesson.injection_form.encode("utf-8")) <= MAX_INJECTION_FORM_BYTES
        assert lesson.injection_form and lesson.summary and lesson.detail
        assert lesson.created_at is not None and lesson.created_at.year == 2026
        assert lesson.created_at.utcoffset() is not None
        assert lesson.updated_at is None
        assert lesson.applies_to
        for key in lesson.applies_to:
            if key.startswith("tag:"):
                assert key[4:] in TEAMS
            else:
                assert key.startswith("id:nw.prod."), key


def test_lessons_mix_statuses_and_severities() -> None:
    lessons = load_lessons()
    statuses = Counter(lesson.status for lesson in lessons)
    assert set(statuses) == {"active", "proposed", "retired", "superseded"}
    assert statuses["active"] > len(lessons) / 2
    assert 1 <= statuses["superseded"] <= 2
    assert {lesson.severity for lesson in lessons} == {"critical", "warning", "info"}


def test_superseded_lessons_point_at_existing_active_lessons() -> None:
    by_id = {lesson.entity_id: lesson for lesson in load_lessons()}
    superseded = [lesson for lesson in by_id.values() if lesson.status == "superseded"]
    assert superseded
    for lesson in superseded:
        assert lesson.superseded_by in by_id
        assert by_id[lesson.superseded_by].status == "active"
        successor = by_id[lesson.superseded_by]
        assert successor.created_at is not None and lesson.created_at is not None
        assert successor.created_at > lesson.created_at


def test_lessons_round_trip_through_json_lines() -> None:
    lessons = load_lessons()
    again = list(read_jsonl(write_jsonl(lessons)))
    assert again == lessons
    for line, record in zip(write_jsonl(lessons), lessons, strict=True):
        assert record_from_json(json.loads(line)) == record


# --- Demo queries --------------------------------------------------------------------------


def test_demo_queries_are_well_formed() -> None:
    queries = load_demo_queries()
    assert 20 <= len(queries) <= 30
    for query in queries:
        assert isinstance(query, DemoQuery)
        assert query.query.strip()
        assert set(query.tags) <= TEAMS and query.tags
        for entity_id in query.entity_ids:
            parts = entity_id.split(".")
            assert len(parts) == 6 and parts[:3] == ["nw", "prod", query.tags[0]], entity_id
            assert all(parts)


def test_demo_queries_mix_languages_roles_and_repeats() -> None:
    queries = load_demo_queries()
    arabic = [q for q in queries if any("\u0600" <= c <= "\u06ff" for c in q.query)]
    assert 3 <= len(arabic) <= 4
    assert {q.tags[0] for q in queries} == TEAMS
    repeated = [text for text, n in Counter(q.query for q in queries).items() if n > 1]
    assert len(repeated) >= 2
    assert any(q.filters for q in queries)
    lengths = [len(q.query.split()) for q in queries]
    assert min(lengths) <= 7 and max(lengths) > 20
    assert any(q.query.lower().startswith(("compare", "analyze", "evaluate")) for q in queries)


def test_demo_queries_span_every_complexity() -> None:
    from contextstore.core.analysis import RuleBasedQueryAnalyzer

    analyzer = RuleBasedQueryAnalyzer()
    seen = Counter(analyzer.analyze(q.query).complexity for q in load_demo_queries())
    assert set(seen) == set(QueryComplexity)


@pytest.mark.parametrize("query", load_demo_queries(), ids=lambda q: q.query[:40])
def test_each_demo_scope_matches_an_active_lesson(query: DemoQuery) -> None:
    candidates = [lesson.to_lesson() for lesson in load_lessons()]
    result = match(candidates, query.scope)
    assert result.matched_count >= 1
    active = {lesson.entity_id for lesson in load_lessons() if lesson.status == "active"}
    assert {item.entity_id for item in result.included} <= active


_RETRIEVERS: dict[str, InMemoryRetriever] = {}


def retriever(kind: str) -> InMemoryRetriever:
    if kind not in _RETRIEVERS:
        _RETRIEVERS[kind] = sample_retriever(HashingEmbedder() if kind == "hybrid" else None)
    return _RETRIEVERS[kind]


@pytest.mark.parametrize("kind", ["bm25", "hybrid"])
@pytest.mark.parametrize("query", load_demo_queries(), ids=lambda q: q.query[:40])
def test_each_demo_query_retrieves_a_chunk(query: DemoQuery, kind: str) -> None:
    chunks = retriever(kind).retrieve(
        query.query, make_analysis(query.query, budget=2000), 5, query.filters
    )
    assert chunks
    for chunk in chunks:
        for key, wanted in (query.filters or {}).items():
            options = wanted if isinstance(wanted, list) else [wanted]
            assert chunk.metadata[key] in options


def test_sample_retriever_indexes_every_document() -> None:
    retriever = sample_retriever()
    assert len(retriever) >= len(load_corpus())
    indexed = {
        chunk.source
        for chunk in retriever.retrieve("the", make_analysis("the", budget=2000), 10_000)
    }
    english = {d["source"] for d in load_corpus() if d["metadata"]["lang"] == "en"}
    assert english <= indexed


# --- The demo's knowledge base ---------------------------------------------------------------


def test_reference_documents_are_python_s_own_prose_and_well_formed() -> None:
    reference = reference_documents()
    assert len(reference) >= 1_000
    assert sum(len(document["text"]) for document in reference) >= 800_000
    sources = [document["source"] for document in reference]
    assert len(set(sources)) == len(sources)
    assert len({document["text"] for document in reference}) == len(reference)
    assert "reference/python-language/assert" in sources
    assert "reference/python/json.dumps" in sources
    for document in reference:
        assert document["source"].startswith(("reference/python/", "reference/python-language/"))
        assert len(document["text"]) >= 200
        assert document["metadata"] == {"team": "coding", "kind": "reference", "lang": "en"}
    reference[0]["metadata"]["team"] = "changed"  # fresh objects every call
    assert reference_documents() == reference_documents()
    assert reference_documents()[0]["metadata"]["team"] == "coding"
    demo = demo_documents()
    assert demo[: len(load_corpus())] == load_corpus()
    assert [json.loads(line) for line in demo_corpus_lines()] == demo


def test_the_demo_configuration_names_an_analyzer_and_an_embedder_that_exist() -> None:
    assert KnowledgeChoice(analyzer="english", embedder="wordllama") == DEMO_KNOWLEDGE
    assert analyzer_named(DEMO_KNOWLEDGE.analyzer).name == "english"
    assert isinstance(embedder_named(DEMO_KNOWLEDGE.embedder), WordLlamaEmbedder)


@pytest.fixture(scope="module")
def demo_knowledge_base() -> InMemoryRetriever:
    """The demo's documents searched in the demo's configuration."""
    return sample_retriever(
        embedder_named(DEMO_KNOWLEDGE.embedder),
        analyzer=DEMO_KNOWLEDGE.analyzer,
        documents=demo_documents(),
    )


@pytest.mark.parametrize(
    "question",
    [
        "How do I fail over Postgres?",  # the README's LangChain and LlamaIndex examples
        "How do I fail over the primary Postgres cluster?",  # the README's Python example
    ],
)
def test_the_readme_question_finds_the_failover_runbook_first(
    demo_knowledge_base: InMemoryRetriever, question: str
) -> None:
    found = demo_knowledge_base.retrieve(question, None, 3)
    assert found[0].source == "ops/runbook-postgres-failover.md"


def test_the_failover_runbook_needs_the_english_analyzer(
    demo_knowledge_base: InMemoryRetriever,
) -> None:
    # The runbook says "failover", never "fail over": the simple analyzer, alone or fused with
    # hashed n-grams, ranks other documents first; english joins "fail over" into "failover".
    question = "How do I fail over Postgres?"
    runbook = "ops/runbook-postgres-failover.md"
    documents = demo_documents()
    assert sample_retriever(documents=documents).retrieve(question, None, 1)[0].source != runbook
    hashing = sample_retriever(HashingEmbedder(), documents=documents)
    assert hashing.retrieve(question, None, 1)[0].source != runbook
    english = sample_retriever(analyzer="english", documents=documents)
    assert english.retrieve(question, None, 1)[0].source == runbook
    assert demo_knowledge_base.retrieve(question, None, 1)[0].source == runbook
