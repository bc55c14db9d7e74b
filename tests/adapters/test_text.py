"""The one table layout and the one progress bar of the commands and reports."""

from __future__ import annotations

import io
import sys

import pytest

from gpufleet.adapters.text import progress_bar, text_table


def test_table_left_aligned_with_upper_case_headers_and_no_trailing_blanks() -> None:
    assert text_table(["pod", "why"], [["ml/a", "no room"], ["ml/long-name", ""]]) == [
        "POD           WHY",
        "ml/a          no room",
        "ml/long-name",
    ]


def test_table_with_numbers_right_aligned_after_the_first_column() -> None:
    assert text_table(["policy", "@100", "failed"], [["fgd", "91.20", "3"], ["bestfit", "8.00", "120"]],
                      numbers_right=True) == [
        "POLICY    @100  FAILED",
        "fgd      91.20       3",
        "bestfit   8.00     120",
    ]


def test_a_table_without_rows_is_its_header() -> None:
    assert text_table(["pod", "node"], []) == ["POD  NODE"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_advances_reaches_and_fills_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    with progress_bar(8, "tasks", show_pos=True) as bar:
        assert bar is not None
        bar.advance()
        bar.advance(2)
        bar.reach(2)  # never backwards
        assert bar.done == 3
        bar.reach(5)
        assert bar.done == 5
    assert "tasks" in screen.getvalue() and "8/8" in screen.getvalue()


def test_no_progress_bar_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with progress_bar(8, "tasks") as bar:
        assert bar is None
    assert sys.stderr.getvalue() == ""
