"""The search half of ``KnowledgeBase``: plan a search, run its statement, rank its rows.

A lexical search ranks in the process-local index (``knowledge.index``) when the knowledge
base has one and it is current; else (the index then rebuilt in the background,
``knowledge.builds``) it is one statement in autocommit (one snapshot, one round trip, no
BEGIN or COMMIT); a hybrid or vector search adds one read transaction for the nearest chunks
(``knowledge.vectors``). ``plan`` does all the CPU work that grows with the query (analysis,
embedding, building and compiling the statement, ``knowledge.queries``), so the async
knowledge base runs it in a worker thread and only ``finish`` does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final, TypeVar

import numpy as np
import sqlalchemy as sa

from contextstore.backends.sql.database import tolerating_bytes, translate_errors
from contextstore.backends.sql.knowledge.config import ConfiguredKnowledge
from contextstore.backends.sql.knowledge.index import ATTEMPTS, LocalIndex, Snapshot
from contextstore.backends.sql.knowledge.queries import (
    SearchPlan,
    SearchStatements,
    generation_from,
    generation_statement,
    plan_search,
)
from contextstore.backends.sql.knowledge.settings import Active
from contextstore.backends.sql.knowledge.vectors import (
    MARGIN,
    HybridPlan,
    VectorQuery,
    describe,
    finish_hybrid,
    plan_hybrid,
    vector_backend,
    vector_candidates,
)
from contextstore.core.analysis import QueryAnalysis
from contextstore.core.analyzers import Analyzer
from contextstore.core.compose import Chunk
from contextstore.core.knowledge import validate_filters
from contextstore.core.ranking import RankingParameters, unit_vector
from contextstore.core.retrieval import SearchMode, search_mode
from contextstore.core.tokens import index_term
from contextstore.core.validation import check_integer
from contextstore.errors import ValidationError

__all__ = ["COMPILED_IN_PLACE_TERMS", "STALE_REPLANS", "KnowledgeSearch", "weighted_query_terms"]

# The most terms of a search statement ``plan_small`` builds and compiles where it is called
# (the async knowledge base: on the event loop, where a thread would cost the loop more in
# GIL hand-offs than the compilation); a larger one is left to a worker thread.
COMPILED_IN_PLACE_TERMS: Final = 16
# Plans one search makes at most when the namespace is reconfigured under it (each switch
# is a whole reindex, so a second one within a search is already unlikely).
STALE_REPLANS: Final = 3

T = TypeVar("T")


class KnowledgeSearch(ConfiguredKnowledge):
    """The search half of ``KnowledgeBase`` (which sets the attributes below)."""

    candidate_limit: int
    mode: SearchMode
    exact_vectors: bool
    parameters: RankingParameters
    local: LocalIndex | None
    _statements: SearchStatements
    _vector_backend: str | None

    def search(
        self,
        query: str,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
    ) -> list[Chunk]:
        """Up to ``top_k`` chunks for ``query``, best first: score, then source, then passage.

        Only chunks sharing a term with the query are returned (``[]`` for a blank query,
        ``top_k <= 0`` or an empty namespace). ``filters`` keep chunks whose document metadata
        matches every key (``contextstore.core.knowledge.validate_filters``). A query the embedder
        fails on is ranked by BM25 alone.

        ``mode`` (default: the knowledge base's) ranks as ``InMemoryRetriever`` does:
        ``lexical`` by BM25; ``vector`` by cosine over every chunk the filters allow; ``hybrid``
        fuses both over the lexical matches and the nearest chunks, which the database finds
        (``knowledge.vectors``), so a chunk sharing no word with the query can be found.
        """
        chosen = self.mode if mode is None else search_mode(mode)
        local = self.local
        if local is None or chosen == "vector":
            return self.finish(self.plan(query, top_k, filters, mode))
        found = self._local_search(local, query, top_k, filters)
        if found is not None:
            return found
        found = self.finish(self.plan(query, top_k, filters, mode))
        if self.needs_build(local):
            # Started once this answer is made, so its CPU work does not slow it down.
            local.start_build()
        return found

    def needs_build(self, local: LocalIndex) -> bool:
        """Whether a search just answered in SQL should start a build of ``local``: it has
        no current snapshot, and the namespace does not embed (no I/O)."""
        return local.snapshot is None and self._active().embed_fn is None

    def _local_search(
        self, local: LocalIndex, query: str, top_k: int, filters: Mapping[str, Any] | None
    ) -> list[Chunk] | None:
        """The local index's answer, or ``None``: search in SQL (an embedder, a namespace too
        large, or one written faster than the index follows)."""
        for _ in range(ATTEMPTS):
            request = self.lexical_request(query, top_k, filters)
            if request is None:
                return None
            terms, weights, checked = request
            if not terms or top_k <= 0:
                return []
            snapshot = local.snapshot
            if snapshot is None:
                return None  # never built, or stale: answered in SQL, built in the background
            if not self.agrees(local, snapshot, self.settings):
                continue
            ranked = snapshot.rank(terms, top_k, checked, weights)
            rows = self.guarded(partial(local.fetch, local.fetch_values(ranked, snapshot)))
            answer = local.answer(snapshot, ranked, rows)
            if answer is not None:
                return answer
            # ``answer`` dropped a stale snapshot (the loop then leaves the search to SQL), or
            # hid an unreadable text from this one (the loop ranks again).
        return None

    def wait_for_index(self, timeout: float | None = None) -> bool:
        """Wait until the local index describes the namespace as it is now (for tests, and a
        caller that would rather wait than have the next searches ranked in SQL).

        The build in flight, if any, is waited for; then, if the index is still missing or
        older than the namespace's generation, a build is started and waited for. ``True``
        once it is current; ``False`` without a local index (``local_index=False``), for a
        namespace of more than ``MAX_LOCAL_CHUNKS`` chunks, after ``timeout`` seconds
        (``None``: no limit), when the build failed (logged) or writes kept outrunning it,
        and for a namespace that embeds (searched in SQL: nothing is built). Reads the
        namespace's settings first, so raises as ``settings`` does.
        """
        if self.local is None or self.settings().embed_fn is not None:
            return False
        return self.local.refresh(timeout)

    def lexical_request(
        self, query: str, top_k: int, filters: Mapping[str, Any] | None
    ) -> tuple[tuple[str, ...], dict[str, int] | None, dict[str, tuple[Any, ...]]] | None:
        """The checked arguments of a lexical search: index terms, their weights (``None``:
        all 1) and the filters; ``None`` when the namespace embeds (a fused search)."""
        if not isinstance(query, str):
            raise ValidationError("query", f"must be a string, got {type(query).__name__}")
        check_integer(top_k, "top_k")
        checked = validate_filters(filters)
        active = self._active()
        if active.embed_fn is not None:
            return None
        weighted = weighted_query_terms(active.analyzer, query)
        terms = tuple(index_term(term) for term, _ in weighted)
        weights = None
        if active.analyzer.name != "simple":
            weights = {index_term(term): weight for term, weight in weighted}
        return terms, weights, checked

    def agrees(self, local: LocalIndex, snapshot: Snapshot, refresh: Callable[[], Any]) -> bool:
        """Whether ``snapshot`` was built with the settings queries are analysed with; if
        not, ``refresh`` (reads the settings) is called and a snapshot older than them
        dropped, and the caller analyses the query again."""
        if snapshot.settings_version == self._active().version:
            return True
        refresh()
        if self._active().version > snapshot.settings_version:
            local.drop(snapshot)
        return False

    def active_version(self) -> int:
        """The settings version queries are analysed for now (no I/O)."""
        return self._active().version

    @property
    def url(self) -> sa.URL:
        return self._engine.url

    def guarded(self, read: Callable[[], T]) -> T:
        """``read()`` with the database's errors translated, and SQLite text that is not
        UTF-8 read leniently."""

        def translated() -> T:
            with translate_errors(self._engine.url):
                return read()

        return tolerating_bytes(self._engine, translated)

    def finish(self, plan: SearchPlan | HybridPlan) -> list[Chunk]:
        """Run ``plan``'s statements (compiled already) and rank their rows: ``search`` after
        ``plan``. The async knowledge base plans in a worker thread and finishes on the loop."""
        lexical = plan.lexical if isinstance(plan, HybridPlan) else plan
        rows: Sequence[Any] = []
        # A plan made for other settings than the index's (a reconfigure switched it) is
        # made again: a search answers from one index, analysed as that index was.
        for _ in range(STALE_REPLANS):
            rows = self._lexical_rows(lexical)
            if lexical.statement is None or not self._stale(lexical, rows):
                break
            self.settings()
            plan = self.plan(*lexical.request)
            lexical = plan.lexical if isinstance(plan, HybridPlan) else plan
        if isinstance(plan, HybridPlan):
            return finish_hybrid(plan, rows, self._vectors, self.parameters)
        return lexical.finish(rows)

    def _lexical_rows(self, plan: SearchPlan) -> Sequence[Any]:
        if plan.statement is None:
            return []
        statement, values = plan.statement
        # One statement in autocommit: one snapshot (the statistics and the candidates agree)
        # and one round trip, with no BEGIN, COMMIT or ROLLBACK around it.

        def select(statement: Any, values: dict[str, Any]) -> Sequence[Any]:
            with translate_errors(self._engine.url):
                return statement.rows(values)  # type: ignore[no-any-return]

        return tolerating_bytes(self._engine, partial(select, statement, values))

    def _vectors(self, query: VectorQuery) -> tuple[list[Any], float]:
        backend = self.vector_backend()
        return self._read(lambda c: vector_candidates(c, backend, query))

    def vector_backend(self) -> str:
        """How this database finds vector candidates: ``sqlite-vec``, ``pgvector`` or
        ``exact scan`` (``knowledge.vectors``); read once."""
        if self._vector_backend is None:
            self._vector_backend = self._read(vector_backend)
        return self._vector_backend

    def describe_vectors(self) -> str:
        """How this database searches vectors, in words (``contextstore db check``)."""
        return self._read(describe)

    def plan(
        self,
        query: str,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
    ) -> SearchPlan | HybridPlan:
        """``search`` without the I/O: validated arguments, the query analysed and embedded
        (once), the one statement to run, compiled, and the pure ranking of its rows.

        ``search`` is ``finish(plan(…))``. All the CPU work that grows with the query is
        here, so an async caller runs it in a worker thread. Raises ``ValidationError`` like
        ``search``.
        """
        plan = self._plan(query, top_k, filters, mode, compile_up_to=None)
        assert plan is not None  # nothing left uncompiled: a plan always
        return plan

    def plan_small(
        self,
        query: str,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
    ) -> SearchPlan | HybridPlan | None:
        """``plan``, or ``None`` when it would build a statement of more than
        ``COMPILED_IN_PLACE_TERMS`` terms (tens of milliseconds): an async caller plans a
        short query on the loop, and a costly one in a thread."""
        return self._plan(query, top_k, filters, mode, compile_up_to=COMPILED_IN_PLACE_TERMS)

    def _plan(
        self,
        query: str,
        top_k: int,
        filters: Mapping[str, Any] | None,
        mode: SearchMode | None,
        *,
        compile_up_to: int | None,
    ) -> SearchPlan | HybridPlan | None:
        chosen = self.mode if mode is None else search_mode(mode)
        if not isinstance(query, str):
            raise ValidationError("query", f"must be a string, got {type(query).__name__}")
        check_integer(top_k, "top_k")
        checked = validate_filters(filters)
        active = self._active()
        weighted = weighted_query_terms(active.analyzer, query)
        terms = tuple(index_term(term) for term, _ in weighted)
        weights = None
        if active.analyzer.name != "simple":
            weights = {index_term(term): weight for term, weight in weighted}
        if chosen == "vector" and active.embedder is None:
            raise ValidationError("mode", "'vector' needs an embedder")
        unit = None
        if chosen != "lexical" and top_k > 0:
            unit = self._query_vector(query, active)
        search = partial(
            plan_search,
            self._statements,
            self.namespace,
            top_k=top_k,
            filters=checked,
            candidate_limit=self.candidate_limit,
            parameters=self.parameters,
            embedder=active.embedder,
            compile_up_to=compile_up_to,
            settings_version=active.version,
            weights=weights,
            request=(query, top_k, filters, mode),
        )
        if unit is None or active.embedder is None:
            # Lexical, or the query could not be embedded: BM25 alone (nothing for vector).
            return search(terms=() if chosen == "vector" else terms)
        vectors = VectorQuery(
            self.namespace,
            active.embedder,
            unit,
            checked,
            top_k + MARGIN,
            chosen,
            self.exact_vectors,
        )
        return plan_hybrid(search, terms, vectors)

    def retrieve(
        self,
        query: str,
        analysis: QueryAnalysis | None = None,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
    ) -> list[Chunk]:
        """``search`` in the default mode, for the ``Retriever`` protocol (``analysis`` is not
        read)."""
        return self.search(query, top_k, filters)

    def generation(self) -> int:
        """The namespace's knowledge generation: it grows with every change (0 before any).

        One primary-key read; a context composed at another generation is stale.
        """
        statement = generation_statement(self.namespace)
        # Alone in autocommit: one statement, one round trip, on every run of the engine.
        with translate_errors(self._engine.url), self._autocommit.connect() as c:
            return generation_from(c.execute(statement).first())

    def _query_vector(
        self, query: str, active: Active
    ) -> np.ndarray[Any, np.dtype[np.float32]] | None:
        if active.embed_fn is None:
            return None
        try:
            raw = np.asarray(active.embed_fn(query), dtype=np.float64).ravel()
        except Exception:
            return None
        if active.dimension is not None and raw.shape[0] != active.dimension:
            raise ValidationError(
                "embedder",
                f"{active.registry_name} returned a {raw.shape[0]}-dimension query vector; "
                f"namespace {self.namespace!r} records {active.dimension} dimensions",
            )
        return unit_vector(raw, raw.shape[0]) if raw.shape[0] > 0 else None


def weighted_query_terms(analyzer: Analyzer, query: str) -> tuple[tuple[str, int], ...]:
    """The query's terms and weights under the namespace's analyzer (the CPU work of a
    search's analysis, which an async search runs off the loop for a long query)."""
    return analyzer.weighted_query_terms(query)
