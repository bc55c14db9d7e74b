"""The dashboard's sources: a live cluster read as `gpufleet snapshot` reads it (over the in-memory API
fake of tests/kube/inspect), read again after its refresh interval; and pods' hostile labels."""

from __future__ import annotations

import asyncio
from typing import Any

from gpufleet.domain import Pod, QueueName
from gpufleet.kube.inspect.snapshot import read_cluster
from gpufleet.web.access import Visibility
from gpufleet.web.fleet import Fleet
from gpufleet.web.source import ClusterSource
from gpufleet.web.views.jobs import JobFilters, job_list
from kube.inspect.cluster_objects import client


def test_a_live_cluster_is_read_and_read_again_after_its_refresh() -> None:
    api = client()
    reads: list[float] = []
    now = [1000.0]

    async def read() -> tuple[list[dict[str, Any]], str]:
        reads.append(now[0])
        snap = await read_cluster(api)
        return [dict(d) for d in snap.documents], "fake"

    source = ClusterSource(read, refresh_s=30.0, clock=lambda: now[0])

    async def scenario() -> tuple[Fleet, Fleet, Fleet]:
        first = await source.fleet()
        now[0] += 10
        same = await source.fleet()
        now[0] += 30
        again = await source.fleet()
        return first, same, again

    first, same, again = asyncio.run(scenario())
    assert first is same and again is not first and reads == [1000.0, 1040.0]
    assert {n.name for n in first.nodes} == {"n1", "n2", "n3"}
    assert source.describe() == "live: fake"
    assert first.jobs  # the cluster's pods, as jobs


def test_a_hostile_queue_label_shows_nothing_more_to_its_author(demo_fleet: Fleet) -> None:
    """A tenant's pod naming another team's queue is listed where the engine counts it (that queue);
    its author, seeing only its own project, gains no sight of the queue's other jobs."""
    snapshot = demo_fleet.snapshot
    intruder = Pod(namespace="intruder", name="sneak", queue_label=QueueName("team-b"), requests={},
                   creation_time=1.0)
    from dataclasses import replace

    fleet = Fleet.build(replace(snapshot, pods=(*snapshot.pods, intruder)))
    author = Visibility(projects=frozenset({"intruder-project"}))
    assert job_list(fleet, author, JobFilters()).total == 0  # no Project claims namespace intruder
    team_b = Visibility(queues=frozenset({"team-b"}))
    assert "intruder/sneak" in {j.key for j in job_list(fleet, team_b, JobFilters()).rows}
