"""Rows of data for a person or a script: a table on a terminal, plain columns elsewhere.

On a terminal, a Rich table cut to its width: *key* columns (ids one copies: a job id, a problem
id) are never cut nor wrapped, the others wrap inside their cells. Anywhere else (a pipe, a file,
``| cat``), plain space-aligned columns, one record a line, nothing cut or wrapped whatever the
width: what ``ps`` and ``docker ps`` print, what ``grep`` and ``awk`` read. The title goes to
stderr there, so stdout is the header and the records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["Cell", "Column", "cell_text", "fit", "plain_columns", "rich_table", "show_rows"]

#: A cell: plain text, or Rich `Text` (its style shows on a terminal only).
Cell = str | Text
#: What an empty cell shows as in plain columns (an empty field would shift a script's columns).
_EMPTY = "—"


#: Spaces between two columns of a terminal's table (the box's blank rule, then padding), and
#: at its two edges.
_GAP, _EDGES = 2, 2


@dataclass(frozen=True)
class Column:
    """One column: its header, its alignment, whether it is a key (never cut or wrapped), and
    whether a terminal too narrow for every column may leave it out (``drop``: the highest goes
    first; 0: never)."""

    name: str
    justify: Literal["left", "right"] = "left"
    key: bool = False
    drop: int = 0


def _header(column: Column) -> str:
    """A header on one line (a terminal's may take two: ``vs eager`` over its baseline)."""
    return " ".join(column.name.split())


def cell_text(cell: Cell) -> str:
    """A cell's text on one line (``—`` for an empty one)."""
    text = cell.plain if isinstance(cell, Text) else cell
    return " ".join(text.split()) or _EMPTY


_plain = cell_text


def plain_columns(columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> str:
    """The header and the rows as space-aligned columns, one line each, nothing cut."""
    lines = [[_header(c) for c in columns], *[[_plain(cell) for cell in row] for row in rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    rendered = []
    for line in lines:
        cells = [cell.rjust(width) if column.justify == "right" else cell.ljust(width)
                 for cell, width, column in zip(line, widths, columns, strict=True)]
        rendered.append("  ".join(cells).rstrip() + "\n")
    return "".join(rendered)


#: The width a wrapping column needs at least to be read (a few words a line).
_WRAPPED_MIN = 20


def _needed_width(column: Column, cells: Sequence[Cell]) -> int:
    """A key column's natural width (never cut); a wrapping column's narrowest readable one."""
    natural = max([*(len(line) for line in column.name.splitlines()), *(len(_plain(c)) for c in cells), 1])
    return natural if column.key else min(natural, _WRAPPED_MIN)


def fit(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int | None
        ) -> tuple[list[Column], list[list[Cell]]]:
    """The columns (and the rows' cells) that fit ``width`` (keys whole, wrapping columns readable),
    leaving out droppable ones, highest `Column.drop` first, until they do (or none is left to drop)."""
    kept = list(range(len(columns)))
    if width is not None:
        natural = [_needed_width(c, [row[i] for row in rows]) for i, c in enumerate(columns)]
        droppable = sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: -columns[i].drop)
        while droppable and sum(natural[i] for i in kept) + _GAP * (len(kept) - 1) + _EDGES > width:
            kept.remove(droppable.pop(0))
    return [columns[i] for i in kept], [[row[i] for i in kept] for row in rows]


def rich_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], *, title: str | None = None,
               caption: str | None = None, width: int | None = None) -> Table:
    """The rows as a terminal's table of ``width``: key columns as wide as their longest value,
    never cut; droppable columns left out when they do not all fit (`fit`)."""
    columns, rows = fit(columns, rows, width)
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for i, column in enumerate(columns):
        if column.key:
            longest = max((len(_plain(row[i])) for row in rows), default=0)
            header = max(len(line) for line in column.name.splitlines() or [""])
            table.add_column(column.name, justify=column.justify, no_wrap=True, min_width=max(longest, header))
        else:
            table.add_column(column.name, justify=column.justify, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def show_rows(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[Cell]], *,
              title: str | None = None, caption: str | None = None) -> None:
    """Print the rows on ``console``: a table on a terminal, plain columns elsewhere (the title then
    on stderr, the caption after the rows)."""
    if console.is_terminal:
        console.print(rich_table(columns, rows, title=title, caption=caption, width=console.width))
        return
    if title:
        Console(stderr=True).print(title, highlight=False, soft_wrap=True)
    console.file.write(plain_columns(columns, rows))
    if caption:
        console.print(caption, highlight=False, soft_wrap=True)
    console.file.flush()
