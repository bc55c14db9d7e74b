"""yaml-rs against PyYAML: the fast path returns what PyYAML's safe loader returns, or stands aside.

PyYAML (YAML 1.1) is the reference. ``fast_documents`` reads a text with yaml-rs only where the rule of
:mod:`gpufleet.adapters._yaml_fast` says the two agree; these tests hold it to PyYAML's results on every
YAML file of the project, on the YAML 1.1 forms where the parsers differ, and on random scalars.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters._yaml_fast import fast_documents
from gpufleet.adapters._yaml_parse import parse_documents
from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.adapters.k8s_yaml_writer import dump_snapshot
from gpufleet.bench.shapes import SHAPES, make_shape

ROOT = Path(__file__).resolve().parents[2]
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _corpus() -> list[Path]:
    """Every YAML file under tests/, examples/, deploy/ (Helm templates aside: they are not YAML until
    rendered) and the package's data."""
    files: list[Path] = []
    for top in ("tests", "examples", "deploy", "src/gpufleet/data"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in (".yaml", ".yml") and "templates" not in path.parts:
                files.append(path)
    return files


CORPUS = _corpus()


def pyyaml(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=_LOADER))


def same(a: object, b: object) -> bool:
    """Equal, and of the same types all the way down (True is not 1, 1.0 is not 1)."""
    return repr(a) == repr(b) and a == b


def test_the_corpus_is_there() -> None:
    assert len(CORPUS) > 150
    assert any(p.parts[-2:] == ("examples", "demo.yaml") for p in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: str(p.relative_to(ROOT)))
def test_parsers_agree_on_every_yaml_file_of_the_project(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    reference = pyyaml(text)
    fast = fast_documents(text)
    assert fast is None or same(fast, reference)
    assert same(parse_documents(text, str(path)), reference)


def test_most_of_the_corpus_takes_the_fast_path() -> None:
    fast = [p for p in CORPUS if fast_documents(p.read_text(encoding="utf-8")) is not None]
    assert len(fast) >= len(CORPUS) * 2 // 3


# The shapes of issue 12 (the fast path is a speed matter: shapes added later may or may not take it).
FAST_SHAPES = ("basic", "gang-small", "gang-large", "preemption", "topology", "affinity", "basic-projects", "dra-basic")


def test_the_shapes_are_known() -> None:
    assert set(FAST_SHAPES) <= set(SHAPES)


@pytest.mark.parametrize("shape", FAST_SHAPES)
def test_written_snapshots_take_the_fast_path_and_load_the_same(shape: str) -> None:
    text = dump_snapshot(make_shape(shape, 0.01))
    fast = fast_documents(text)
    assert fast is not None
    assert same(fast, pyyaml(text))


@pytest.mark.parametrize(
    "text",
    [
        # YAML 1.1 booleans; 1.2 reads them as strings
        "a: yes\nb: no\n", "a: on\n", "a: Off\n", "on: 1\n", "- NO\n",
        # octal, binary, hex with underscores, leading zeros, sexagesimal
        "a: 0755\n", "a: 0o755\n", "a: 0b101\n", "a: 0x_1F\n", "a: 09\n", "a: 012\n", "a: 1:20\n", "a: 190:20:30.15\n",
        # floats: exponents without a dot or a sign, a signed bare fraction, infinities
        "a: 1e3\n", "a: 1.0e3\n", "a: -.5\n", "a: .inf\n", "a: -.Inf\n", "a: .NaN\n",
        # underscores: 1_000 is an int to both, _1 to yaml-rs only
        "a: 1_000\n", "a: _1\n",
        # timestamps
        "a: 2026-01-02\n", "a: 2026-1-2\n", "a: 2001-12-14t21:59:43.10-05:00\n",
        # duplicate keys (PyYAML: the last wins; yaml-rs: an error), True and 1 as one key
        "a: 1\na: 2\n", "1: a\ntrue: b\n",
        # merge keys, anchors and aliases, tags
        "b: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n", "a: &x [1, 2]\nb: *x\n", "a: !!binary aGVsbG8=\n",
        "a: !!omap [x: 1]\n", "a: !!str 7\n", "a: !!set {x, y}\n",
        # the value key, empty keys, a collection as a key
        "a: =\n", ": 1\n", "{: x}\n", "? [1, 2]\n: x\n", "{a, {b: c}}\n",
        # no plain scalar in a flow collection begins with "?" or ":" for PyYAML
        "a: {a: ?a}\n", "a: [b, ?c]\n", "{a: :b}\n",
        # block scalars with no content, a document end marker, a directive
        "a: |\n  \n", "a: >\n\nb: 1\n", "a: 1\n...\nb: 2\n", "%YAML 1.1\n---\na: 1\n",
        # line breaks of YAML 1.1, a tab, control characters
        "a: x\x85y\n", "a: x\u2028y\n", "a:\t1\n", "a: \x07\n",
    ],
)
def test_yaml_1_1_forms_go_to_pyyaml(text: str) -> None:
    assert fast_documents(text) is None
    try:
        reference: object = pyyaml(text)
    except yaml.YAMLError:
        with pytest.raises(InputError, match=r"^s\.yaml: .*malformed YAML"):
            parse_documents(text, "s.yaml")
        return
    assert same(parse_documents(text, "s.yaml"), reference)


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\n", "a: 1\n---\nb: 2\n", "---\n- 1\n- 2\n", "- 1\n---\n- 2\n", "---\n---\n", "a: 1\n---\n",
        "# only a comment\n", "", "a: b\n# c\n---\n# d\nb: c\n", "a: 'x: y'\nb: \"q\"\nc: 4Gi\nd: -7\ne: 0.25\n",
        "a: [1, b, {c: d}]\nb: {}\nc: []\n", "a: |\n  x\n  y\nb: >-\n  z\n", "a: true\nb: False\nc: ~\nd: null\n",
        "image: nginx:1.25.3\nversion: 1.2.3\n", "a: 'it''s'\n", "a: 1\r\nb:\r\n  - x\r\n",
        # a quoted timestamp is a string (yaml-rs reads it as a datetime unless parse_datetime is off)
        "a: '2026-01-02T00:00:00Z'\n", "e: device.driver == 'gpu' && x != y\n",
    ],
)
def test_documents_both_read_alike_take_the_fast_path(text: str) -> None:
    fast = fast_documents(text)
    assert fast is not None and same(fast, pyyaml(text))


_ATOMS = [
    "a", "b c", "'q'", '"d"', "1", "-3", "2.5", "007", "1e3", "1_0", "_1", "0x1F", "0o7", "12:30", "4Gi", "500m",
    "yes", "no", "on", "Off", "y", "true", "TRUE", "tRUE", "null", "NULL", "~", "=", ".inf", "-.5", ".5", "1.",
    "2026-01-02", "2026-1-2", "v1.2.3", "1.2.3", "x:y", "a #c", "é", "[]", "{}", "[1, x]", "{k: v}", ":", "-",
    "?", "|", ">", "&a", "*a", "!t", "<<", "\\", "%", "@", "`",
]


@st.composite
def _texts(draw: st.DrawFn) -> str:
    def scalar() -> str:
        return "".join(draw(st.lists(st.sampled_from(_ATOMS), min_size=1, max_size=3)))

    template = draw(st.sampled_from([
        "a: {0}\n", "- {0}\n", "{0}: 1\n", "a: [{0}, {1}]\n", "a: {{{0}: {1}}}\n", "a:\n  - {0}\n  - b: {1}\n",
        "---\na: {0}\n---\nb: {1}\n", "a: |\n  {0}\n", "{0}\n", "a: {0}\n  {1}\n", "x: {0}\n---\n{1}\n",
    ]))
    return str(template.format(scalar(), scalar()))


@settings(max_examples=300, deadline=None)
@given(_texts())
def test_random_scalars_read_alike_or_go_to_pyyaml(text: str) -> None:
    fast = fast_documents(text)
    if fast is None:
        return
    assert same(fast, pyyaml(text)), text


def test_a_snapshot_read_through_either_parser_loads_the_same() -> None:
    snapshot = make_shape("basic", 0.01)
    text = dump_snapshot(snapshot)
    assert load_snapshot_text(text, "s.yaml") == snapshot
    assert load_snapshot_text("%YAML 1.1\n---\n" + text, "s.yaml") == snapshot  # PyYAML reads this one
