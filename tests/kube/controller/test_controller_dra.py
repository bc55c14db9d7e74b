"""The controller on a cluster that does not serve resource.k8s.io/v1 (404 on every DRA kind): it
becomes ready and schedules as before, each absent kind said once in the log."""

from __future__ import annotations

import logging

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.convert import DRA_KINDS
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, clock_of, make_controller, running, small_cluster, until


@pytest.mark.asyncio
async def test_without_the_dra_api_the_controller_schedules_as_before(caplog: pytest.LogCaptureFixture) -> None:
    cluster = FakeCluster(not_served=DRA_KINDS)
    small_cluster(cluster, pending=2)
    controller = make_controller(cluster)
    with caplog.at_level(logging.WARNING, logger="gpufleet.kube.controller.informers"):
        async with running(controller):
            await until(lambda: len(bound_pods(cluster)) == 2, what="2 pods bound")
            for _ in range(10):  # the informers retry on their backoff
                await clock_of(cluster).advance(1.0)
    said = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
    assert sorted(said) == sorted(f"{kind.plural}: not served by the API server (resource.k8s.io/v1); none until it is"
                                  for kind in DRA_KINDS)
    assert all(call.kind is not Kind.RESOURCE_CLAIM for call in cluster.calls if call.op != "list" and call.op != "watch")
