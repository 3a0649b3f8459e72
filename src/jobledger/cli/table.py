"""Plain-text tables for people: aligned columns, truncation with ``…``, optional colour.

The standard library has no table printer and the CLI must stay dependency-free on the SQLite
path, so this small renderer does exactly what the commands need:

* every cell is one line (newlines and tabs become spaces) measured in terminal cells (wide East
  Asian characters count two, combining marks zero);
* a column may have a ``max_width``; a cell wider than its column is cut and ends in ``…``;
* given a total ``width`` (the terminal's, when stdout is one), the widest shrinkable columns
  give up space until the table fits, never below their header or :data:`MIN_SHRINK`;
* colour is applied after measuring, so escape codes never disturb alignment; the caller decides
  whether to colour at all (a TTY and no ``NO_COLOR``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "MIN_SHRINK",
    "STATUS_STYLES",
    "Column",
    "cell_width",
    "one_line",
    "paint",
    "render_table",
    "status_style",
    "truncate",
]

MIN_SHRINK: Final = 8
GAP: Final = "  "
ELLIPSIS: Final = "…"

_STYLES: Final = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}

Styler = Callable[[str], str | None]


@dataclass(frozen=True, slots=True)
class Column:
    """A column: its header, how wide it may grow, how it aligns and how cells are coloured.

    ``style`` maps a cell's text to a style name (``"red"``, ``"bold"`` …) or ``None``.
    ``shrink=False`` keeps the column whole when the table must fit a width (ids, instants).
    """

    header: str
    max_width: int | None = None
    align: Literal["left", "right"] = "left"
    shrink: bool = True
    style: Styler | None = None


def _char_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Cf", "Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def one_line(text: str) -> str:
    """The text with line breaks, tabs and other control characters shown as spaces."""
    return "".join(" " if not char.isprintable() else char for char in text)


def cell_width(text: str) -> int:
    """How many terminal cells ``text`` takes (one line, no escape codes)."""
    return sum(_char_width(char) for char in text)


def truncate(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` cells, ending in ``…`` when anything was cut."""
    if width <= 0:
        return ""
    if cell_width(text) <= width:
        return text
    kept: list[str] = []
    used = 0
    for char in text:
        size = _char_width(char)
        if used + size > width - 1:
            break
        kept.append(char)
        used += size
    return "".join(kept) + ELLIPSIS


def _pad(text: str, width: int, align: str) -> str:
    fill = " " * (width - cell_width(text))
    return fill + text if align == "right" else text + fill


def paint(text: str, style: str | None, enabled: bool) -> str:
    """``text`` wrapped in an ANSI style when ``enabled`` (and the style is known)."""
    if not enabled or style is None or style not in _STYLES or not text:
        return text
    return f"\x1b[{_STYLES[style]}m{text}\x1b[0m"


def _fit(columns: Sequence[Column], natural: list[int], width: int | None) -> list[int]:
    widths = list(natural)
    if width is None:
        return widths
    budget = width - len(GAP) * (len(columns) - 1)
    floors = [
        max(min(natural[i], MIN_SHRINK), cell_width(column.header)) if column.shrink else natural[i]
        for i, column in enumerate(columns)
    ]
    while sum(widths) > budget:
        candidates = [i for i in range(len(widths)) if widths[i] > floors[i]]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def render_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    width: int | None = None,
    color: bool = False,
) -> str:
    """The table as text (no trailing newline): a header line, then one line per row.

    ``width``: the most cells a line may take (``None``: no limit). Trailing spaces are
    trimmed from every line.
    """
    if any(len(row) != len(columns) for row in rows):
        raise ValueError("every row needs one cell per column")
    cells = [[one_line(str(cell)) for cell in row] for row in rows]
    natural: list[int] = []
    for index, column in enumerate(columns):
        widest = max([cell_width(column.header)] + [cell_width(row[index]) for row in cells])
        if column.max_width is not None:
            widest = min(widest, max(column.max_width, cell_width(column.header)))
        natural.append(widest)
    widths = _fit(columns, natural, width)
    lines = [
        GAP.join(
            paint(_pad(truncate(column.header, widths[i]), widths[i], column.align), "bold", color)
            for i, column in enumerate(columns)
        ).rstrip()
    ]
    for row in cells:
        parts = []
        for i, column in enumerate(columns):
            shown = truncate(row[i], widths[i])
            style = column.style(row[i]) if column.style is not None else None
            parts.append(paint(_pad(shown, widths[i], column.align), style, color))
        lines.append(GAP.join(parts).rstrip())
    return "\n".join(lines)


STATUS_STYLES: Final = {
    "queued": "blue",
    "running": "cyan",
    "retry_wait": "yellow",
    "succeeded": "green",
    "dead_letter": "red",
    "cancelled": "magenta",
    "enabled": "green",
    "disabled": "yellow",
}


def status_style(text: str) -> str | None:
    """The colour of a status cell (``succeeded`` green, ``dead_letter`` red …)."""
    return STATUS_STYLES.get(text)
