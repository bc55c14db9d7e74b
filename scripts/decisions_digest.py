"""A digest of ``schedule()``'s decisions on every bench shape (decisions must not change with speed work).

    .venv/bin/python scripts/decisions_digest.py [--scale 0.3]

Prints one line per shape: its name, the number of bindings, evictions and pending pods, and the
SHA-256 of the decisions' JSON (api.md's replay output, ``render_json``): the same decisions give the same
text, and a field added to the dataclasses that the JSON leaves out when unused (``flavor``, ``moves``,
``reservations``) does not change it, where a ``repr`` would.
Run it before and after a change (the old tree's ``src`` first on ``PYTHONPATH``) and compare.
"""

from __future__ import annotations

import argparse
import hashlib

from gpufleet.adapters.output import render_json
from gpufleet.bench.shapes import SHAPES, make_shape
from gpufleet.engine.scheduler import schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.3)
    parser.add_argument("--shape", action="append", help="only these shapes (default: all)")
    args = parser.parse_args()
    for name in args.shape or SHAPES:
        decisions = schedule(make_shape(name, args.scale))
        digest = hashlib.sha256(render_json(decisions).encode()).hexdigest()[:16]
        print(f"{name:16s} {len(decisions.bindings):6d} {len(decisions.evictions):6d} "
              f"{len(decisions.pending):6d} {digest}", flush=True)


if __name__ == "__main__":
    main()
