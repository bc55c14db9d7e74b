"""Time the fair order's borrowing key (``QueueForest.borrowed_share``) with decayed usage on and off.

    .venv/bin/python scripts/bench_fair_key.py [--calls 368130] [--repeat 5]

17 leaf queues of quota 0 and one resource (the Philly VCs of examples/queues-philly-fair.yaml), as many
calls as a 22-day Philly simulation on the 1/6-size cluster makes (BENCHMARKS.md, "fairness over time").
Run it with another tree's ``src`` first on ``PYTHONPATH`` to compare before and after.
"""

from __future__ import annotations

import argparse
import timeit

from gpufleet.domain import GPU, Queue, QueueName, QueueResource
from gpufleet.engine.queues import QueueForest


def forest(half_life: float) -> QueueForest:
    queues = [Queue(QueueName(f"q{i}"), resources={GPU: QueueResource(quota=0)}, decayed_usage={GPU: 1000 * i},
                    decayed_at=0.0) for i in range(17)]
    f = QueueForest(queues, {GPU: 410_000})
    for i in range(17):
        f.usage[i][0] = 2000 * i
    f.set_time(3600.0, half_life)
    return f


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=368_130)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name, half_life in (("decayed usage on (24h)", 86400.0), ("off", 0.0)):
        f = forest(half_life)
        assert (f.history is not None) == (half_life > 0)
        best = min(timeit.repeat(lambda f=f: [f.borrowed_share(q % 17) for q in range(args.calls)],
                                 number=1, repeat=args.repeat))
        print(f"{name:24s} {args.calls} calls: {best:.3f} s, {best / args.calls * 1e9:.0f} ns a call")


if __name__ == "__main__":
    main()
