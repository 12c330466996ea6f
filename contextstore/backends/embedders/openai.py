"""``OpenAIEmbedder``: any OpenAI-compatible ``/v1/embeddings`` endpoint, over plain HTTP.

Works with OpenAI itself and with the servers that speak its API (vLLM, Ollama, LM Studio,
llama.cpp, text-embeddings-inference, LiteLLM, ...). The standard library's ``urllib`` does
the HTTP, so the embedder needs no extra package.

* Batching: texts go out ``batch_size`` at a time, one request per batch; rows come back in
  the order of the texts whatever order the server lists them in (by ``index``).
* Timeouts: every request has ``timeout`` seconds, connection and reading included.
* Retries: a timeout, a connection failure, HTTP 429 or any 5xx is retried up to
  ``max_retries`` times, waiting ``backoff · 2^attempt`` seconds (capped at ``max_backoff``)
  or the server's ``Retry-After`` when it sends one in seconds. Other HTTP errors (a wrong
  key, an unknown model) fail at once: retrying cannot fix them.
* Dimension check: every vector must have ``dim`` numbers (when ``dim`` is given; otherwise
  the first response fixes it); a mismatch raises ``EmbeddingError`` naming both lengths, so
  a namespace never mixes vectors of two models.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from contextstore.errors import BackendUnavailableError, ContextStoreError, ValidationError

__all__ = ["EmbeddingError", "OpenAIEmbedder"]

_RETRIED_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class EmbeddingError(ContextStoreError):
    """The embedding service answered, but not with usable vectors (or refused the request)."""


class OpenAIEmbedder:
    """Embeds through ``POST {base_url}/embeddings`` with ``{"model": ..., "input": [...]}``.

    ``base_url`` is the API root including ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``).
    ``api_key`` (optional) is sent as a bearer token. ``dim`` is the expected vector length:
    sent as ``dimensions`` when ``send_dimensions`` is true (models that can shorten their
    vectors), and checked on every response. Raises ``ValidationError`` for a bad option,
    ``EmbeddingError`` for an unusable answer or a refused request, and
    ``BackendUnavailableError`` when the service cannot be reached after every retry.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        dim: int | None = None,
        send_dimensions: bool = False,
        batch_size: int = 64,
        timeout: float = 30.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValidationError("model", "must be a non-empty model name")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValidationError("base_url", f"must be an http(s) URL, got {base_url!r}")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise ValidationError("dim", f"must be a positive integer, got {dim!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValidationError("batch_size", f"must be a positive integer, got {batch_size!r}")
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ValidationError(
                "timeout", f"must be a positive number of seconds, got {timeout!r}"
            )
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValidationError("max_retries", f"must be an integer >= 0, got {max_retries!r}")
        if not (backoff >= 0 and max_backoff >= 0):
            raise ValidationError("backoff", "backoff and max_backoff must be >= 0")
        if send_dimensions and dim is None:
            raise ValidationError("dim", "send_dimensions needs the dimension to ask for")
        self._model = model.strip()
        self._url = base_url.rstrip("/") + "/embeddings"
        self._api_key = api_key
        self._dim = dim
        self._send_dimensions = send_dimensions
        self._batch_size = batch_size
        self._timeout = float(timeout)
        self._max_retries = max_retries
        self._backoff = float(backoff)
        self._max_backoff = float(max_backoff)
        self._sleep = sleep

    @property
    def registry_name(self) -> str:
        """The registry name: ``"openai:<model>"``."""
        return f"openai:{self._model}"

    @property
    def dim(self) -> int:
        """The vector length; asks the service once (embedding ``"dimension"``) if not given."""
        if self._dim is None:
            self.embed_many(["dimension"])
        assert self._dim is not None
        return self._dim

    def __repr__(self) -> str:
        # The identity the knowledge base records: model and dimension, not the URL, so
        # moving the same model behind another address does not call for re-embedding.
        return f"OpenAIEmbedder(model={self._model!r}, dim={self._dim})"

    def __call__(self, text: str) -> NDArray[np.float32]:
        """Embed one text (one request)."""
        row: NDArray[np.float32] = self.embed_many([text])[0]
        return row

    def embed_many(self, texts: Iterable[str]) -> NDArray[np.float32]:
        """Embed many texts, ``batch_size`` per request: float32 ``(n, dim)``, unit rows.

        Blank texts are not sent (many services refuse an empty input) and get zero rows.
        """
        batch = [text if isinstance(text, str) else "" for text in texts]
        filled = [i for i, text in enumerate(batch) if text.strip()]
        rows: list[NDArray[np.float64]] = []
        for start in range(0, len(filled), self._batch_size):
            chunk = [batch[i] for i in filled[start : start + self._batch_size]]
            rows.extend(self._request(chunk))
        if self._dim is None:
            if not rows:
                raise EmbeddingError("cannot learn the vector length from blank texts only")
            self._dim = rows[0].shape[0]
        result = np.zeros((len(batch), self._dim), dtype=np.float32)
        if rows:
            matrix = np.nan_to_num(np.stack(rows), nan=0.0, posinf=0.0, neginf=0.0)
            norms = np.linalg.norm(matrix, axis=1)
            matrix /= np.where(norms > 0.0, norms, 1.0)[:, None]
            result[filled] = matrix.astype(np.float32)
        return result

    def _request(self, inputs: Sequence[str]) -> list[NDArray[np.float64]]:
        body: dict[str, Any] = {"model": self._model, "input": list(inputs)}
        if self._send_dimensions:
            body["dimensions"] = self._dim
        payload = json.dumps(body).encode("utf-8", "surrogatepass")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        attempt = 0
        while True:
            request = urllib.request.Request(self._url, data=payload, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self._timeout) as response:
                    answer = response.read()
                return self._vectors(answer, len(inputs))
            except urllib.error.HTTPError as error:
                if error.code not in _RETRIED_STATUS or attempt >= self._max_retries:
                    detail = error.read(500).decode("utf-8", "replace")
                    raise EmbeddingError(
                        f"{self._url} answered HTTP {error.code}: {detail}"
                    ) from None
                wait = _retry_after(error.headers.get("Retry-After"))
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                if attempt >= self._max_retries:
                    raise BackendUnavailableError(
                        f"embedding service {self._url} unreachable after "
                        f"{attempt + 1} attempts: {getattr(error, 'reason', error)}"
                    ) from None
                wait = None
            if wait is None:
                wait = self._backoff * (2**attempt)
            self._sleep(min(wait, self._max_backoff))
            attempt += 1

    def _vectors(self, answer: bytes, expected: int) -> list[NDArray[np.float64]]:
        try:
            items = json.loads(answer)["data"]
            ordered = sorted(items, key=lambda item: int(item["index"]))
            vectors = [np.asarray(item["embedding"], dtype=np.float64) for item in ordered]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"{self._url} sent no embeddings list: {exc}") from None
        if len(vectors) != expected:
            raise EmbeddingError(f"{self._url} sent {len(vectors)} vectors for {expected} texts")
        for vector in vectors:
            if vector.ndim != 1:
                raise EmbeddingError(f"{self._url} sent an embedding that is not a list of numbers")
            wanted = self._dim if self._dim is not None else vectors[0].shape[0]
            if vector.shape[0] != wanted:
                raise EmbeddingError(
                    f"dimension mismatch: {self.registry_name} returned {vector.shape[0]} numbers, "
                    f"expected {wanted}"
                )
        return vectors


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the HTTP-date form is ignored: the backoff applies)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 and math.isfinite(seconds) else None
