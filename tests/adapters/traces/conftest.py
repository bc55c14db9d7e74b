"""Shared fixtures: the real traces beside the repository (``../shared/traces``), and temp CSVs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "traces"


@pytest.fixture
def traces() -> Path:
    """The shared trace folder; the test is skipped (with the reason) when it is not checked out."""
    if not TRACES.is_dir():
        pytest.skip(f"real traces not available: {TRACES} is absent (CI has ../shared beside the repo)")
    return TRACES


@pytest.fixture
def write_csv(tmp_path: Path) -> Callable[[str, str], Path]:
    """write_csv(text, name="t.csv") -> the path of a file holding ``text``."""

    def write(text: str, name: str = "t.csv") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
