"""An operator's eviction (``gpufleet admin``) ends the pod's ledger interval ``operator``: the accountant
reads the pod's ``gpufleet.dev/evicted-by`` when it goes; a pod gone without it ends ``deleted``."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.ledger import ANNOTATION_EVICTED_BY, EndReason, open_ledger
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import informing
from .test_controller_ledger import cluster_with, controller, flush

pytestmark = pytest.mark.asyncio


async def marked_then(tmp_path: Path, value: str, then: Callable[[FakeCluster], None]) -> dict[str, EndReason | None]:
    """Two pods bound (p0, p1); p0 annotated evicted-by ``value``; then ``then``: the intervals' ends."""
    cluster = cluster_with(pending=2)
    store = open_ledger(str(tmp_path / "ledger.db"))
    c = controller(cluster, store)
    async with informing(c):
        await c.cycle()
        obj = copy.deepcopy(cluster.object(Kind.POD, "ml", "p0"))
        assert obj is not None
        obj["metadata"]["annotations"][ANNOTATION_EVICTED_BY] = value
        cluster.put(Kind.POD, obj)
        await cluster.clock.advance(5)
        then(cluster)
        await cluster.clock.advance(1)
        flush(c)
    return {i.start.pod_name: i.end_reason for i in store.intervals()}


def deleted(cluster: FakeCluster) -> None:
    cluster.delete(Kind.POD, "ml", "p0")
    cluster.delete(Kind.POD, "ml", "p1")


@pytest.mark.parametrize(("value", "expected"), [("operator", EndReason.OPERATOR), ("someone", EndReason.DELETED)])
async def test_a_pod_marked_by_an_operator_ends_operator(tmp_path: Path, value: str, expected: EndReason) -> None:
    assert await marked_then(tmp_path, value, deleted) == {"p0": expected, "p1": EndReason.DELETED}


async def test_a_marked_pod_that_completes_ends_completed(tmp_path: Path) -> None:
    ends = await marked_then(tmp_path, "operator", lambda cluster: cluster.set_pod_phase("ml", "p0", "Succeeded"))
    assert ends == {"p0": EndReason.COMPLETED, "p1": None}
