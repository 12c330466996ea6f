"""``WordLlamaEmbedder``: static token embeddings from the ``wordllama`` wheel, fully offline.

The ``wordllama`` package ships its 256-dimension model (``l2_supercat``) inside its wheel;
no download is ever needed. Its loader looks for the tokenizer file in a ``tokenizer/``
folder beside the package, while the wheel has it in ``tokenizers/``; so the file is linked
(or copied) into a private temporary ``cache_dir/tokenizers/`` for the one load, with
downloads disabled. The temporary folder is removed once the model is in memory.

Loading takes about a second and a few tens of megabytes, so one model per process is shared
by every ``WordLlamaEmbedder`` of the same dimension.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from contextstore.errors import ConfigurationError, MissingExtraError, ValidationError

__all__ = ["WORDLLAMA_DIMS", "WordLlamaEmbedder"]

WORDLLAMA_DIMS = (64, 128, 256)
"""Dimensions the shipped 256-dimension model can be truncated to (Matryoshka training)."""

_CONFIG = "l2_supercat"
_MODELS: dict[int, Any] = {}
_MODELS_LOCK = threading.Lock()


@contextmanager
def _root_logger_kept() -> Iterator[None]:
    """Undo what an import does to the root logger: ``wordllama`` calls
    ``logging.basicConfig(level=INFO)`` when imported, which would print every INFO record of
    the application that loaded the embedder."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)


def _load(dim: int) -> Any:
    """The shared ``WordLlamaInference`` for ``dim``, loaded from the wheel's own files."""
    with _MODELS_LOCK:
        model = _MODELS.get(dim)
        if model is not None:
            return model
        try:
            with _root_logger_kept():
                import wordllama
                from wordllama import WordLlama
        except ImportError as exc:
            raise MissingExtraError("WordLlamaEmbedder", "wordllama", "embeddings") from exc
        package = Path(wordllama.__file__).parent
        tokenizer_name = getattr(WordLlama._wordllama, _CONFIG).tokenizer_config
        shipped = package / "tokenizers" / tokenizer_name
        if not shipped.is_file():
            raise ConfigurationError(
                f"the installed wordllama has no tokenizer file {tokenizer_name}; reinstall "
                "'contextstore[embeddings]'"
            )
        with tempfile.TemporaryDirectory(prefix="contextstore-wordllama-") as cache:
            (Path(cache) / "tokenizers").mkdir()
            linked = Path(cache) / "tokenizers" / tokenizer_name
            try:
                linked.symlink_to(shipped)
            except OSError:  # no symlinks (some Windows setups): a copy does as well
                shutil.copyfile(shipped, linked)
            try:
                model = WordLlama.load(
                    _CONFIG,
                    cache_dir=Path(cache),
                    dim=256,
                    trunc_dim=None if dim == 256 else dim,
                    disable_download=True,
                )
            except FileNotFoundError as exc:
                raise ConfigurationError(f"wordllama could not load its model: {exc}") from exc
        _MODELS[dim] = model
        return model


class WordLlamaEmbedder:
    """Average of WordLlama's token embeddings, unit length, float32 ``(dim,)``.

    Understands meaning beyond shared words ("fail over" is close to "failover", "promote the
    replica"), at a few microseconds per passage on a CPU. ``dim`` is 256 (default), 128 or
    64; anything else raises ``ValidationError("dim")``. Without the ``embeddings`` extra,
    construction raises ``MissingExtraError``. Blank text gives the zero vector. Never
    reaches the network.
    """

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or dim not in WORDLLAMA_DIMS:
            raise ValidationError("dim", f"must be one of 64, 128, 256, got {dim!r}")
        self._dim = dim
        self._model = _load(dim)

    @property
    def registry_name(self) -> str:
        """The registry name: ``"wordllama"``."""
        return "wordllama"

    @property
    def dim(self) -> int:
        """Length of every vector this embedder returns."""
        return self._dim

    def __repr__(self) -> str:
        return f"WordLlamaEmbedder(dim={self._dim})"

    def __call__(self, text: str) -> NDArray[np.float32]:
        """Embed one text."""
        row: NDArray[np.float32] = self.embed_many([text])[0]
        return row

    def embed_many(self, texts: Iterable[str]) -> NDArray[np.float32]:
        """Embed many texts: float32 ``(n, dim)``, unit rows (zero rows for blank text)."""
        batch = [text if isinstance(text, str) else "" for text in texts]
        if not batch:
            return np.zeros((0, self._dim), dtype=np.float32)
        # Blank texts are not sent: the model would average no tokens.
        filled = [i for i, text in enumerate(batch) if text.strip()]
        result = np.zeros((len(batch), self._dim), dtype=np.float32)
        if filled:
            vectors = np.asarray(
                self._model.embed([batch[i] for i in filled], norm=True), dtype=np.float32
            )
            result[filled] = np.nan_to_num(vectors, nan=0.0, posinf=0.0, neginf=0.0)
        return result
