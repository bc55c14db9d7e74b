"""The installed package says what it is: licence (with its file), authors, classifiers."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path


def test_metadata() -> None:
    meta = importlib.metadata.metadata("gpufleet")
    assert meta["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (meta.get_all("License-File") or [])
    assert meta["Author"] or meta["Author-email"]
    classifiers = meta.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.11" in classifiers and "Typing :: Typed" in classifiers
    licence = (Path(__file__).resolve().parents[1] / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in licence and "Version 2.0" in licence


def test_the_urls_are_the_charts_home() -> None:
    import yaml

    root = Path(__file__).resolve().parents[1]
    chart = yaml.safe_load((root / "deploy" / "helm" / "gpufleet" / "Chart.yaml").read_text(encoding="utf-8"))
    urls = dict(u.split(", ", 1) for u in importlib.metadata.metadata("gpufleet").get_all("Project-URL") or [])
    assert urls["Homepage"] == urls["Source"] == chart["home"] and chart["sources"] == [chart["home"]]
    assert urls["Documentation"].startswith(chart["home"]) and urls["Issues"].startswith(chart["home"])
