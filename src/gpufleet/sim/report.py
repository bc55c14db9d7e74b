"""Self-contained HTML reports: a title, sections of paragraphs, tables and inline SVG figures.

A small reusable API shared by ``gpufleet simulate run`` and ``gpufleet simulate fill``::

    report = Report("Simulation of philly.csv")
    section = report.section("Allocation", "Allocated GPUs over total GPUs, per run.")
    section.figure(line_chart([Series("binpack", xs, ys)], x_label="day", y_label="allocation"),
                   caption="Allocation over time", fig_id="allocation")
    section.table(["run", "mean"], [["binpack", "0.71"]])
    Path("out.html").write_text(report.render())

Figures are SVG made by matplotlib (``Figure`` objects, no pyplot state, no GUI backend) and
embedded inline; the page has inline CSS only and references nothing outside itself, so it opens
offline and can be attached to a ticket. Rendering is deterministic (fixed SVG ids, no dates).
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib is imported lazily: it costs ~0.3 s and only reports need it
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure

__all__ = [
    "Figure",
    "Paragraph",
    "Report",
    "Section",
    "Series",
    "Table",
    "bar_chart",
    "cdf_chart",
    "line_chart",
    "new_figure",
    "svg_of",
]


@dataclass(frozen=True, slots=True)
class Paragraph:
    text: str


@dataclass(frozen=True, slots=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""


@dataclass(frozen=True, slots=True)
class Figure:
    """An inline SVG document (as :func:`svg_of` returns) with an optional caption and HTML id."""

    svg: str
    caption: str = ""
    fig_id: str = ""


Block = Paragraph | Table | Figure


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def paragraph(self, text: str) -> Section:
        self.blocks.append(Paragraph(text))
        return self

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[object]], caption: str = "") -> Section:
        self.blocks.append(Table(tuple(headers), tuple(tuple(str(c) for c in r) for r in rows), caption))
        return self

    def figure(self, svg: str, caption: str = "", fig_id: str = "") -> Section:
        self.blocks.append(Figure(svg, caption, fig_id))
        return self


@dataclass
class Report:
    title: str
    intro: str = ""
    sections: list[Section] = field(default_factory=list)
    made_by: str = ""  # the command line and version that made it (a reader can make it again)

    def section(self, title: str, text: str = "") -> Section:
        """Append a new section (with an optional first paragraph) and return it to fill."""
        section = Section(title)
        if text:
            section.paragraph(text)
        self.sections.append(section)
        return section

    def render(self) -> str:
        """The whole page as one HTML5 string."""
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{_esc(self.title)}</title>",
            f"<style>{_CSS}</style></head><body>",
            f"<h1>{_esc(self.title)}</h1>",
        ]
        if self.made_by:
            parts.append(f'<p class="made-by"><code>{_esc(self.made_by)}</code></p>')
        if self.intro:
            parts.append(f"<p>{_esc(self.intro)}</p>")
        if len(self.sections) > 1:
            links = "".join(f'<li><a href="#s{i}">{_esc(s.title)}</a></li>' for i, s in enumerate(self.sections, 1))
            parts.append(f"<nav><ol>{links}</ol></nav>")
        for i, section in enumerate(self.sections, 1):
            parts.append(f'<section id="s{i}"><h2>{_esc(section.title)}</h2>')
            parts.extend(_block_html(b) for b in section.blocks)
            parts.append("</section>")
        parts.append("</body></html>\n")
        return "\n".join(parts)


_CSS = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1100px;"
    "padding:0 1em;color:#222}"
    "h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}"
    "table{border-collapse:collapse;margin:1em 0;font-size:.9em}"
    "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}"
    "td:first-child,th:first-child{text-align:left}caption{caption-side:top;text-align:left;font-weight:600}"
    "figure{margin:1em 0}figcaption{font-size:.9em;color:#555}svg{max-width:100%;height:auto}"
)


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _block_html(block: Block) -> str:
    if isinstance(block, Paragraph):
        return f"<p>{_esc(block.text)}</p>"
    if isinstance(block, Table):
        head = "".join(f"<th>{_esc(h)}</th>" for h in block.headers)
        body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in block.rows)
        caption = f"<caption>{_esc(block.caption)}</caption>" if block.caption else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    ident = f' id="{_esc(block.fig_id)}"' if block.fig_id else ""
    caption = f"<figcaption>{_esc(block.caption)}</figcaption>" if block.caption else ""
    return f"<figure{ident}>{block.svg}{caption}</figure>"


# ------------------------------------------------------------------------------------- figures


@dataclass(frozen=True, slots=True)
class Series:
    """One named line: x and y values of equal length."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    style: str = "-"  # matplotlib line style: "-", "--", ":"


CDF_POINTS = 1000

_HEADER = re.compile(r"\A(?:<\?xml[^>]*\?>\s*)?(?:<!DOCTYPE[^>]*>\s*)?", re.DOTALL)


@contextmanager
def _svg_settings() -> Iterator[None]:
    import matplotlib

    matplotlib.use("Agg")
    # Text as <text> (small files, fonts of the reader's machine, nothing fetched); fixed ids
    # so the same figure gives the same bytes.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "gpufleet", "font.size": 9}):
        yield


def new_figure(width: float = 8.0, height: float = 3.2, rows: int = 1, cols: int = 1) -> tuple[MplFigure, list[Axes]]:
    """A matplotlib Figure (not registered with pyplot) and its axes, row by row."""
    from matplotlib.figure import Figure as MplFigure

    with _svg_settings():
        fig = MplFigure(figsize=(width, height), layout="constrained")
        grid = fig.subplots(rows, cols, squeeze=False)
    return fig, [ax for row in grid for ax in row]


def svg_of(fig: MplFigure) -> str:
    """The figure as an inline ``<svg>`` element: no XML header, no metadata, deterministic ids."""
    buffer = io.StringIO()
    with _svg_settings():
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return _HEADER.sub("", buffer.getvalue()).strip()


def line_chart(
    series: Sequence[Series],
    *,
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    step: bool = False,
    y_min: float | None = None,
    y_max: float | None = None,
    log_x: bool = False,
    width: float = 8.0,
    height: float = 3.2,
) -> str:
    """Lines (or step lines) on one pair of axes, legend when more than one; returns SVG."""
    fig, (ax,) = new_figure(width, height)
    draw_lines(ax, series, step=step)
    _decorate(ax, title, x_label, y_label, y_min, y_max, legend=len(series) > 1)
    if log_x:
        ax.set_xscale("log")
    return svg_of(fig)


def draw_lines(ax: Axes, series: Sequence[Series], *, step: bool = False) -> None:
    for s in series:
        if step:
            ax.step(list(s.x), list(s.y), where="post", label=s.label, linestyle=s.style, linewidth=1.2)
        else:
            ax.plot(list(s.x), list(s.y), label=s.label, linestyle=s.style, linewidth=1.2)


def _decorate(
    ax: Axes, title: str, x_label: str, y_label: str, y_min: float | None, y_max: float | None, *, legend: bool
) -> None:
    if title:
        ax.set_title(title)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if y_min is not None or y_max is not None:
        ax.set_ylim(bottom=y_min, top=y_max)
    ax.grid(True, linewidth=0.4, alpha=0.5)
    if legend:
        ax.legend(loc="best", fontsize=8)


def cdf_chart(
    samples: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str = "",
    x_label: str = "",
    log_x: bool = True,
    width: float = 8.0,
    height: float = 3.2,
) -> str:
    """Empirical CDFs of named samples (empty samples are left out); returns SVG."""
    import numpy as np

    fig, (ax,) = new_figure(width, height)
    drawn = 0
    for label, values in samples:
        xs = np.sort(np.asarray(values, dtype=np.float64))
        if xs.size == 0:
            continue
        ys = np.arange(1, xs.size + 1) / xs.size
        if xs.size > CDF_POINTS:  # the curve at CDF_POINTS evenly spaced ranks (and the last): small SVGs
            keep = np.unique(np.append(np.linspace(0, xs.size - 1, CDF_POINTS).astype(np.int64), xs.size - 1))
            xs, ys = xs[keep], ys[keep]
        if log_x:
            xs = np.maximum(xs, 1.0)  # zero waits sit at the left edge of a log axis
        ax.step(xs, ys, where="post", label=label, linewidth=1.2)
        drawn += 1
    if log_x and drawn:
        ax.set_xscale("log")
    _decorate(ax, title, x_label, "fraction of jobs", 0.0, 1.0, legend=drawn > 1)
    return svg_of(fig)


def bar_chart(
    categories: Sequence[str],
    groups: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str = "",
    y_label: str = "",
    log_y: bool = False,
    width: float = 8.0,
    height: float = 3.2,
) -> str:
    """Grouped bars: one bar per (category, group); returns SVG."""
    import numpy as np

    fig, (ax,) = new_figure(width, height)
    n = max(1, len(groups))
    x = np.arange(len(categories), dtype=np.float64)
    w = 0.8 / n
    for i, (label, values) in enumerate(groups):
        ax.bar(x + (i - (n - 1) / 2) * w, list(values), width=w, label=label)
    ax.set_xticks(x, list(categories), rotation=30 if len(categories) > 6 else 0, ha="right" if len(categories) > 6
                  else "center")
    if log_y:
        ax.set_yscale("log")
    _decorate(ax, title, "", y_label, None, None, legend=len(groups) > 1)
    return svg_of(fig)
