"""``--help`` that fits the terminal: text wraps at spaces and folds a long word, never cut.

Typer draws each panel of options as a table of five name columns, a type column and a help
column, and lets Rich cut whatever does not fit with an ellipsis: at 80 columns a variable
name such as ``CONTEXTSTORE_MAX_BODY_BYTES`` lost its end, at 40 the option names
themselves. ``install`` replaces that one panel with a layout of our own, kept to Typer's
look: the option's names and type on one line, never cut, and its help beside them — or,
when the terminal is too narrow for both, on the lines below, indented. The commands'
descriptions fold too. Usage lines are wrapped by Rich alone (click's own wrapping at its
narrower width left stray fragments such as ``[ARGS]..`` and ``.`` on lines of their own).
"""

from __future__ import annotations

from typing import Any, Final

import typer.rich_utils as typer_help
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer.core import TyperArgument

# Below this many columns for the help beside the names, the help goes below them.
HELP_BESIDE_MIN: Final = 30
# What click may use for a usage line before Rich wraps it to the terminal.
UNWRAPPED: Final = 10_000
CONTEXT_SETTINGS: Final = {"max_content_width": UNWRAPPED, "terminal_width": UNWRAPPED}


def install() -> None:
    """Put the wrapping panels in place of Typer's (idempotent)."""
    # Typer's own types for these are those of its private copy of click.
    setattr(typer_help, "_print_options_panel", print_options_panel)  # noqa: B010
    if not getattr(typer_help._make_command_help, "folds", False):
        typer_help._make_command_help = _folding(typer_help._make_command_help)


def print_options_panel(
    *,
    name: str,
    params: list[Any],
    ctx: Any,
    markup_mode: Any,
    console: Console,
) -> None:
    """One panel of options or arguments, wrapped to ``console``'s width."""
    rows = [_option_row(param, ctx, markup_mode) for param in params]
    if not rows:
        return
    heads = [head for head, _ in rows]
    head_width = max(head.cell_len for head in heads)
    # The panel's borders and padding take four columns, the gap between columns two.
    beside = console.width - 4 - head_width - 2
    grid = Table.grid(padding=(0, 2) if beside >= HELP_BESIDE_MIN else 0, expand=True)
    if beside >= HELP_BESIDE_MIN:
        grid.add_column(no_wrap=True, width=head_width)
        grid.add_column(ratio=1, overflow="fold")
        for head, help_text in rows:
            grid.add_row(head, help_text)
    else:
        grid.add_column(ratio=1, overflow="fold")
        for head, help_text in rows:
            head.overflow = "fold"
            grid.add_row(Group(head, Padding(help_text, (0, 0, 0, 4))))
    console.print(
        Panel(
            grid,
            border_style=typer_help.STYLE_OPTIONS_PANEL_BORDER,
            title=name,
            title_align=typer_help.ALIGN_OPTIONS_PANEL,
        )
    )


def _option_row(param: Any, ctx: Any, markup_mode: Any) -> tuple[Text, RenderableType]:
    """(names and type, help) of one option or argument, as Typer words them."""
    if isinstance(param, TyperArgument):
        label = getattr(param, "display_name_raw", None) or (param.name or "").upper()
    else:
        label = ", ".join(param.opts)
        if param.secondary_opts:
            label = f"{label} / {', '.join(param.secondary_opts)}"
    head = Text()
    if param.required:
        head.append(f"{typer_help.REQUIRED_SHORT_STRING} ", style=typer_help.STYLE_REQUIRED_SHORT)
    head.append(label, style=typer_help.STYLE_OPTION)
    kind = Text(param.display_type_rich(ctx=ctx) or "", style=typer_help.STYLE_TYPES)
    range_text = param._get_number_range_help_str()
    if range_text:
        kind.append(typer_help.RANGE_STRING.format(range_text), style=typer_help.STYLE_TYPES)
    if kind.plain:
        head.append(" ")
        head.append_text(kind)
    parts = typer_help._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
    return head, _joined(list(getattr(parts, "renderables", [parts])))


def _joined(parts: list[Any]) -> RenderableType:
    """The help's parts (text, its variable, its default) as one text that folds."""
    if not all(isinstance(part, Text) for part in parts):
        return Group(*parts)
    joined = Text(" ").join(parts)
    joined.overflow = "fold"
    return joined


def _folding(make: Any) -> Any:
    def make_command_help(**kwargs: Any) -> Any:
        rendered = make(**kwargs)
        if isinstance(rendered, Text):
            rendered.overflow = "fold"
        return rendered

    make_command_help.folds = True  # type: ignore[attr-defined]
    return make_command_help
