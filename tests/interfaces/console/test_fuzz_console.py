"""Hostile values through every console page a signed-in administrator can open.

Query parameters and lesson ids with NUL, control characters, lone surrogates, huge
numbers and long strings: a page answers them (a refusal is 422 naming the field), never
with a server error.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore.interfaces.apikeys import add_key
from tests.hostile import HUGE_INTEGERS, INTEGER, TEXT, examples
from tests.interfaces.console.test_signin_limits import Clock, console_app, sign_in

pytestmark = pytest.mark.slow

PAGES = {
    "/console/": ["range", "from", "to", "by"],
    "/console/usage": ["range", "from", "to"],
    "/console/lessons": ["q", "status", "severity", "key"],
    "/console/explain": ["tags", "entity_ids", "query", "order", "k", "bytes"],
    "/console/documents": ["prefix", "q"],
    "/console/documents/view": ["source"],
    "/console/lessons/{}": [],
    "/console/proposals": ["done", "lesson"],
}
VALUES = st.one_of(HUGE_INTEGERS.map(str), TEXT, INTEGER.map(str))


def encoded(text: str) -> str:
    return quote(text[:600].encode("utf-8", "surrogatepass"), safe="")


@pytest.mark.parametrize("page", list(PAGES))
def test_console_pages_answer_hostile_parameters(tmp_path: Path, page: str) -> None:
    key, _ = add_key(tmp_path / "keys.json", "ops", "admin")
    names = PAGES[page] or ["unused"]
    statuses: list[int] = []

    @examples(default=8, ci=120)
    @given(parameters=st.dictionaries(st.sampled_from(names), VALUES, min_size=1, max_size=3))
    def hostile(parameters: dict[str, str]) -> None:
        if "{}" in page:
            path = page.format(encoded(next(iter(parameters.values()))))
        else:
            query = "&".join(f"{name}={encoded(value)}" for name, value in parameters.items())
            path = f"{page}?{query}"

        async def visit() -> int:
            async with console_app(tmp_path, Clock()) as client, client("192.0.2.1") as browser:
                assert (await sign_in(browser, key)).status_code == 303
                return (await browser.get(path)).status_code

        status = asyncio.run(visit())
        statuses.append(status)
        assert status < 500, (path, status)

    hostile()
    assert statuses
