"""``gpufleet report usage|idle`` through click's runner: every format, on SQLite and PostgreSQL, and bad
input as one line with exit 2 (figures: tests/ledger/report_ledger.py)."""

from __future__ import annotations

import csv
import io
import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gpufleet.cli import main
from gpufleet.ledger import open_ledger

from .report_ledger import PRICES_YAML, fill

WINDOW = ["--since", "2026-09-21T14:13:20Z", "--until", "2026-09-22T00:13:20+00:00"]  # [T0, T0 + 10 h)


@pytest.fixture
def ledger(ledger_url: str) -> str:
    with open_ledger(ledger_url) as store:
        fill(store)
    return ledger_url


@pytest.fixture
def prices(tmp_path: Path) -> str:
    path = tmp_path / "prices.yaml"
    path.write_text(PRICES_YAML)
    return str(path)


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_usage_table(ledger: str, prices: str) -> None:
    result = run("report", "usage", "--database", ledger, *WINDOW, "--group-by", "project", "--prices", prices)
    assert (result.exit_code, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[0] == "Usage 2026-09-21T14:13:20Z .. 2026-09-22T00:13:20Z, cost in EUR"
    assert lines[1].split() == ["PROJECT", "GPU-H", "USED", "GPU-H", "UNMEASURED", "GPU-H", "EFFICIENCY", "COST",
                                "EUR", "PREEMPTED", "GPU-H", "PREEMPTED", "COST", "WAIT", "P50", "WAIT", "P95",
                                "WAIT", "P99"]
    assert lines[2].split() == ["nlp", "5.00", "0.42", "0.00", "8.4%", "10.00", "4.00", "6.00", "20s", "5.0m", "5.0m"]
    assert lines[3].split() == ["vision", "4.70", "1.00", "2.70", "50.0%", "13.31", "0.00", "0.00", "1.7m", "1.7m",
                                "1.7m"]
    assert lines[4].split() == ["TOTAL", "9.70", "1.42", "2.70", "20.3%", "23.31", "4.00", "6.00", "1.7m", "5.0m",
                                "5.0m"]


def test_usage_json_and_csv(ledger: str, prices: str, tmp_path: Path) -> None:
    out = tmp_path / "usage.json"
    result = run("report", "usage", "--database", ledger, *WINDOW, "--group-by", "label:cost-center,gpu-model",
                 "--prices", prices, "--format", "json", "--output", str(out))
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
    doc = json.loads(out.read_text())
    assert (doc["since"], doc["groupBy"], doc["currency"]) == ("2026-09-21T14:13:20Z", ["label:cost-center",
                                                                                        "gpu-model"], "EUR")
    assert doc["total"]["cost"] == pytest.approx(23.31)
    assert doc["total"]["unmeasuredGpuHours"] == pytest.approx(2.7)
    assert {(r["group"]["label:cost-center"], r["group"]["gpu-model"]): pytest.approx(r["gpuHours"])
            for r in doc["rows"]} == {("cc2", "A100"): 4.0, (None, "H100"): 3.0, ("cc1", "H100"): 2.7}

    result = run("report", "usage", "--database", ledger, *WINDOW, "--group-by", "queue", "--format", "csv")
    assert result.exit_code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert "cost" not in rows[0]  # no --prices: no cost columns
    assert {r["queue"]: (float(r["gpu_hours"]), int(r["waits"])) for r in rows} == {
        "team-b": (5.0, 2), "team-a": (pytest.approx(4.7), 1)}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.figures: list[str] = []
        self.svgs = 0
        self.external: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        values = dict(attrs)
        if tag == "figure":
            self.figures.append(values.get("id") or "")
        if tag == "svg":
            self.svgs += 1
        for name in ("src", "href", "xlink:href"):
            value = values.get(name) or ""
            if value and not value.startswith("#"):
                self.external.append(value)


def test_usage_html_is_self_contained_with_its_figures(ledger: str, prices: str, tmp_path: Path) -> None:
    out = tmp_path / "usage.html"
    result = run("report", "usage", "--database", ledger, *WINDOW, "--group-by", "project", "--prices", prices,
                 "--format", "html", "--output", str(out))
    assert (result.exit_code, result.stderr) == (0, "")
    page = _Page()
    text = out.read_text()
    page.feed(text)
    assert page.figures == ["cost-over-time", "allocated-vs-used", "waits"]
    assert page.svgs == 3
    assert page.external == [] and "script" not in page.tags and "link" not in page.tags
    assert "Cost over time per project" in text and "23.31" in text
    if "postgresql" in ledger:
        assert "postgresql+psycopg://postgres@/" in text  # the command line it was made by


def test_idle_formats(ledger: str, tmp_path: Path) -> None:
    result = run("report", "idle", "--database", ledger, "--threshold", "20")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split()[:4] == ["NAMESPACE", "POD", "PROJECT", "SUBMITTER"]
    assert lines[2].split() == ["ml", "pod-c", "nlp", "bob", "team-b", "node-1", "A100", "2", "2026-09-21T18:13:20Z",
                                "2026-09-21T20:13:20Z", "4.00", "10.0%", "3.60"]
    assert lines[3].split()[1] == "pod-d" and len(lines) == 4
    result = run("report", "idle", "--database", ledger, "--threshold", "20", "--limit", "1", "--format", "json")
    assert [(r["podName"], r["idleGpuHours"]) for r in json.loads(result.stdout)["rows"]] == [
        ("pod-c", pytest.approx(3.6))]
    out = tmp_path / "idle.html"
    result = run("report", "idle", "--database", ledger, "--threshold", "20", "--format", "html", "--output", str(out))
    assert result.exit_code == 0, result.stderr
    page = _Page()
    page.feed(out.read_text())
    assert page.figures == ["idle"] and page.external == []


@pytest.mark.parametrize(("args", "message"), [
    (["--group-by", "project,team"], 'gpufleet report usage: --group-by: unknown key "team"; use project'),
    (["--since", "2026-11-31"], 'gpufleet report usage: --since: "2026-11-31": not a date'),
    (["--until", "soon"], 'gpufleet report usage: --until: "soon": not a date'),
    (["--until", "2026-09-01"], "gpufleet report usage: --until 2026-09-01 is not after --since 2026-09-21"),
    (["--database", "mysql://db/ledger"], "gpufleet report usage: --database 'mysql://db/ledger': unsupported "
                                          "database 'mysql'"),
    (["--database", "postgresql+asyncpg://u@h/db"], "gpufleet report usage: --database 'postgresql+asyncpg://u@h/db': "
                                                    "PostgreSQL through the driver 'asyncpg' is not supported"),
    (["--database", "MISSING"], "gpufleet report usage: --database '"),
    (["--prices", "PRICES"], "gpufleet report usage: "),
    (["--format", "pdf"], "gpufleet report usage: Invalid value for '--format'"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    database = tmp_path / "l.db"
    with open_ledger(str(database)) as store:
        fill(store)
    bad_prices = tmp_path / "prices.yaml"
    bad_prices.write_text("currency: EUR\ndefault: {onDemand: 1}\ngpus: {H100: {onDemand: -2}}\n")
    args = [str(tmp_path / "nope.db") if a == "MISSING" else str(bad_prices) if a == "PRICES" else a for a in args]
    result = run("report", "usage", "--database", str(database), "--since", "2026-09-21", *args)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(message), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    if "PRICES" in args or str(bad_prices) in args:
        assert result.stderr == f"gpufleet report usage: {bad_prices}: gpus.H100.onDemand: must be >= 0, got -2\n"
    if str(tmp_path / "nope.db") in args:
        assert result.stderr.endswith("nope.db': no such ledger file\n")
        assert not (tmp_path / "nope.db").exists()


def test_idle_bad_input(tmp_path: Path) -> None:
    result = run("report", "idle", "--database", str(tmp_path / "x.db"), "--threshold", "150")
    assert result.exit_code == 2 and "--threshold" in result.stderr and result.stderr.count("\n") == 1


def test_an_unreachable_database_is_one_line_exit_1() -> None:
    result = run("report", "usage", "--database", "postgresql+psycopg://u@127.0.0.1:1/ledger", "--since",
                 "2026-09-21")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("gpufleet report usage: ledger postgresql+psycopg://u@127.0.0.1:1/ledger: ")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("command", ["usage", "idle"])
def test_html_without_matplotlib_names_the_reports_extra(command: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = run("report", command, "--database", str(tmp_path / "l.db"), "--since", "2026-09-21", "--format", "html")
    assert (result.exit_code, result.stdout, result.stderr) == (
        2, "", f"gpufleet report {command}: report {command} --format html needs the reports extra: "
               "pip install 'gpufleet[reports]'\n")
