"""Instructions of one warm ``schedule()`` call on a bench shape, which load does not change (the CPU
time of this 2-core machine varies by 30-40% between runs of the same code).

    .venv/bin/python scripts/bench_instructions.py --shape preemption --mode all [--src /tmp/i13/src]

Runs ``valgrind --tool=cachegrind --cache-sim=no`` (``PYTHONHASHSEED=0``) on a child process that builds
the snapshot and calls ``schedule()`` once, then on one that calls it twice: the difference is one warm
call. ``--mode`` is bench_options.py's (``plain``, ``flavors``, ``all``: ``two_models``' snapshot, flavored,
every option on); ``shape`` is the shape as ``gpufleet bench`` builds it (how 85312c8's figures were
recorded). ``--src``: the ``src`` directory of another checkout to count instead (first on the path).
``--whole``: count the whole call as the controller and ``replay`` make it (``resolve_devices``,
``schedule`` on its snapshot, ``attach``), as bench_options.py times it (for ``dra-basic`` against ``basic``);
``--cache`` (with ``--whole``) the call as the controller makes it with its DeviceCache, the cache of the
call before: ``same``, on the same snapshot (every object unchanged since: a cycle where nothing
changed); ``new-pods``, on a snapshot whose pods and ResourceClaims are new objects (equal ones; nodes,
slices and classes unchanged: a cycle where every pod and claim is new, as when they all just arrived).
Both children build two snapshots first, so the difference is one call. ``--incremental`` (with
``--whole``): the controller's engine, one ``IncrementalEngine`` for the calls, instead of ``schedule``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("plain", "flavors", "all", "shape")


def snapshot_of(shape: str, mode: str, scale: float):  # type: ignore[no-untyped-def]
    from gpufleet.bench.shapes import make_shape

    if mode == "shape":
        return make_shape(shape, scale)
    sys.path.insert(0, str(HERE))
    from bench_flavors import flavored, two_models
    from bench_options import every_option

    snapshot = two_models(make_shape(shape, scale))
    if mode != "plain":
        snapshot = flavored(snapshot)
    return every_option(snapshot) if mode == "all" else snapshot


def renewed(snapshot):  # type: ignore[no-untyped-def]
    """``snapshot`` with new (equal) pod and ResourceClaim objects."""
    from dataclasses import replace

    return replace(snapshot, pods=tuple(replace(p) for p in snapshot.pods),
                   resource_claims=tuple(replace(c) for c in snapshot.resource_claims))


def calls(shape: str, mode: str, scale: float, n: int, whole: bool, cache_mode: str, incremental: bool = False) -> None:
    """The child: build the snapshot, call ``schedule()`` ``n`` times (``whole``: the whole call)."""
    from gpufleet.adapters import DeviceCache, resolve_devices
    from gpufleet.engine import schedule
    from gpufleet.engine.incremental import IncrementalEngine

    engine = IncrementalEngine() if incremental else schedule

    snapshot = snapshot_of(shape, mode, scale)
    snapshots = [snapshot, renewed(snapshot) if cache_mode == "new-pods" else snapshot]
    cache = DeviceCache() if cache_mode != "none" else None
    for k in range(n):
        if whole:
            view = resolve_devices(snapshots[k % 2], cache)
            view.attach(engine(view.snapshot))
        else:
            schedule(snapshot)


def instructions(args: argparse.Namespace, n: int) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0")
    if args.src:
        env["PYTHONPATH"] = args.src
    out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                          sys.executable, __file__, "--shape", args.shape, "--mode", args.mode,
                          "--scale", str(args.scale), *(["--whole"] if args.whole else []),
                          "--cache", args.cache, *(["--incremental"] if getattr(args, "incremental", False) else []),
                          "--calls", str(n)],
                         env=env, capture_output=True, text=True, check=True).stderr
    found = re.search(r"I\s+refs:\s+([\d,]+)", out)
    if found is None:
        raise SystemExit(f"bench_instructions: no instruction count in valgrind's output: {out[-300:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", required=True)
    parser.add_argument("--mode", choices=MODES, default="plain")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--src", help="the src directory of another checkout")
    parser.add_argument("--whole", action="store_true", help="resolve_devices + schedule + attach")
    parser.add_argument("--cache", choices=("none", "same", "new-pods"), default="none",
                        help="with --whole: a DeviceCache kept between the calls (see above)")
    parser.add_argument("--incremental", action="store_true", help="with --whole: IncrementalEngine")
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)  # the child under valgrind
    args = parser.parse_args()
    if args.calls is not None:
        calls(args.shape, args.mode, args.scale, args.calls, args.whole, args.cache, args.incremental)
        return
    one, two = instructions(args, 1), instructions(args, 2)
    what = "whole (resolve_devices + schedule + attach)" if args.whole else "schedule()"
    if args.whole and args.cache != "none":
        what += f", DeviceCache {args.cache},"
    if args.whole and args.incremental:
        what += " IncrementalEngine,"
    print(f"{args.shape} {args.mode}: {(two - one) / 1e6:,.0f}M instructions per warm {what} call")


if __name__ == "__main__":
    main()
