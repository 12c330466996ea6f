"""OpenAIEmbedder against a real local HTTP server: batching, retries, timeouts, dimensions."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from contextstore.backends.embedders import EmbeddingError, OpenAIEmbedder
from contextstore.core.embedding import HashingEmbedder
from contextstore.errors import BackendUnavailableError, ValidationError

REFERENCE = HashingEmbedder(dim=8)


@dataclass
class Script:
    """What the fake server answers: one entry per request, then 200s with real vectors."""

    statuses: list[int] = field(default_factory=list)
    stall_first: int = 0  # how many requests hang (until the test ends) before answering
    dim: int = 8
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def vectors_for(texts: list[str], dim: int) -> list[list[float]]:
    # Scaled by 3 so the client's normalisation is visible; reversed below to test ordering.
    return [(3.0 * HashingEmbedder(dim=dim)(text)).tolist() for text in texts]


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append(
                {"path": self.path, "auth": self.headers["Authorization"], **body}
            )
            number = len(script.requests)
            if number <= script.stall_first:
                script.release.wait(10)
                return
            if script.statuses:
                status = script.statuses.pop(0)
                if status != 200:
                    self.send_response(status)
                    self.send_header("Content-Length", "5")
                    self.end_headers()
                    self.wfile.write(b"nope!")
                    return
            data = [
                {"object": "embedding", "index": i, "embedding": vector}
                for i, vector in enumerate(vectors_for(body["input"], script.dim))
            ]
            answer = json.dumps({"object": "list", "data": data[::-1]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    finally:
        script.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def recorder() -> tuple[list[float], Callable[[float], None]]:
    waits: list[float] = []
    return waits, waits.append


def test_batches_keep_the_texts_order(server: tuple[str, Script]) -> None:
    url, script = server
    texts = [f"passage number {i} about replicas" for i in range(10)]
    embedder = OpenAIEmbedder("text-embed", base_url=url, api_key="k", dim=8, batch_size=4)
    matrix = embedder.embed_many(texts)
    assert [len(r["input"]) for r in script.requests] == [4, 4, 2]
    assert [r["input"] for r in script.requests][2] == texts[8:]
    assert {r["model"] for r in script.requests} == {"text-embed"}
    assert {r["path"] for r in script.requests} == {"/v1/embeddings"}
    assert {r["auth"] for r in script.requests} == {"Bearer k"}
    expected = np.stack([REFERENCE(text) for text in texts])
    np.testing.assert_allclose(matrix, expected, rtol=1e-6, atol=1e-7)
    assert matrix.dtype == np.float32
    assert embedder.registry_name == "openai:text-embed"


def test_blank_texts_are_not_sent_and_get_zero_rows(server: tuple[str, Script]) -> None:
    url, script = server
    embedder = OpenAIEmbedder("m", base_url=url, dim=8)
    matrix = embedder.embed_many(["", "real words", "   "])
    assert [r["input"] for r in script.requests] == [["real words"]]
    assert matrix[0].tolist() == [0.0] * 8
    assert matrix[2].tolist() == [0.0] * 8
    assert embedder.embed_many([]).shape == (0, 8)


def test_server_errors_are_retried_with_exponential_backoff(server: tuple[str, Script]) -> None:
    url, script = server
    script.statuses = [503, 500, 429]
    waits, sleep = recorder()
    embedder = OpenAIEmbedder("m", base_url=url, dim=8, backoff=0.25, sleep=sleep)
    vector = embedder("failover runbook")
    assert len(script.requests) == 4
    assert waits == [0.25, 0.5, 1.0]
    np.testing.assert_allclose(vector, REFERENCE("failover runbook"), rtol=1e-6, atol=1e-7)


def test_retries_give_up_as_unavailable(server: tuple[str, Script]) -> None:
    url, script = server
    script.statuses = [503] * 10
    waits, sleep = recorder()
    embedder = OpenAIEmbedder("m", base_url=url, dim=8, max_retries=2, sleep=sleep)
    with pytest.raises(EmbeddingError, match="HTTP 503"):
        embedder("text")
    assert len(script.requests) == 3
    assert waits == [0.5, 1.0]


def test_a_client_error_is_not_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.statuses = [401]
    waits, sleep = recorder()
    with pytest.raises(EmbeddingError, match="HTTP 401"):
        OpenAIEmbedder("m", base_url=url, dim=8, sleep=sleep)("text")
    assert len(script.requests) == 1
    assert waits == []


def test_a_request_that_times_out_is_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.stall_first = 1
    waits, sleep = recorder()
    embedder = OpenAIEmbedder("m", base_url=url, dim=8, timeout=0.5, sleep=sleep)
    vector = embedder("text")
    assert len(script.requests) == 2
    assert waits == [0.5]
    np.testing.assert_allclose(vector, REFERENCE("text"), rtol=1e-6, atol=1e-7)


def test_timeouts_without_retries_are_unavailable(server: tuple[str, Script]) -> None:
    url, script = server
    script.stall_first = 5
    embedder = OpenAIEmbedder("m", base_url=url, dim=8, timeout=0.5, max_retries=0)
    with pytest.raises(BackendUnavailableError, match="unreachable after 1 attempts"):
        embedder("text")
    assert len(script.requests) == 1


def test_a_dimension_mismatch_is_refused(server: tuple[str, Script]) -> None:
    url, script = server
    script.dim = 6
    with pytest.raises(EmbeddingError, match="returned 6 numbers, expected 8"):
        OpenAIEmbedder("m", base_url=url, dim=8).embed_many(["a text", "another"])


def test_the_dimension_is_learned_once_then_enforced(server: tuple[str, Script]) -> None:
    url, script = server
    embedder = OpenAIEmbedder("m", base_url=url, send_dimensions=False)
    assert embedder.dim == 8
    assert script.requests[0]["input"] == ["dimension"]
    script.dim = 16
    with pytest.raises(EmbeddingError, match="returned 16 numbers, expected 8"):
        embedder("text")


def test_dimensions_are_sent_when_asked(server: tuple[str, Script]) -> None:
    url, script = server
    OpenAIEmbedder("m", base_url=url, dim=8, send_dimensions=True)("text")
    assert script.requests[0]["dimensions"] == 8


def test_an_unreachable_service_is_unavailable() -> None:
    waits, sleep = recorder()
    # A port just released: nothing listens there, the connection is refused at once.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAIEmbedder(
        "m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, sleep=sleep
    )
    with pytest.raises(BackendUnavailableError, match="unreachable after 2 attempts"):
        embedder("text")
    assert waits == [0.5]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"model": " "}, "model"),
        ({"base_url": "ftp://x"}, "base_url"),
        ({"dim": 0}, "dim"),
        ({"batch_size": 0}, "batch_size"),
        ({"timeout": 0}, "timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"send_dimensions": True}, "dim"),
    ],
)
def test_bad_options_name_their_field(options: dict[str, Any], field: str) -> None:
    arguments: dict[str, Any] = {"model": "m", **options}
    with pytest.raises(ValidationError) as error:
        OpenAIEmbedder(**arguments)
    assert error.value.field == field
