"""The HTML report: valid, self-contained, with every expected plot as inline SVG."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from gpufleet.sim.metrics import compute_metrics
from gpufleet.sim.report import Report, Series, line_chart
from gpufleet.sim.run_report import FIGURE_IDS, RunOutput, build_report

from .helpers import cluster, gpu_queue, job, run


class _Collector(HTMLParser):
    """Figures by id, whether each holds an <svg>, and every URL-bearing attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, bool] = {}
        self._current: str | None = None
        self.urls: list[tuple[str, str, str]] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        values = dict(attrs)
        if tag == "figure":
            self._current = values.get("id") or ""
            self.figures[self._current] = False
        if tag == "svg" and self._current is not None:
            self.figures[self._current] = True
        for name, value in attrs:
            if value and name in ("href", "src", "xlink:href", "action", "data") and not value.startswith("#"):
                self.urls.append((tag, name, value))

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._current = None


def _no_external_references(html: str) -> None:
    parser = _Collector()
    parser.feed(html)
    assert parser.urls == []
    assert not parser.tags & {"script", "link", "img", "iframe"}
    # the only absolute URLs allowed are the SVG/XLink namespace names (identifiers, never fetched)
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    assert "url(http" not in html and "@import" not in html


def test_simulation_report_has_every_plot_and_nothing_external() -> None:
    trace = [job(f"j{i}", i * 30.0, 200 + 10 * i, 1 + i % 2, vc="ab"[i % 2], checkpoint=50) for i in range(12)]
    queues = [gpu_queue("a", 1), gpu_queue("b", 2)]
    runs = []
    for label, interval in (("fast", 0.0), ("slow", 60.0)):
        result = run(cluster(2, 2, price=1.5), trace, queues=queues, by_vc=True, interval=interval)
        runs.append(RunOutput(label, result, compute_metrics(result, label)))
    html = build_report(runs, "test <report>", {"trace": "tiny"}).render()
    parser = _Collector()
    parser.feed(html)
    expected = set(FIGURE_IDS) | {"queue-usage-1", "queue-usage-2", "fair-share-1", "fair-share-2"}
    assert expected <= set(parser.figures)
    assert "Fairness over time" in html and "GPU-hours off the split" in html
    assert all(parser.figures[f] for f in expected), {f: parser.figures[f] for f in expected}
    _no_external_references(html)
    assert "test &lt;report&gt;" in html
    # each inline SVG is well-formed XML
    svgs = re.findall(r"<svg.*?</svg>", html, flags=re.DOTALL)
    assert len(svgs) >= len(expected)
    for svg in svgs:
        ET.fromstring(svg)


def test_an_unpriced_cluster_says_no_prices_instead_of_an_empty_cost_plot() -> None:
    trace = [job(f"j{i}", i * 30.0, 200, 1, vc="a") for i in range(3)]
    result = run(cluster(2), trace, queues=[gpu_queue("a", 2)], by_vc=True)
    html = build_report([RunOutput("only", result, compute_metrics(result, "only"))], "r", {}).render()
    parser = _Collector()
    parser.feed(html)
    assert "cost" not in parser.figures
    assert "No prices: the cluster&#x27;s node pools set no pricePerGpuHour" in html or \
        "No prices: the cluster's node pools set no pricePerGpuHour" in html


def test_report_api_is_generic_and_deterministic() -> None:
    def page() -> str:
        report = Report("fill")
        report.section("Curve", "a paragraph").figure(
            line_chart([Series("x", [0, 1, 2], [0, 1, 4])], x_label="t", y_label="y"), "caption", "curve")
        report.section("Numbers").table(["a", "b"], [[1, 2.5]], caption="numbers")
        return report.render()

    first = page()
    assert first == page()
    assert '<figure id="curve"><svg' in first and "<caption>numbers</caption>" in first
    _no_external_references(first)


def test_large_cdfs_are_thinned() -> None:
    from gpufleet.sim.report import cdf_chart

    svg = cdf_chart([("many", [float(i) for i in range(50_000)])], x_label="x")
    small = cdf_chart([("few", [float(i) for i in range(900)])], x_label="x")
    assert len(svg) < 2 * len(small)
