"""The table renderer: widths, alignment, truncation with …, fitting a width, colour."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.cli.table import (
    MIN_SHRINK,
    Column,
    cell_width,
    one_line,
    paint,
    render_table,
    status_style,
    truncate,
)

SETTINGS = settings(derandomize=True, deadline=None, max_examples=200)


def test_columns_are_as_wide_as_their_widest_cell():
    text = render_table(
        [Column("NAME"), Column("N", align="right")],
        [["a", "1"], ["longer", "100"]],
    )
    assert text.splitlines() == [
        "NAME      N",
        "a         1",
        "longer  100",
    ]


def test_max_width_truncates_with_an_ellipsis():
    text = render_table([Column("ID"), Column("DATA", max_width=6)], [["x", "abcdefghij"]])
    assert text.splitlines()[1] == "x   abcde…"


def test_a_header_is_never_cut_by_max_width():
    text = render_table([Column("LONG HEADER", max_width=3)], [["abcdefghijklmno"]])
    assert text.splitlines() == ["LONG HEADER", "abcdefghij…"]


def test_fitting_a_width_shrinks_the_widest_shrinkable_column():
    columns = [Column("ID", shrink=False), Column("A"), Column("B")]
    rows = [["occ_0123456789", "a" * 40, "b" * 10]]
    text = render_table(columns, rows, width=50)
    line = text.splitlines()[1]
    assert cell_width(line) <= 50
    assert line.startswith("occ_0123456789  ")  # not shrinkable: whole
    assert "…" in line
    assert line.endswith("b" * 10)  # the narrow one kept


def test_shrinking_stops_at_a_floor():
    columns = [Column("A"), Column("B")]
    text = render_table(columns, [["a" * 30, "b" * 30]], width=5)
    for line in text.splitlines()[1:]:
        assert line.count("…") == 2
        assert cell_width(line) == 2 * MIN_SHRINK + 2


def test_cells_are_one_line():
    text = render_table([Column("X")], [["two\nlines\tand a tab"]])
    assert text.splitlines()[1] == "two lines and a tab"
    assert one_line("a\r\nb\x1b") == "a  b "


def test_wide_characters_count_twice():
    assert cell_width("日本") == 4
    assert cell_width("e\u0301") == 1  # e + combining acute
    text = render_table([Column("X"), Column("Y")], [["日本", "1"], ["ab", "2"]])
    lines = text.splitlines()
    assert lines[1] == "日本  1"
    assert lines[2] == "ab    2"
    assert truncate("日本語テキスト", 5) == "日本…"


def test_rows_must_match_the_columns():
    import pytest

    with pytest.raises(ValueError):
        render_table([Column("A")], [["1", "2"]])


def test_colour_only_when_asked_and_without_breaking_alignment():
    columns = [Column("STATUS", style=status_style), Column("N")]
    rows = [["succeeded", "1"], ["dead_letter", "2"]]
    plain = render_table(columns, rows)
    assert "\x1b" not in plain
    coloured = render_table(columns, rows, color=True)
    assert "\x1b[32m" in coloured and "\x1b[31m" in coloured and "\x1b[1m" in coloured
    stripped = [
        line.replace("\x1b[0m", "")
        .replace("\x1b[1m", "")
        .replace("\x1b[32m", "")
        .replace("\x1b[31m", "")
        for line in coloured.splitlines()
    ]
    assert [line.rstrip() for line in stripped] == plain.splitlines()
    assert paint("x", "nonsense", True) == "x"
    assert paint("x", "red", False) == "x"


@SETTINGS
@given(
    cells=st.lists(st.lists(st.text(max_size=30), min_size=3, max_size=3), min_size=0, max_size=8),
    width=st.integers(min_value=30, max_value=120),
)
def test_every_line_fits_when_it_can(cells, width):
    columns = [Column("ONE"), Column("TWO", max_width=20), Column("THREE", align="right")]
    text = render_table(columns, cells, width=width)
    lines = text.split("\n")
    assert len(lines) == len(cells) + 1
    floor = (
        sum(
            max(
                min(max([cell_width(one_line(r[i])) for r in cells] + [len(c.header)]), MIN_SHRINK),
                len(c.header),
            )
            for i, c in enumerate(columns)
        )
        + 4
    )
    for line in lines:
        assert cell_width(line) <= max(width, floor)


@SETTINGS
@given(text=st.text(max_size=40), width=st.integers(min_value=1, max_value=40))
def test_truncate(text, width):
    cut = truncate(text, width)
    assert cell_width(cut) <= width
    if cell_width(text) <= width:
        assert cut == text
    else:
        assert cut.endswith("…")
