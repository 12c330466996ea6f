"""Hostile values through every route of a real server, on SQLite and PostgreSQL.

Paths, query parameters and bodies get NUL and other control characters, lone surrogates
(raw, escaped in JSON, or as bytes that are not UTF-8), integers far wider than a column,
long strings, many keys, many tags. Whatever arrives, the answer is never a 5xx: a refusal
is a 4xx with the error JSON, and the server logs no traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import (
    HUGE_INTEGERS,
    INTEGER,
    JSON_VALUE,
    MAPPING,
    SCALAR,
    STRINGS,
    TEXT,
    examples,
    maybe,
)
from tests.interfaces.service.server import Server

pytestmark = pytest.mark.slow

QUERY_PARAMETERS = {
    "/v1/lessons": ["status", "severity", "key", "tag", "limit", "offset"],
    "/v1/documents": ["prefix", "limit", "offset"],
    "/v1/metrics/report": [
        "since",
        "until",
        "worker_prefix",
        "complexity",
        "intent",
        "cache_hit",
        "lesson",
        "by",
    ],
    "/v1/lessons/stats": ["since", "until"],
}
PATH_ROUTES = [
    ("GET", "/v1/lessons/{}"),
    ("GET", "/v1/lessons/{}/history"),
    ("PATCH", "/v1/lessons/{}"),
    ("POST", "/v1/lessons/{}/activate"),
    ("POST", "/v1/lessons/{}/retire"),
    ("POST", "/v1/lessons/{}/reject"),
    ("POST", "/v1/lessons/{}/supersede"),
    ("GET", "/v1/documents/{}"),
    ("DELETE", "/v1/documents/{}"),
]


def encoded(text: str) -> str:
    """``text`` percent-encoded as UTF-8; a lone surrogate becomes bytes that are not UTF-8.

    At most 600 characters of it: a URL past the HTTP server's own limit on a request line
    is refused by that server in plain text, before the application sees it.
    """
    return quote(text[:600].encode("utf-8", "surrogatepass"), safe="")


def some_fields(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """A JSON object with some of ``fields``, now and then an unknown one, now and then not
    an object at all."""
    chosen = st.fixed_dictionaries({}, optional={**fields, "unknown": SCALAR})
    return st.one_of(chosen, chosen, chosen, JSON_VALUE)


SCOPE = maybe(some_fields({"tags": STRINGS, "entity_ids": STRINGS}))
BODIES: dict[str, st.SearchStrategy[Any]] = {
    "/v1/run": some_fields(
        {
            "query": maybe(TEXT),
            "scope": SCOPE,
            "filters": maybe(MAPPING),
            "override_budget": maybe(INTEGER),
        }
    ),
    "/v1/match": some_fields(
        {
            "scope": SCOPE,
            "options": maybe(some_fields({"k": INTEGER, "byte_budget": INTEGER, "order": TEXT})),
            "query": maybe(TEXT),
            "explain": maybe(st.booleans()),
        }
    ),
    "/v1/search": some_fields(
        {"query": maybe(TEXT), "top_k": maybe(INTEGER), "filters": maybe(MAPPING)}
    ),
    "/v1/lessons": some_fields(
        {
            "entity_id": maybe(TEXT),
            "injection_form": maybe(TEXT),
            "severity": maybe(TEXT),
            "status": maybe(TEXT),
            "applies_to": maybe(STRINGS),
            "summary": maybe(TEXT),
            "evidence": JSON_VALUE,
            "created_at": maybe(TEXT),
        }
    ),
    "/v1/documents": some_fields(
        {"source": maybe(TEXT), "text": maybe(TEXT), "metadata": maybe(MAPPING)}
    ),
    "/v1/lessons/propose": some_fields(
        {
            "entity_id": maybe(TEXT),
            "injection_form": maybe(TEXT),
            "severity": maybe(TEXT),
            "applies_to": maybe(STRINGS),
            "summary": maybe(TEXT),
            "evidence": maybe(some_fields({"query": maybe(TEXT), "run": JSON_VALUE})),
        }
    ),
}


def body_bytes(value: Any, raw: bool) -> bytes:
    """JSON of ``value``: escaped (surrogates as ``\\ud800``), or raw UTF-8 where a lone
    surrogate becomes bytes that are not UTF-8."""
    if not raw:
        return json.dumps(value).encode("ascii")
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def answered(response: httpx.Response) -> None:
    """Never a 5xx; a refusal carries the error JSON."""
    assert response.status_code < 500, (response.request.url, response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"type", "message", "field"}, error


@pytest.fixture
def owner(server: Server, fresh_namespace: str) -> Iterator[httpx.Client]:
    before = server.log.read_text()
    with server.client(server.key(fresh_namespace, "owner")) as client:
        added = client.post("/v1/documents", json={"source": "a.md", "text": "fail over postgres"})
        assert added.status_code == 201, added.text
        yield client
    assert "Traceback" not in server.log.read_text()[len(before) :]


QUERY_VALUES = st.one_of(HUGE_INTEGERS.map(str), TEXT, INTEGER.map(str))


@pytest.mark.parametrize(
    ("path", "name"), [(path, name) for path, names in QUERY_PARAMETERS.items() for name in names]
)
def test_each_query_parameter(owner: httpx.Client, path: str, name: str) -> None:
    @examples(default=6, ci=80)
    @given(value=QUERY_VALUES)
    def hostile(value: str) -> None:
        answered(owner.get(f"{path}?{name}={encoded(value)}"))

    hostile()


@pytest.mark.parametrize("path", list(QUERY_PARAMETERS))
def test_query_parameters_together(owner: httpx.Client, path: str) -> None:
    names = st.sampled_from([*QUERY_PARAMETERS[path], "unknown"])

    @examples(default=6, ci=100)
    @given(parameters=st.dictionaries(names, QUERY_VALUES, min_size=2, max_size=5))
    def hostile(parameters: dict[str, str]) -> None:
        query = "&".join(f"{name}={encoded(value)}" for name, value in parameters.items())
        answered(owner.get(f"{path}?{query}"))

    hostile()


@pytest.mark.parametrize(("method", "template"), PATH_ROUTES)
def test_path_parameters(owner: httpx.Client, method: str, template: str) -> None:
    @examples(default=6, ci=100)
    @given(
        value=TEXT,
        body=st.one_of(
            st.none(), st.just({"superseded_by": "a.b"}), st.just({"reason": "x"}), JSON_VALUE
        ),
    )
    def hostile(value: str, body: Any) -> None:
        content = None if body is None else body_bytes(body, raw=False)
        answered(owner.request(method, template.format(encoded(value)), content=content))

    hostile()


@pytest.mark.parametrize("path", list(BODIES))
def test_bodies(owner: httpx.Client, path: str) -> None:
    @examples(default=10, ci=150)
    @given(body=BODIES[path], raw=st.booleans())
    def hostile(body: Any, raw: bool) -> None:
        answered(owner.post(path, content=body_bytes(body, raw)))

    hostile()


@examples(default=8, ci=100)
@given(
    lines=st.lists(st.one_of(BODIES["/v1/documents"], JSON_VALUE, TEXT), max_size=6),
    raw=st.booleans(),
)
def test_json_lines_imports(owner: httpx.Client, lines: list[Any], raw: bool) -> None:
    body = b"\n".join(
        line.encode("utf-8", "surrogatepass") if isinstance(line, str) else body_bytes(line, raw)
        for line in lines
    )
    answered(owner.post("/v1/documents/import", content=body))
