"""Write the settings table of ``docs/guides/configuration.md`` from the settings' one
definition (``contextstore.config.settings``): ``python -m tests.docs.settings``."""

from __future__ import annotations

import re

from contextstore.config.settings import settings_table
from tests.docs.pages import DOCS

PAGE = DOCS / "guides" / "configuration.md"
BLOCK = re.compile(r"(<!-- settings -->\n).*?(<!-- /settings -->)", re.DOTALL)


def render(page: str) -> str:
    """``page`` with its settings block holding ``settings_table()``."""
    return BLOCK.sub(lambda match: match[1] + settings_table() + match[2], page, count=1)


if __name__ == "__main__":
    PAGE.write_text(render(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
