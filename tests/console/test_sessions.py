"""Signed session values and CSRF tokens: exact acceptance, refusal of anything altered."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore.console.sessions import (
    ENV_CONSOLE_SECRET,
    SESSION_SECONDS,
    SIGNIN_SECONDS,
    Session,
    Signer,
    load_secret,
    new_nonce,
)
from contextstore.errors import ConfigurationError

SIGNER = Signer(b"s" * 32)
OTHER = Signer(b"t" * 32)
KEY_ID = "0123456789ab"
NOW = 1_800_000_000


def test_a_session_value_reads_back_until_it_expires() -> None:
    nonce = new_nonce()
    value = SIGNER.session_value(KEY_ID, NOW, nonce)
    expected = Session(key_id=KEY_ID, issued=NOW, nonce=nonce)
    assert SIGNER.read_session(value, NOW) == expected
    assert SIGNER.read_session(value, NOW + SESSION_SECONDS - 1) == expected
    assert SIGNER.read_session(value, NOW + SESSION_SECONDS) is None
    assert SIGNER.read_session(value, NOW - 1) is None  # issued in the future
    assert OTHER.read_session(value, NOW) is None
    assert SIGNER.read_session(None, NOW) is None
    assert SIGNER.read_session("", NOW) is None


def test_changing_any_part_of_a_session_refuses_it() -> None:
    value = SIGNER.session_value(KEY_ID, NOW)
    key_id, issued, nonce, mac = value.split(".")
    for altered in (
        f"ba9876543210.{issued}.{nonce}.{mac}",
        f"{key_id}.{int(issued) + 1}.{nonce}.{mac}",
        f"{key_id}.{issued}.{new_nonce()}.{mac}",
        f"{key_id}.{issued}.{nonce}.{mac[:-1]}{'A' if mac[-1] != 'A' else 'B'}",
        value + ".",
    ):
        assert SIGNER.read_session(altered, NOW) is None, altered


@given(st.text(max_size=200))
def test_arbitrary_cookie_values_never_raise_and_never_pass(value: str) -> None:
    assert SIGNER.read_session(value, NOW) is None
    assert SIGNER.read_signin(value, NOW) is None


def test_csrf_tokens_bind_one_nonce() -> None:
    nonce = new_nonce()
    token = SIGNER.csrf_token(nonce)
    assert SIGNER.csrf_valid(nonce, token)
    assert not SIGNER.csrf_valid(new_nonce(), token)
    assert not OTHER.csrf_valid(nonce, token)
    assert not SIGNER.csrf_valid(nonce, None)
    assert not SIGNER.csrf_valid(nonce, "")
    assert not SIGNER.csrf_valid(None, token)
    assert not SIGNER.csrf_valid(nonce, token + "x")
    assert not SIGNER.csrf_valid(nonce, "é" * 43)


def test_the_signin_cookie_names_its_nonce_for_an_hour() -> None:
    nonce = new_nonce()
    value = SIGNER.signin_value(nonce, NOW)
    assert SIGNER.read_signin(value, NOW) == nonce
    assert SIGNER.read_signin(value, NOW + SIGNIN_SECONDS - 1) == nonce
    assert SIGNER.read_signin(value, NOW + SIGNIN_SECONDS) is None
    assert OTHER.read_signin(value, NOW) is None
    assert SIGNER.read_signin(value.replace(nonce, new_nonce()), NOW) is None


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="at least 32 bytes"):
        Signer(b"x" * 31)


def test_the_secret_is_made_once_beside_the_key_file(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    first = load_secret(keys, {})
    path = tmp_path / "keys.json.console-secret"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len(first) == 64
    assert load_secret(keys, {}) == first
    assert load_secret(keys, {ENV_CONSOLE_SECRET: "e" * 32}) == b"e" * 32
    with pytest.raises(ConfigurationError, match=ENV_CONSOLE_SECRET):
        load_secret(keys, {ENV_CONSOLE_SECRET: "short"})
    path.write_text("tiny")
    with pytest.raises(ConfigurationError, match="too short"):
        load_secret(keys, {})
