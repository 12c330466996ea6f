"""embedder_named: every registered name, and one clear error for the rest."""

from __future__ import annotations

import pytest

from contextstore.backends.embedders import (
    OpenAIEmbedder,
    WordLlamaEmbedder,
    embedder_named,
)
from contextstore.core.embedding import HashingEmbedder
from contextstore.core.knowledge import embedder_name
from contextstore.errors import ValidationError


def test_names_build_their_embedders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "ftp://not-http")
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    hashing = embedder_named("hashing")
    assert isinstance(hashing, HashingEmbedder)
    assert hashing.dim == 256
    assert embedder_named("hashing", dim=32).dim == 32  # type: ignore[union-attr]
    assert isinstance(embedder_named(" WordLlama "), WordLlamaEmbedder)
    remote = embedder_named(
        "openai:text-embedding-3-small", dim=512, base_url="http://127.0.0.1:1/v1"
    )
    assert isinstance(remote, OpenAIEmbedder)
    assert remote.registry_name == "openai:text-embedding-3-small"
    assert repr(remote) == "OpenAIEmbedder(model='text-embedding-3-small', dim=512)"
    assert embedder_named("none") is None
    # The environment's base URL is used: an unusable one is refused naming the field.
    with pytest.raises(ValidationError) as error:
        embedder_named("openai:m")
    assert error.value.field == "base_url"
    assert embedder_named(None) is None


@pytest.mark.parametrize("name", ["bert", "openai:", "openai: ", "", "hash"])
def test_unknown_names_are_one_clear_error(name: str) -> None:
    with pytest.raises(ValidationError) as error:
        embedder_named(name)
    assert error.value.field == "embedder"
    assert "hashing, wordllama, openai:<model>, none" in str(error.value)


def test_a_non_string_name_is_refused() -> None:
    with pytest.raises(ValidationError):
        embedder_named(3)  # type: ignore[arg-type]


def test_recorded_identities_carry_the_dimension() -> None:
    # The knowledge base records an embedder by embedder_name(): two dimensions never match.
    assert HashingEmbedder().registry_name == "hashing"
    assert embedder_name(HashingEmbedder()) == "HashingEmbedder(dim=256)"
    assert embedder_name(HashingEmbedder(64)) == "HashingEmbedder(dim=64)"
    assert embedder_name(WordLlamaEmbedder(dim=128)) == "WordLlamaEmbedder(dim=128)"
    remote = OpenAIEmbedder("m", base_url="http://127.0.0.1:1/v1", dim=8)
    assert embedder_name(remote) == "OpenAIEmbedder(model='m', dim=8)"
