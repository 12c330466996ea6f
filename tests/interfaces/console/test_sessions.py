"""Signed session values and CSRF tokens: exact acceptance, refusal of anything altered."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore.errors import ConfigurationError
from contextstore.interfaces.console.sessions import (
    ENV_CONSOLE_SECRET,
    SESSION_SECONDS,
    SIGNIN_SECONDS,
    Session,
    Signer,
    load_secret,
    new_nonce,
)

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


def altered_at(text: str, index: int) -> str:
    """``text`` with the character at ``index`` replaced by another base64 character."""
    return text[:index] + ("A" if text[index] != "A" else "B") + text[index + 1 :]


@pytest.mark.parametrize("index", [2, 3, 4, 21, 41, 42])
def test_a_mac_differing_only_after_its_first_bytes_is_refused(index: int) -> None:
    # Base64 packs 6 bits a character: from the third character on, a change is past the
    # MAC's first two bytes, where a comparison of a prefix would stop looking.
    nonce = new_nonce()
    session = SIGNER.session_value(KEY_ID, NOW, nonce)
    head, mac = session.rsplit(".", 1)
    assert len(mac) == 43 and SIGNER.read_session(session, NOW) is not None
    assert SIGNER.read_session(f"{head}.{altered_at(mac, index)}", NOW) is None

    token = SIGNER.csrf_token(nonce)
    assert SIGNER.csrf_valid(nonce, token)
    assert not SIGNER.csrf_valid(nonce, altered_at(token, index))

    signin = SIGNER.signin_value(nonce, NOW)
    head, mac = signin.rsplit(".", 1)
    assert SIGNER.read_signin(signin, NOW) == nonce
    assert SIGNER.read_signin(f"{head}.{altered_at(mac, index)}", NOW) is None
