"""Console sign-in, limited per client address; sessions that end when their key changes.

In process, with the console's clock injected: ten failed keys from one address within a
minute, and the eleventh attempt is 429 with ``Retry-After``, the right key included, until
the window has passed; other addresses are not affected. A key revoked or demoted to an
agent key ends its sessions on their next request.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from contextstore.config import ContextEngineConfig
from contextstore.interfaces.apikeys import KeyRing, add_key, revoke_key
from contextstore.interfaces.console import build_console, with_console
from contextstore.interfaces.console.throttle import (
    MAX_FAILURES,
    WINDOW_SECONDS,
    SignInThrottle,
    client_key,
)
from contextstore.interfaces.service.app import build_api
from contextstore.interfaces.web.settings import ServiceSettings
from contextstore.interfaces.web.telemetry import Telemetry

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


Clients = Callable[[str], httpx.AsyncClient]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def console_app(
    tmp_path: Path, clock: Clock
) -> AsyncIterator[Callable[[str], httpx.AsyncClient]]:
    """The API and console of one server process, its stores open; yields a function that
    makes a client calling from a given address."""
    settings = ServiceSettings(
        keys_file=tmp_path / "keys.json",
        store=ContextEngineConfig(database_url=f"sqlite:///{tmp_path / 'store.db'}"),
    )
    api = build_api(settings, Telemetry())
    keys = KeyRing(settings.keys_file, required=True)
    console = build_console(lambda: api.state.backends, keys, settings)
    console.state.console.clock = clock
    app = with_console(console, api, settings)

    def client(address: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=app, client=(address, 40000))
        return httpx.AsyncClient(transport=transport, base_url="http://console.test")

    async with api.router.lifespan_context(api):
        yield client


async def sign_in(client: httpx.AsyncClient, key: str) -> httpx.Response:
    form = await client.get("/console/signin")
    token = CSRF.search(form.text)
    assert token is not None, form.text
    return await client.post("/console/signin", data={"csrf": token.group(1), "key": key})


def scenario(test: Callable[..., Awaitable[None]]) -> Callable[[Path], None]:
    def run(tmp_path: Path) -> None:
        asyncio.run(test(tmp_path))

    run.__name__ = test.__name__
    return run


@scenario
async def test_ten_failures_a_minute_then_429_until_the_window_passes(tmp_path: Path) -> None:
    admin, _ = add_key(tmp_path / "keys.json", "ops", "admin")
    wrong = admin[:-6] + ("AAAAAA" if not admin.endswith("AAAAAA") else "BBBBBB")
    clock = Clock()
    async with (
        console_app(tmp_path, clock) as client,
        client("203.0.113.7") as attacker,
        client("198.51.100.2") as other,
    ):
        for _ in range(MAX_FAILURES):
            assert (await sign_in(attacker, wrong)).status_code == 401
            clock.now += 1
        refused = await sign_in(attacker, admin)  # even the right key waits
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == str(int(WINDOW_SECONDS) - MAX_FAILURES)
        assert "Too many failed sign-ins" in refused.text
        assert "contextstore_console=" not in refused.headers.get("set-cookie", "")
        # Another address is not affected.
        assert (await sign_in(other, wrong)).status_code == 401
        assert (await sign_in(other, admin)).status_code == 303
        # Once the first failure is a minute old, one more attempt is allowed.
        clock.now += WINDOW_SECONDS - MAX_FAILURES
        assert (await sign_in(attacker, admin)).status_code == 303


@scenario
async def test_a_success_clears_the_address_and_agent_keys_do_not_count(tmp_path: Path) -> None:
    admin, _ = add_key(tmp_path / "keys.json", "ops", "admin")
    agent, _ = add_key(tmp_path / "keys.json", "ops", "agent")
    clock = Clock()
    async with console_app(tmp_path, clock) as client, client("192.0.2.1") as browser:
        for _ in range(MAX_FAILURES - 1):
            assert (await sign_in(browser, "csk_nope")).status_code == 401
        assert (await sign_in(browser, agent)).status_code == 403  # a valid key, not guessing
        assert (await sign_in(browser, admin)).status_code == 303
        browser.cookies.clear()
        for _ in range(MAX_FAILURES - 1):
            assert (await sign_in(browser, "csk_nope")).status_code == 401
        assert (await sign_in(browser, "csk_nope")).status_code == 401
        assert (await sign_in(browser, admin)).status_code == 429


@scenario
async def test_a_demoted_or_revoked_key_ends_its_sessions(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    demoted, demoted_entry = add_key(path, "ops", "admin")
    revoked, _ = add_key(path, "ops", "admin")
    async with (
        console_app(tmp_path, Clock()) as client,
        client("192.0.2.1") as first,
        client("192.0.2.2") as second,
    ):
        assert (await sign_in(first, demoted)).status_code == 303
        assert (await sign_in(second, revoked)).status_code == 303
        assert (await first.get("/console/lessons")).status_code == 200
        assert (await second.get("/console/lessons")).status_code == 200

        document = json.loads(path.read_text())
        for entry in document["keys"]:
            if entry["id"] == demoted_entry.id:
                entry["role"] = "agent"
        path.write_text(json.dumps(document, indent=2))  # by hand, in place
        page = await first.get("/console/lessons")
        assert (page.status_code, page.headers["location"]) == (303, "/console/signin")
        assert (await second.get("/console/lessons")).status_code == 200

        revoke_key(path, revoked)
        page = await second.get("/console/lessons")
        assert (page.status_code, page.headers["location"]) == (303, "/console/signin")


def test_the_throttle_forgets_failures_a_window_old() -> None:
    throttle = SignInThrottle(max_failures=3, window_seconds=60, max_addresses=2)
    for moment in (0.0, 10.0, 20.0):
        assert throttle.retry_after("a", moment) is None
        throttle.failed("a", moment)
    assert throttle.retry_after("a", 20.0) == 40
    assert throttle.retry_after("a", 59.5) == 1
    assert throttle.retry_after("a", 60.0) is None  # the first failure is a minute old
    throttle.failed("b", 61.0)
    throttle.failed("c", 62.0)  # three addresses: the one that failed longest ago goes
    for moment in (70.0, 71.0):
        throttle.failed("c", moment)
    assert throttle.retry_after("c", 72.0) == 50
    throttle.succeeded("c")
    assert throttle.retry_after("c", 72.0) is None


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::9", "2001:db8:1:2::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        (None, "unknown"),
        ("testclient", "testclient"),
    ],
)
def test_an_ipv6_client_counts_by_its_network(host: str | None, key: str) -> None:
    assert client_key(host) == key
