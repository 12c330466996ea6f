"""The console's application in process (no server): what depends on the request's scheme
and on the routing beside the API."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx

from contextstore import __version__
from contextstore.config import ContextEngineConfig
from contextstore.interfaces.apikeys import add_key
from contextstore.interfaces.console import is_console_path
from contextstore.interfaces.server import create_app
from contextstore.interfaces.web.settings import ServiceSettings


def _app(tmp_path: Path) -> tuple[httpx.AsyncClient, str]:
    keys = tmp_path / "keys.json"
    key, _ = add_key(keys, "ns", "admin")
    settings = ServiceSettings(
        keys_file=keys,
        store=ContextEngineConfig(database_url=f"sqlite:///{tmp_path / 'store.db'}"),
    )
    transport = httpx.ASGITransport(app=create_app(settings))
    return httpx.AsyncClient(transport=transport, base_url="https://console.test"), key


def test_over_https_the_session_cookie_is_secure(tmp_path: Path) -> None:
    async def scenario() -> str:
        client, key = _app(tmp_path)
        async with client:
            form = await client.get("/console/signin")
            assert "secure" in form.headers["set-cookie"].lower()
            token = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert token is not None
            signed = await client.post("/console/signin", data={"csrf": token.group(1), "key": key})
            assert signed.status_code == 303
            return next(
                value
                for name, value in signed.headers.multi_items()
                if name == "set-cookie" and value.startswith("contextstore_console=")
            )

    cookie = asyncio.run(scenario()).lower()
    assert cookie.startswith("contextstore_console=")
    parts = {part.strip() for part in cookie.split(";")}
    assert {"httponly", "secure", "samesite=strict", "path=/console"} <= parts


def test_console_paths_leave_the_api_alone() -> None:
    assert [is_console_path(p) for p in ("/", "/console", "/console/", "/console/lessons")] == [
        True
    ] * 4
    assert not any(
        is_console_path(p) for p in ("/v1/lessons", "/healthz", "/metrics", "/consoles", "//")
    )


def test_an_unreadable_key_file_answers_503_not_a_traceback(tmp_path: Path) -> None:
    async def scenario() -> httpx.Response:
        client, key = _app(tmp_path)
        async with client:
            form = await client.get("/console/signin")
            token = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert token is not None
            signed = await client.post("/console/signin", data={"csrf": token.group(1), "key": key})
            assert signed.status_code == 303
            (tmp_path / "keys.json").write_text("{not json")
            return await client.get("/console/lessons")

    page = asyncio.run(scenario())
    assert page.status_code == 503
    assert "The database or the key store cannot be reached" in page.text
    assert page.headers["content-type"].startswith("text/html")


def test_the_footer_says_the_version(tmp_path: Path) -> None:
    async def scenario() -> str:
        client, _ = _app(tmp_path)
        async with client:
            return (await client.get("/console/signin")).text

    # Every page extends the same base template, the sign-in page among them.
    assert f'<footer class="bottom">contextstore {__version__}</footer>' in asyncio.run(scenario())
