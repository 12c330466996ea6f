"""``contextstore config show``: every effective setting and where its value came from.

The settings are read as every command reads them (``contextstore.config.sources``): the
defaults, ``contextstore.toml`` (``CONTEXTSTORE_CONFIG`` names another file), the
environment, then the flags given here. A secret is never printed; a URL's password is
masked by the one function that masks URLs everywhere (``mask_url``).
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from contextstore.backends.urls import MASK, mask_url
from contextstore.config.settings import BY_KEY, Setting, Value, toml_value
from contextstore.config.sources import Resolved, load_settings
from contextstore.interfaces.cli.common import EXIT_USAGE, cli_errors, console, fail
from contextstore.interfaces.cli.options import DatabaseUrl, Namespace, RedisUrl
from contextstore.interfaces.cli.output import Format, chosen_format, emit_rows

app = typer.Typer(
    help="The effective settings: defaults, contextstore.toml, the environment, flags.",
    no_args_is_help=True,
)

# The table leaves out "from" (the file's path, the variable, the flag) to fit 80 columns;
# the other formats carry it.
_COLUMNS = ["key", "value", "source"]


@app.command("show")
def show(
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    namespace: Namespace = None,
    assignments: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="KEY=VALUE: any setting, as a flag (repeatable), e.g. engine.cache.max_size=512",
            show_default=False,
        ),
    ] = None,
    fmt: Format = None,
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json")] = False,
) -> None:
    """Print every setting's effective value and its source: default, file, env or flag."""
    flags: dict[str, Value | None] = {
        "store.database_url": database_url,
        "store.redis_url": redis_url,
        "store.namespace": namespace,
    }
    given = dict(_assignment(assignment) for assignment in assignments or ())
    flags.update(given)
    with cli_errors():
        settings = load_settings(os.environ, flags, flag_names=dict.fromkeys(given, "--set"))
    chosen = chosen_format(fmt, as_json)
    typed = chosen == "json"
    records = [_record(BY_KEY[key], resolved, typed) for key, resolved in settings.resolved.items()]
    if chosen == "table":
        where = settings.file if settings.file is not None else "none"
        console.print(f"configuration file: {where}", highlight=False, markup=False)
    emit_rows(chosen, "settings", records, columns=_COLUMNS, flexible="value", empty="")


def _assignment(text: str) -> tuple[str, Value]:
    key, sign, raw = text.partition("=")
    setting = BY_KEY.get(key.strip())
    if not sign or setting is None:
        known = "" if sign else " (give KEY=VALUE)"
        fail(f"--set: unknown setting {key.strip()!r}{known}", code=EXIT_USAGE)
    value, problem = setting.parse(raw)
    if problem is not None:
        fail(f"--set: {setting.key}: {problem}", code=EXIT_USAGE)
    assert value is not None
    return setting.key, value


def _record(setting: Setting, resolved: Resolved, typed: bool) -> dict[str, Any]:
    """One row; ``typed`` (JSON) keeps numbers and booleans as such, and unset as null."""
    value = resolved.value
    plain = typed and (value is None or not (setting.secret or setting.url))
    return {
        "key": setting.key,
        "value": value if plain else shown_value(setting, value),
        "source": resolved.source,
        "from": resolved.origin or "",
    }


def shown_value(setting: Setting, value: Value | None) -> str:
    """``value`` as ``config show`` prints it: TOML's spelling, a secret as ``***``, a URL
    with its password masked, an unset one as what that means."""
    if value is None:
        return f"unset: {setting.unset}"
    if setting.secret:
        return MASK
    if setting.url:
        return mask_url(str(value))
    return toml_value(value) if not isinstance(value, str) else str(value)
