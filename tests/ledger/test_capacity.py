"""The one rule that reads a node's capacity type (on-demand, spot, reserved) from its labels, and the
ledger keeping it per interval (migration 0002)."""

from __future__ import annotations

import pytest

from gpufleet.ledger import LedgerStore
from gpufleet.ledger.capacity import CapacityType, capacity_type_of

from .helpers import start


@pytest.mark.parametrize(("labels", "expected"), [
    ({}, None),
    ({"gpufleet.dev/capacity-type": "reserved"}, CapacityType.RESERVED),
    ({"gpufleet.dev/capacity-type": "reserved", "karpenter.sh/capacity-type": "spot"}, CapacityType.RESERVED),
    ({"gpufleet.dev/capacity-type": "bogus", "karpenter.sh/capacity-type": "spot"}, CapacityType.SPOT),
    ({"gpufleet.dev/spot": "true"}, CapacityType.SPOT),
    ({"karpenter.sh/capacity-type": "on-demand"}, CapacityType.ON_DEMAND),
    ({"cloud.google.com/gke-spot": "true"}, CapacityType.SPOT),
    ({"cloud.google.com/gke-spot": "false"}, None),
    ({"cloud.google.com/gke-preemptible": "true"}, CapacityType.SPOT),
    ({"eks.amazonaws.com/capacityType": "SPOT"}, CapacityType.SPOT),
    ({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, CapacityType.ON_DEMAND),
    ({"eks.amazonaws.com/capacityType": "CAPACITY_BLOCK"}, CapacityType.RESERVED),
    ({"kubernetes.azure.com/scalesetpriority": "spot"}, CapacityType.SPOT),
    ({"kubernetes.azure.com/scalesetpriority": "regular"}, CapacityType.ON_DEMAND),
])
def test_capacity_type_of_node_labels(labels: dict[str, str], expected: CapacityType | None) -> None:
    assert capacity_type_of(labels) == expected


def test_the_ledger_keeps_the_capacity_type(store: LedgerStore) -> None:
    store.record_starts([start("s", capacity_type="spot"), start("o")])
    assert {i.start.pod_uid: i.start.capacity_type for i in store.intervals()} == {"s": CapacityType.SPOT, "o": None}


def test_an_unknown_capacity_type_is_refused() -> None:
    with pytest.raises(ValueError, match="'preemptible' is not a valid CapacityType"):
        start("x", capacity_type="preemptible")


def test_a_ledger_made_before_migration_0002_is_upgraded_in_place(ledger_url: str) -> None:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    from gpufleet.ledger import open_ledger
    from gpufleet.ledger.store import _MIGRATIONS, LedgerStore, database_url

    old = LedgerStore(database_url(ledger_url))
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with old._engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0001")
        conn.execute(text("INSERT INTO ledger_intervals (pod_uid, bound_us, namespace, pod_name, queue, preemptible, "
                          "node, gpu_indices, gpus, cpu_milli, memory_bytes) "
                          "VALUES ('old', 1000000, 'ns', 'p', 'q', false, 'n', '', 1.0, 0, 0)"))
    old.close()
    with open_ledger(ledger_url) as store:
        (interval,) = store.intervals()
        assert (interval.start.pod_uid, interval.start.capacity_type) == ("old", None)
        store.record_starts([start("new", capacity_type="reserved")])
        assert {i.start.capacity_type for i in store.intervals()} == {None, CapacityType.RESERVED}
