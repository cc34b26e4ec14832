"""The lane drawing both requests tabs share: columns on the axis, runs, and marks by priority."""

from __future__ import annotations

from rich.style import Style

from kvtui.widgets.lanes import BLANK, column, paint

A = ("a", Style())
B = ("b", Style())
M = ("M", Style())
N = ("N", Style())


def test_column_clamps_to_the_axis():
    assert column(0.0, 10.0, 20) == 0
    assert column(5.0, 10.0, 20) == 10
    assert column(10.0, 10.0, 20) == 19
    assert column(-1.0, 10.0, 20) == 0


def test_runs_fill_their_columns_and_later_runs_win():
    cells = paint(6, [(0, 4, A), (2, 5, B)], [])
    assert [glyph for glyph, _ in cells] == ["a", "a", "b", "b", "b", " "]
    assert cells[5] == BLANK


def test_marks_replace_runs_and_the_higher_mark_wins_a_column():
    cells = paint(4, [(0, 4, A)], [(1, 1, M), (1, 2, N), (2, 2, N), (2, 1, M), (9, 5, M)])
    assert "".join(glyph for glyph, _ in cells) == "aNNa"


def test_long_lane_ids_keep_their_distinguishing_end():
    from kvtui.widgets.lanes import short_label

    assert short_label("proxy-119", 9) == "proxy-119"
    assert short_label("proxy-1199", 9) == "…oxy-1199"
    assert short_label("proxy-1#1201", 9) != short_label("proxy-1#1202", 9)
