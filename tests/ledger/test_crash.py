"""kill -9 during a burst of 10,000 bindings: no committed interval is lost, none is counted twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from gpufleet.ledger import open_ledger

BURST = 10_000
BATCH = 50

# The child writes the burst in batches, one transaction each, and prints how many intervals are
# committed after each commit returns.
CHILD = f"""
import sys
from gpufleet.ledger import IntervalStart, open_ledger
store = open_ledger(sys.argv[1])
starts = [IntervalStart(pod_uid=f"uid-{{i:05d}}", bound_at=1_790_000_000.0 + i / 1000, namespace="ml",
                        pod_name=f"p{{i}}", queue="team-a", node=f"node-{{i % 97}}", gpus=1.0,
                        labels={{"cost-center": f"cc{{i % 7}}"}}) for i in range({BURST})]
for first in range(0, {BURST}, {BATCH}):
    store.record_starts(starts[first:first + {BATCH}])
    print(first + {BATCH}, flush=True)
sys.stdin.read()  # never exits on its own: it is always killed, wherever it is
"""


def _burst():  # type: ignore[no-untyped-def]
    from gpufleet.ledger import IntervalStart

    return [IntervalStart(pod_uid=f"uid-{i:05d}", bound_at=1_790_000_000.0 + i / 1000, namespace="ml",
                          pod_name=f"p{i}", queue="team-a", node=f"node-{i % 97}", gpus=1.0,
                          labels={"cost-center": f"cc{i % 7}"}) for i in range(BURST)]


def test_kill_9_mid_burst_loses_no_committed_interval_and_doubles_none(ledger_url: str) -> None:
    open_ledger(ledger_url).close()  # migrated before the child starts: the kill lands in the burst
    child = subprocess.Popen([sys.executable, "-c", CHILD, ledger_url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert child.stdout is not None
    committed = 0
    for line in child.stdout:
        committed = int(line)
        if committed >= BURST // 20:  # early: 190 batches still to go when the kill lands
            child.send_signal(signal.SIGKILL)
            break
    committed = max([committed, *(int(line) for line in child.stdout)])  # what it printed before dying
    assert child.wait() == -signal.SIGKILL
    assert child.stdin is not None
    child.stdin.close()
    child.stdout.close()
    assert BATCH <= committed < BURST, "the kill should land mid-burst"

    with open_ledger(ledger_url) as store:
        uids = [s.pod_uid for s in store.open_intervals()]
        assert len(uids) == len(set(uids))  # none twice
        assert set(uids) >= {f"uid-{i:05d}" for i in range(committed)}  # every committed one is there
        assert len(uids) % BATCH == 0  # a batch is all or nothing
        assert all(len(s.labels) == 1 for s in store.open_intervals())
        if store.dialect == "sqlite":
            with store._engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA integrity_check").scalar_one() == "ok"

        store.record_starts(_burst())  # the controller sends the whole burst again after its restart
        again = store.open_intervals()
        assert len(again) == BURST == len({s.pod_uid for s in again})
