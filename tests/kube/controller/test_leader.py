"""Leader election on a Lease: one leader, fenced by the renew deadline, takeover after expiry."""

from __future__ import annotations

import asyncio

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.leader import LeaderElector, LeaseConfig
from gpufleet.testing.fake_cluster import FakeCluster, VirtualClock

from .controller_objects import bound_pods, make_controller, running, small_cluster, until


def _elector(cluster: FakeCluster, identity: str) -> LeaderElector:
    config = LeaseConfig(namespace="ns", name="lease", identity=identity, lease_duration=15, renew_deadline=10,
                         retry_period=2)
    return LeaderElector(cluster.client(identity), cluster.clock, config)


@pytest.mark.asyncio
async def test_one_leader_and_takeover_only_after_the_lease_expires() -> None:
    cluster = FakeCluster()
    clock = cluster.clock
    assert isinstance(clock, VirtualClock)
    a, b = _elector(cluster, "a"), _elector(cluster, "b")
    assert await a.step() and not await b.step()
    lease = cluster.object(Kind.LEASE, "ns", "lease")
    assert lease is not None and lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["renewTime"].endswith("Z") and "." in lease["spec"]["renewTime"]  # MicroTime

    # a renews for a while; b keeps seeing a fresh record and stays a follower
    for _ in range(5):
        await clock.advance(2)
        assert await a.step() and not await b.step()

    # a stops renewing (partitioned). It stops acting at its renew deadline...
    await clock.advance(10)
    assert not a.is_leader()
    # ...before b may take over: b has seen the same record for only 10 s of the 15
    assert not await b.step()
    await clock.advance(5)
    assert await b.step() and b.is_leader()
    lease = cluster.object(Kind.LEASE, "ns", "lease")
    assert lease is not None and lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    # a comes back: it must not take the lease back while b renews
    assert not await a.step()


class _ReadTogether:
    """Both candidates read the Lease before either writes: a true race."""

    def __init__(self, inner: object, barrier: asyncio.Barrier) -> None:
        self.inner = inner
        self.barrier = barrier

    def __getattr__(self, item: str) -> object:
        return getattr(self.inner, item)

    async def get(self, *args: object) -> object:
        got = await self.inner.get(*args)  # type: ignore[attr-defined]
        await self.barrier.wait()
        return got


@pytest.mark.asyncio
@pytest.mark.parametrize("existing", [False, True])
async def test_racing_candidates_one_wins_by_optimistic_concurrency(existing: bool) -> None:
    cluster = FakeCluster()
    if existing:  # an expired lease of a third replica: both try to replace it
        old = _elector(cluster, "old")
        assert await old.step()
        assert isinstance(cluster.clock, VirtualClock)
        await cluster.clock.advance(1)
    a, b = _elector(cluster, "a"), _elector(cluster, "b")
    if existing:  # both have watched the old record for longer than its duration
        for candidate in (a, b):
            assert not await candidate.step()
        await cluster.clock.advance(16)  # type: ignore[attr-defined]
    barrier = asyncio.Barrier(2)
    a.api = _ReadTogether(a.api, barrier)  # type: ignore[assignment]
    b.api = _ReadTogether(b.api, barrier)  # type: ignore[assignment]
    results = await asyncio.gather(a.step(), b.step())
    assert sorted(results) == [False, True]
    assert cluster.count("replace" if existing else "create", status=409) == 1


@pytest.mark.asyncio
async def test_release_lets_the_next_replica_lead_at_once() -> None:
    cluster = FakeCluster()
    a, b = _elector(cluster, "a"), _elector(cluster, "b")
    assert await a.step() and not await b.step()
    await a.release()
    assert not a.is_leader()
    assert await b.step()


def test_lease_timings_must_nest() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseConfig(namespace="ns", name="l", identity="a", lease_duration=10, renew_deadline=10)


@pytest.mark.asyncio
async def test_two_controllers_only_the_leader_binds_and_the_follower_takes_over() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=4)
    clock = cluster.clock
    assert isinstance(clock, VirtualClock)
    lease = {"namespace": "ns", "name": "gpufleet", "lease_duration": 15, "renew_deadline": 10, "retry_period": 2}
    one = make_controller(cluster, "one", lease=LeaseConfig(identity="one", **lease))  # type: ignore[arg-type]
    two = make_controller(cluster, "two", lease=LeaseConfig(identity="two", **lease))  # type: ignore[arg-type]
    async with running(one) as one_task:
        await until(one.is_leader, what="one leads")
        async with running(two):
            await until(lambda: len(bound_pods(cluster)) == 4, what="4 bound")
            assert two.ready and not two.is_leader()  # the follower's informers are synced too (/readyz)
            writers = {c.caller for c in cluster.calls if c.op in ("patch", "bind", "patch_status")}
            assert writers == {"one"}
            one_task.cancel()  # the leader dies (and releases its lease on the way out)
            await asyncio.gather(one_task, return_exceptions=True)
            cluster.put(Kind.POD, {"metadata": {"name": "late", "namespace": "ml",
                                                "labels": {"gpufleet.dev/queue": "team-a"}},
                                   "spec": {"schedulerName": "gpufleet", "containers": [{"name": "c"}]}})
            for _ in range(3):
                await clock.advance(2)
            await until(lambda: "ml/late" in bound_pods(cluster), what="the follower binds")
            assert two.is_leader()
            assert [c.caller for c in cluster.calls if c.op == "bind" and c.name == "late"] == ["two"]
