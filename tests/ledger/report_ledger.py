"""A small ledger with hand-computed report figures (tests/ledger/test_reports.py, tests/commands/test_report.py).

The window is [T0, T0 + 10 h). Prices (EUR): H100 4 / spot 1.5 / reserved 3, any other model 2 / 1 / 1.5,
0.05 per core-hour, 0.01 per GiB-hour.

* a: vision, H100, 1 GPU, on-demand, bound T0-2h, ended T0+2h (completed), util 50%: 2 GPU-h in the
  window, used 1.0, cost 2 x 4 = 8; its wait (bound before the window) is not counted.
* b: vision, H100, 30 blocks (0.3 GPU), spot, 2 cores, 4 GiB, bound T0+1h, open, no telemetry,
  label cost-center=cc1, created 100 s before bound: 9 h x 0.3 = 2.7 GPU-h (unmeasured), GPU cost
  2.7 x 1.5 = 4.05, CPU 2 x 0.05 x 9 = 0.9, memory 4 x 0.01 x 9 = 0.36: cost 5.31.
* c: nlp, A100 (not priced: the default), 2 GPUs, reserved, bound T0+4h, ended T0+6h evicted by preemption,
  util 10%, label cost-center=cc2, wait 300 s: 4 GPU-h, used 0.4, cost 4 x 1.5 = 6, all of it preempted.
* d: nlp, H100, 1 GPU, on-demand, bound T0+9h, ended T0+12h, util 1% and 3% (mean 2%), wait 20 s:
  1 GPU-h in the window, used 0.02, cost 4.
* e (bound after the window) and f (ended before it) are not counted.
"""

from __future__ import annotations

from gpufleet.adapters.prices import load_prices_text
from gpufleet.ledger import EndReason, LedgerStore, UtilisationSample

from .helpers import T0, end, start

H = 3600.0
GIB = 2**30
SINCE, UNTIL = T0, T0 + 10 * H

PRICES_YAML = """\
currency: EUR
gpus:
  H100: {onDemand: 4, spot: 1.5, reserved: 3}
default: {onDemand: 2, spot: 1, reserved: 1.5}
cpuPerCoreHour: 0.05
memoryPerGiBHour: 0.01
"""
PRICES = load_prices_text(PRICES_YAML, "prices.yaml")


def fill(store: LedgerStore) -> None:
    store.record_starts([
        start("a", -2 * H, created_at=T0 - 3 * H),
        start("b", 1 * H, gpus=0.3, gpu_blocks=30, capacity_type="spot", cpu_milli=2000, memory_bytes=4 * GIB,
              labels={"cost-center": "cc1"}, created_at=T0 + H - 100, submitter="ann"),
        start("c", 4 * H, project="nlp", gpu_model="A100", gpus=2.0, gpu_indices=(0, 1), capacity_type="reserved",
              labels={"cost-center": "cc2"}, created_at=T0 + 4 * H - 300, queue="team-b", submitter="bob"),
        start("d", 9 * H, project="nlp", created_at=T0 + 9 * H - 20, queue="team-b", submitter="bob"),
        start("e", 11 * H, project="nlp"),
        start("f", -5 * H, project="nlp"),
    ])
    store.record_ends([
        end("a", -2 * H, 2 * H),
        end("c", 4 * H, 6 * H, EndReason.EVICTED_PREEMPTION, "ml/big"),
        end("d", 9 * H, 12 * H),
        end("e", 11 * H, 12 * H),
        end("f", -5 * H, -1 * H),
    ])
    store.record_samples([
        UtilisationSample("a", T0 - 2 * H, T0, gpu_util=50.0),
        UtilisationSample("c", T0 + 4 * H, T0 + 5 * H, gpu_util=10.0),
        UtilisationSample("d", T0 + 9 * H, T0 + 9.5 * H, gpu_util=1.0),
        UtilisationSample("d", T0 + 9 * H, T0 + 9.7 * H, gpu_util=3.0),
    ])
