"""API keys: generation, the key file, verification, revocation, and ``contextstore keys``."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from contextstore.errors import ConfigurationError, NotFoundError, ValidationError
from contextstore.interfaces.apikeys import (
    KeyRing,
    Principal,
    add_key,
    keys_path,
    read_entries,
    revoke_key,
    split_key,
)
from contextstore.interfaces.cli import app


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "keys.json"


def test_a_key_verifies_to_its_namespace_and_role(path: Path) -> None:
    key, entry = add_key(path, "alpha", "admin", label="ops")
    ring = KeyRing(path)
    assert ring.verify(key) == Principal(key_id=entry.id, namespace="alpha", role="admin")
    assert key.startswith(f"csk_{entry.id}_")
    assert len(key) == len("csk_") + 12 + 1 + 43
    assert split_key(key) == (entry.id, key.split("_", 2)[2])


def test_the_file_holds_salted_hashes_never_the_key(path: Path) -> None:
    key_one, one = add_key(path, "alpha", "agent")
    key_two, two = add_key(path, "alpha", "agent")
    text = path.read_text()
    for key in (key_one, key_two):
        assert key not in text
        assert key.split("_", 2)[2] not in text
    assert one.salt != two.salt and one.hash != two.hash
    document = json.loads(text)
    assert document["version"] == 1
    assert [entry["id"] for entry in document["keys"]] == [one.id, two.id]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_wrong_keys_verify_to_nothing(path: Path) -> None:
    key, entry = add_key(path, "alpha", "agent")
    secret = key.split("_", 2)[2]
    ring = KeyRing(path)
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for wrong in [
        f"csk_{entry.id}_{flipped}",
        f"csk_{'f' * 12}_{secret}",
        key.upper(),
        key + "x",
        secret,
        "",
        f"Bearer {key}",
    ]:
        assert ring.verify(wrong) is None


def test_revocation_is_seen_without_a_reload_call(path: Path) -> None:
    key, entry = add_key(path, "alpha", "agent")
    other, _ = add_key(path, "beta", "admin")
    ring = KeyRing(path)
    assert ring.verify(key) is not None
    assert revoke_key(path, key).id == entry.id  # by the key itself
    assert ring.verify(key) is None
    assert ring.verify(other) is not None
    revoke_key(path, other.split("_")[1])  # by its id
    assert ring.verify(other) is None
    assert len(ring) == 0


def test_refusals_name_the_field(path: Path) -> None:
    with pytest.raises(ValidationError) as refused:
        add_key(path, "alpha", "root")
    assert refused.value.field == "role"
    with pytest.raises(ValidationError) as refused:
        add_key(path, "a{b}", "agent")
    assert refused.value.field == "namespace"
    with pytest.raises(ValidationError) as refused:
        add_key(path, "", "agent")
    assert refused.value.field == "namespace"
    with pytest.raises(ValidationError) as refused:
        revoke_key(path, "csk_mistyped_secret")
    assert refused.value.field == "id_or_key"
    assert "secret" not in str(refused.value)
    with pytest.raises(NotFoundError):
        revoke_key(path, "0123456789ab")
    assert not path.exists()


def test_a_malformed_file_is_refused(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path.write_text('{"version": 1, "keys": [{"id": "zz"}]}')
    with pytest.raises(ConfigurationError):
        KeyRing(path)
    path.write_text("not json")
    with pytest.raises(ConfigurationError):
        read_entries(path)
    monkeypatch.delenv("CONTEXTSTORE_API_KEYS", raising=False)
    with pytest.raises(ConfigurationError):
        keys_path(None)


def test_concurrent_adds_lose_no_key(path: Path) -> None:
    keys: list[str] = []

    def add() -> None:
        for _ in range(10):
            keys.append(add_key(path, "alpha", "agent")[0])

    threads = [threading.Thread(target=add) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ring = KeyRing(path)
    assert len(read_entries(path)) == 40
    assert all(ring.verify(key) is not None for key in keys)


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyRing, str]:
    path = tmp_path_factory.mktemp("ring") / "keys.json"
    key, _ = add_key(path, "fuzz", "agent")
    return KeyRing(path), key


@given(text=st.text() | st.builds(lambda s: f"csk_{'0' * 12}_{s}", st.text()))
def test_any_string_is_safe_to_present(ring: tuple[KeyRing, str], text: str) -> None:
    keys, key = ring
    assert split_key(text) is None or text.startswith("csk_")
    assert keys.verify(text) is None
    assert keys.verify(key) is not None


# -- the command line -------------------------------------------------------------------------


def test_keys_commands(path: Path) -> None:
    runner = CliRunner()
    added = runner.invoke(app, ["keys", "add", "--namespace", "alpha", "--role", "agent",
                                "--file", str(path), "--label", "ci"])  # fmt: skip
    assert added.exit_code == 0, added.output
    key = added.stdout.splitlines()[-1]
    assert added.stdout == key + "\n"  # alone on the last (and only) line of stdout
    assert "shown only now" in added.stderr
    entry = read_entries(path)[0]
    assert KeyRing(path).verify(key) == Principal(entry.id, "alpha", "agent")

    listed = runner.invoke(app, ["keys", "list", "--file", str(path), "--json"])
    assert listed.exit_code == 0
    rows = json.loads(listed.stdout)
    assert rows == [
        {"id": entry.id, "namespace": "alpha", "role": "agent",
         "created_at": entry.created_at, "label": "ci"}
    ]  # fmt: skip
    table = runner.invoke(app, ["keys", "list", "--file", str(path)])
    assert entry.id in table.stdout
    assert key.split("_", 2)[2] not in table.stdout + listed.stdout

    revoked = runner.invoke(app, ["keys", "revoke", key, "--file", str(path)])
    assert revoked.exit_code == 0
    assert f"revoked key {entry.id}" in revoked.stdout
    assert read_entries(path) == []

    again = runner.invoke(app, ["keys", "revoke", entry.id, "--file", str(path)])
    assert again.exit_code == 1
    assert again.stderr.startswith("error:") and again.stderr.count("\n") == 1
    bad_role = runner.invoke(app, ["keys", "add", "--namespace", "a", "--role", "root",
                                   "--file", str(path)])  # fmt: skip
    assert bad_role.exit_code == 2
    assert "role" in bad_role.stderr


def test_serve_refuses_too_many_workers_in_one_line() -> None:
    many = CliRunner().invoke(app, ["serve", "--workers", "1000"])
    assert many.exit_code == 2
    assert "--workers" in many.stderr
