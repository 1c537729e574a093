"""Shared output helpers: readable tables for people, JSON for machines.

Text is text. Both consoles have rich's markup, emoji codes and highlighting
off, so a message or a table title that includes a user's file name, job name
or cloud message prints exactly as given: ``[/x]`` cannot raise a markup
error and ``[red]`` cannot vanish from a path. Style is asked for explicitly,
with ``style=`` or a :class:`rich.text.Text` (``Text.assemble((name, "bold"), ...)``),
never with markup tags in a string.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Piped output is not squeezed to 80 columns: a table in a log or a CI page
# should keep its instance types whole. A terminal keeps its own width.
_PIPE_WIDTH = 200
_width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else _PIPE_WIDTH

console = Console(width=_width, markup=False, emoji=False, highlight=False)
err_console = Console(stderr=True, width=_width, markup=False, emoji=False, highlight=False)


def error_line(message: str) -> None:
    """``error: MESSAGE`` on stderr, the message verbatim (one line per error, the CLI's last word).

    Never hard-wrapped: a long message stays one line in a file or a pipe, for ``grep`` and
    for a log's reader (a terminal folds it on screen as it does any long line)."""
    err_console.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)


def note(message: str, style: str = "dim", *, stderr: bool = False) -> None:
    """A secondary line (a hint, a footnote) in ``style``, the message verbatim."""
    (err_console if stderr else console).print(Text(message, style=style))


def print_json(data: Any) -> None:
    """JSON on stdout, nothing else, so ``| jq`` always works."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    right: Sequence[str] = (),
) -> Table:
    """A rich table; columns named in ``right`` are right-aligned (numbers)."""
    out = Table(title=title, header_style="bold", show_lines=False)
    for name in columns:
        out.add_column(name, justify="right" if name in right else "left", no_wrap=name in right)
    for row in rows:
        # Text, not str: a cell is data, never markup or an emoji code (":AB:" in a PCI bus id).
        out.add_row(*(Text("—" if cell is None else str(cell)) for cell in row))
    return out


def money(value: float | None, digits: int = 3) -> str | None:
    return None if value is None else f"{value:,.{digits}f}"
