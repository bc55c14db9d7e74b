"""Parse the `basic` snapshot (16,008 objects) with each parser, interleaved, and print the medians.

    .venv/bin/python scripts/bench_parsers.py [--scale 1.0] [--repeat 5]

PyYAML's C loader (the reference), yaml-rs alone, the rule that decides whether yaml-rs may read a
text (``_yaml_fast``), gpufleet's YAML path (rule + yaml-rs, or PyYAML), and the JSON form through
msgspec; then ``load_snapshot_text`` (parse + convert + validate) from YAML and from JSON.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import yaml
import yaml_rs

from gpufleet.adapters._json_parse import parse_json_documents
from gpufleet.adapters._yaml_fast import _unsafe
from gpufleet.adapters._yaml_parse import parse_documents
from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.adapters.k8s_yaml_writer import dump_snapshot, dump_snapshot_json
from gpufleet.bench.shapes import make_shape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    snapshot = make_shape("basic", args.scale)
    text = dump_snapshot(snapshot)
    json_text = dump_snapshot_json(snapshot)
    reference = list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    assert parse_documents(text, "basic.yaml") == reference  # the fast path, equal objects
    steps: dict[str, Callable[[], object]] = {
        "PyYAML CSafeLoader": lambda: list(yaml.load_all(text, Loader=yaml.CSafeLoader)),
        "yaml-rs alone": lambda: yaml_rs.loads(text, parse_datetime=False),
        "the rule (_unsafe)": lambda: _unsafe(text, text.split("\n")),
        "gpufleet YAML parse": lambda: parse_documents(text, "basic.yaml"),
        "msgspec JSON parse": lambda: parse_json_documents(json_text, "basic.json"),
        "load_snapshot_text YAML": lambda: load_snapshot_text(text, "basic.yaml"),
        "load_snapshot_text JSON": lambda: load_snapshot_text(json_text, "basic.json"),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeat):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["PyYAML CSafeLoader"])
    print(f"{len(reference):,} objects, YAML {len(text.encode()):,} bytes, JSON {len(json_text.encode()):,} bytes")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:26} {median:7.3f} s  {median / base:6.3f} x PyYAML")


if __name__ == "__main__":
    main()
