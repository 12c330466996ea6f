"""A namespace's analyzer and embedder live in SQL: every process agrees, a reindex switches
at once, and a bad name or a conflicting process is refused naming the field."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from contextstore import connect
from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.config import ContextEngineConfig
from contextstore.core.embedding import HashingEmbedder
from contextstore.core.knowledge import validate_document
from contextstore.core.retrieval import InMemoryRetriever
from contextstore.errors import ValidationError
from contextstore.interfaces.cli import app
from contextstore.store.aio import connect_async
from tests import REPO_ROOT
from tests.backends.sql.test_knowledge import hits

DOCUMENTS = [
    ("The replica restarts after failing over to the standby.", "failover.md"),
    ("Runbooks describe restarting every service in order.", "runbooks.md"),
    ("Billing refunds are processed weekly by the support team.", "billing.md"),
]
# "restarting" meets "restarts" only once stemmed (english): simple finds runbooks.md alone.
QUERY = "restarting"


def rows(engine: sa.Engine, sql: str, **values: Any) -> list[Any]:
    with engine.connect() as connection:
        return list(connection.execute(sa.text(sql), values).all())


def sources(chunks: list[Any]) -> list[str]:
    return [chunk.source for chunk in chunks]


def found_by(chunks: list[Any]) -> list[str]:
    """The sources, in name order (which chunk ranks first is the ranking's business)."""
    return sorted(sources(chunks))


BOTH = ["failover.md", "runbooks.md"]


def filled(engine: sa.Engine, namespace: str, **options: Any) -> KnowledgeBase:
    base = KnowledgeBase(engine, namespace, **options)
    for text, source in DOCUMENTS:
        base.add(text, source)
    return base


def test_configure_reindexes_and_answers_as_memory_does(engine: sa.Engine) -> None:
    base = filled(engine, "conf")
    assert sources(base.search(QUERY)) == ["runbooks.md"]
    totals: list[int] = []
    steps: list[int] = []
    summary = base.configure(
        analyzer="english", embedder="hashing", progress=steps.append, total=totals.append
    )
    assert (totals, steps) == ([3], [3])  # the progress bar's total, then each batch
    assert (summary.analyzer, summary.embedder, summary.dimension) == ("english", "hashing", 256)
    assert (summary.version, summary.reanalysed, summary.reembedded) == (1, 3, 3)
    assert found_by(base.search(QUERY, 5)) == BOTH
    stored = rows(engine, "SELECT analyzer, embedder, dimension, version FROM knowledge_settings")
    assert stored == [("english", "hashing", 256, 1)]
    terms = rows(engine, "SELECT terms FROM chunks WHERE namespace = 'conf' ORDER BY id")
    assert terms[0][0] == "replica restart after fail over standbi"
    # Back to lexical only: vectors dropped, terms kept (the analyzer did not change).
    lexical = base.configure(embedder=None)
    assert (lexical.analyzer, lexical.embedder, lexical.reanalysed, lexical.version) == (
        "english",
        None,
        0,
        2,
    )
    assert rows(engine, "SELECT count(*) FROM chunks WHERE embedding IS NOT NULL") == [(0,)]
    # Lexically the reindexed namespace ranks as memory does with the same analyzer.
    memory = InMemoryRetriever(analyzer="english", mode="lexical")
    for text, source in DOCUMENTS:
        memory.add(text, source)
    found = base.search(QUERY, 5)
    assert found_by(found) == BOTH
    assert [(c.source, round(c.score, 9)) for c in found] == [
        (c.source, round(c.score, 9)) for c in memory.retrieve(QUERY, top_k=5)
    ]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"analyzer": "klingon"}, "analyzer"),
        ({"analyzer": 3}, "analyzer"),
        ({"embedder": "bert"}, "embedder"),
        ({"embedder": "openai:"}, "embedder"),
        ({"analyzer": "english", "embedder": "bert"}, "embedder"),
    ],
)
def test_a_bad_name_is_refused_naming_the_field_and_nothing_is_written(
    engine: sa.Engine, arguments: dict[str, Any], field: str
) -> None:
    base = filled(engine, "bad")
    before = rows(engine, "SELECT id, terms, embedding FROM chunks ORDER BY id")
    with pytest.raises(ValidationError) as caught:
        base.configure(**arguments)
    assert caught.value.field == field
    assert rows(engine, "SELECT count(*) FROM knowledge_settings") == [(0,)]
    assert rows(engine, "SELECT id, terms, embedding FROM chunks ORDER BY id") == before


def test_a_process_asking_for_other_settings_is_refused_naming_the_field(
    database_url: str,
) -> None:
    engine = create_database_engine(database_url)
    try:
        filled(engine, "clash").configure(analyzer="english", embedder="hashing")
        for options, field in [
            ({"analyzer": "simple"}, "analyzer"),
            ({"embedder": "wordllama"}, "embedder"),
            ({"embed_fn": HashingEmbedder(dim=16)}, "embedder"),
        ]:
            other = KnowledgeBase(engine, "clash", **options)
            with pytest.raises(ValidationError) as caught:
                other.search(QUERY)
            assert caught.value.field == field, options
            with pytest.raises(ValidationError) as caught:
                other.add("A new text.", "new.md")
            assert caught.value.field == field
        assert rows(engine, "SELECT count(*) FROM documents") == [(3,)]
        # The older ``embeddings`` setting asks for hashing, which is the namespace's.
        config = ContextEngineConfig.from_env()
        config.database_url, config.namespace = database_url, "clash"
        config.retrieval.embeddings = True
        with connect(config=config) as store:
            assert found_by(store.knowledge.search(QUERY, 5)) == BOTH
        config.retrieval.analyzer = "simple"
        with connect(config=config) as store, pytest.raises(ValidationError) as caught:
            store.knowledge.search(QUERY)
        assert caught.value.field == "analyzer"
    finally:
        engine.dispose()


READER = """
import json, sys
from contextstore import connect
store = connect(sys.argv[1], namespace=sys.argv[2])
found = store.knowledge.search(sys.argv[3], 5)
active = store.knowledge.settings()
print(json.dumps({"sources": sorted(c.source for c in found), "analyzer": active.analyzer.name,
                  "embedder": active.registry_name, "dimension": active.dimension}))
"""


def run_python(code: str, *arguments: str) -> Any:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    return json.loads(done.stdout)


def test_configure_from_one_process_is_seen_by_another(database_url: str) -> None:
    engine = create_database_engine(database_url)
    try:
        base = filled(engine, "shared")
        before = run_python(READER, database_url, "shared", QUERY)
        assert before == {
            "sources": ["runbooks.md"],
            "analyzer": "simple",
            "embedder": None,
            "dimension": None,
        }
        result = CliRunner().invoke(
            app,
            [
                "docs",
                "configure",
                "--analyzer",
                "english",
                "--embedder",
                "hashing",
                "--database-url",
                database_url,
                "--namespace",
                "shared",
                "--json",
            ],
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["version"] == 1
        after = run_python(READER, database_url, "shared", QUERY)
        assert after == {
            "sources": BOTH,
            "analyzer": "english",
            "embedder": "hashing",
            "dimension": 256,
        }
        # This process's knowledge base, built before, follows too.
        assert found_by(base.search(QUERY, 5)) == BOTH
        assert base.analyzer.name == "english"
    finally:
        engine.dispose()


def test_the_command_line_refuses_a_bad_name_with_one_line(database_url: str) -> None:
    result = CliRunner().invoke(
        app, ["docs", "configure", "--analyzer", "klingon", "--database-url", database_url]
    )
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: analyzer: unknown analyzer 'klingon'; expected one of simple, english"
    ]


SEARCHER = """
import json, os, sys, time
from contextstore import connect
url, namespace, out, stop = sys.argv[1:5]
store = connect(url, namespace=namespace)
with open(out, "w") as log:
    while True:
        stopping = os.path.exists(stop)
        found = store.knowledge.search("restarting", 3)
        log.write(json.dumps([time.time(), [c.source for c in found]]) + "\\n")
        log.flush()
        if stopping:
            break
"""


def test_searches_during_a_reindex_answer_from_the_old_index_then_the_new(
    database_url: str, tmp_path: Path
) -> None:
    """A real process searches in a loop while this one reindexes: every answer is the old
    index's or the new one's, old ones first, never a mix."""
    engine = create_database_engine(database_url)
    filler = [
        {"source": f"filler/{i:05d}.md", "text": f"Ticket {i} about billing refunds and plans."}
        for i in range(3000)
    ]
    try:
        base = filled(engine, "live")
        base.import_documents([validate_document(d["text"], d["source"]) for d in filler])
        old = sources(base.search(QUERY, 3))
        assert old == ["runbooks.md"]
        out, stop = tmp_path / "searches.jsonl", tmp_path / "stop"
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        searcher = subprocess.Popen(
            [sys.executable, "-c", SEARCHER, database_url, "live", str(out), str(stop)], env=env
        )
        try:
            deadline = time.monotonic() + 60
            while (not out.exists() or len(out.read_text().splitlines()) < 5) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.05)
            started = time.time()
            base.configure(analyzer="english")
            finished = time.time()
            time.sleep(0.3)
            stop.touch()
            searcher.wait(timeout=60)
        finally:
            if searcher.poll() is None:
                searcher.kill()
        new = sources(base.search(QUERY, 3))
        assert sorted(new) == BOTH
        log = [json.loads(line) for line in out.read_text().splitlines()]
        answers = [tuple(found) for _, found in log]
        assert set(answers) == {tuple(old), tuple(new)}
        first_new = answers.index(tuple(new))
        assert answers[first_new:] == [tuple(new)] * (len(answers) - first_new)
        during = [at for at, _ in log if started <= at <= finished]
        assert len(during) >= 3, (finished - started, len(log))
    finally:
        engine.dispose()


def test_the_async_store_configures_too(database_url: str) -> None:
    engine = create_database_engine(database_url)
    try:
        filled(engine, "aio")
    finally:
        engine.dispose()

    async def configure() -> tuple[Any, list[str]]:
        store = connect_async(database_url, namespace="aio")
        try:
            summary = await store.knowledge.configure(analyzer="english")
            return summary, found_by(await store.knowledge.search(QUERY, 5))
        finally:
            await store.aclose()

    summary, found = asyncio.run(configure())
    assert (summary.analyzer, summary.version, summary.reanalysed) == ("english", 1, 3)
    assert found == BOTH


def test_memory_keeps_its_configuration_in_process() -> None:
    memory = InMemoryRetriever(analyzer="simple", mode="hybrid")
    for text, source in DOCUMENTS:
        memory.add(text, source)
    assert sources(memory.retrieve(QUERY, top_k=5)) == ["runbooks.md"]
    memory.configure(analyzer="english", embedder="hashing")
    assert memory.analyzer.name == "english"
    assert found_by(memory.retrieve(QUERY, top_k=5)) == BOTH
    with pytest.raises(ValidationError) as caught:
        memory.configure(analyzer="klingon")
    assert caught.value.field == "analyzer"
    assert memory.analyzer.name == "english"


class ShortHashing:
    """Says it is ``hashing`` but returns 8 numbers: another dimension than recorded."""

    registry_name = "hashing"

    def __call__(self, text: str) -> Any:
        return HashingEmbedder(dim=8)(text)


def test_a_vector_of_another_dimension_is_refused_and_nothing_is_written(
    engine: sa.Engine,
) -> None:
    filled(engine, "dims").configure(embedder="hashing")
    before = rows(engine, "SELECT id, embedding FROM chunks ORDER BY id")
    short = KnowledgeBase(engine, "dims", embed_fn=ShortHashing())
    with pytest.raises(ValidationError) as caught:
        short.search(QUERY)
    assert caught.value.field == "embedder"
    assert "8-dimension" in str(caught.value) and "256 dimensions" in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        short.add("A text about restarting the replica.", "new.md")
    assert caught.value.field == "embedder"
    assert rows(engine, "SELECT count(*) FROM documents") == [(3,)]
    assert rows(engine, "SELECT id, embedding FROM chunks ORDER BY id") == before


ENGLISH_WORDS = [
    "failover",
    "failing",
    "fails",
    "restarting",
    "restarts",
    "runbooks",
    "runbook",
    "the",
    "of",
    "not",
    "over",
    "replica",
    "café",
    "x1",
    "الاسترداد",
]
english_text = st.lists(st.sampled_from(ENGLISH_WORDS), min_size=1, max_size=12).map(" ".join)
english_corpus = st.dictionaries(
    st.sampled_from([f"src-{i}" for i in range(10)]),
    st.lists(english_text, min_size=1, max_size=3).map("\n\n".join),
    min_size=1,
    max_size=8,
)
english_queries = st.lists(
    st.lists(st.sampled_from([*ENGLISH_WORDS, "absent"]), min_size=1, max_size=5).map(" ".join),
    min_size=1,
    max_size=3,
)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(corpus=english_corpus, queries=english_queries)
def test_an_english_namespace_ranks_as_memory_whether_written_or_reindexed(
    engine: sa.Engine, corpus: dict[str, str], queries: list[str]
) -> None:
    """Written through ``english`` from the start, or written ``simple`` and reconfigured:
    the same chunks, order and scores as an ``english`` ``InMemoryRetriever``."""
    memory = InMemoryRetriever(analyzer="english", mode="lexical", max_passage_chars=40)
    for source, text in corpus.items():
        memory.add(text, source)
    tag = uuid.uuid4().hex[:8]
    written = KnowledgeBase(engine, f"w_{tag}", analyzer="english", max_passage_chars=40)
    reindexed = KnowledgeBase(engine, f"r_{tag}", max_passage_chars=40)
    for base in (written, reindexed):
        base.import_documents([validate_document(text, source) for source, text in corpus.items()])
    reindexed.configure(analyzer="english")
    for query in queries:
        expected = hits(memory.retrieve(query, None, 6))
        assert hits(written.search(query, 6)) == expected, query
        assert hits(reindexed.search(query, 6)) == expected, query
