"""The controller on the in-memory API: binding, gangs, preemption, PDBs, events, statuses, restarts."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from gpufleet.kube.client.port import ApiError, Kind
from gpufleet.kube.install.rbac import allowed
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import (
    bound_pods,
    clock_of,
    drive,
    events,
    informing,
    make_controller,
    node,
    pdb,
    pod,
    pod_group,
    queue,
    running,
    settle,
    small_cluster,
    until,
)


def _calls(cluster: FakeCluster, op: str, name: str) -> list[Any]:
    return [c for c in cluster.calls if c.op == op and c.name == name]


@pytest.mark.asyncio
async def test_binds_every_pending_pod_once_annotations_first() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=3)
    controller = make_controller(cluster)
    async with running(controller):
        await until(lambda: len(bound_pods(cluster)) == 3, what="3 pods bound")
    for name in ("p0", "p1", "p2"):
        obj = cluster.object(Kind.POD, "ml", name)
        assert obj is not None and obj["metadata"]["annotations"]["gpufleet.dev/gpu-index"]
        ops = [c.op for c in cluster.calls if c.name == name and c.op in ("patch", "bind")]
        assert ops == ["patch", "bind"], ops  # the annotation goes first, each call once
    # binpack: all three on one node, on three different GPUs
    placed = {cluster.object(Kind.POD, "ml", f"p{i}")["metadata"]["annotations"]["gpufleet.dev/gpu-index"]  # type: ignore[index]
              for i in range(3)}
    assert len(set(bound_pods(cluster).values())) == 1 and len(placed) == 3


@pytest.mark.asyncio
async def test_annotations_carried_by_the_binding_take_one_call() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=2)
    cluster.put(Kind.POD, pod("frac", 0, blocks=30))
    controller = make_controller(cluster, annotate_via="binding")
    async with running(controller):
        await until(lambda: len(bound_pods(cluster)) == 3, what="3 pods bound")
    assert cluster.count("patch") == 0 and cluster.count("bind") == 3
    frac = cluster.object(Kind.POD, "ml", "frac")
    assert frac is not None and frac["metadata"]["annotations"]["gpufleet.dev/gpu-index"]
    assert frac["metadata"]["annotations"]["gpufleet.dev/gpu-blocks"] == "30"


@pytest.mark.asyncio
async def test_a_gang_is_bound_all_or_nothing() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=0)
    cluster.put(Kind.POD_GROUP, pod_group("job", 2))
    for i in range(2):
        cluster.put(Kind.POD, pod(f"job-{i}", 4, group="job"))
    # The annotation of one member is refused once (a non-retryable error): no member is bound.
    cluster.fail("patch", 422, match=lambda ns, name: name == "job-1")
    controller = make_controller(cluster)
    async with informing(controller):
        first = await controller.cycle()
        assert set(first.failed) == {"ml/job-0", "ml/job-1"} and not first.bound
        assert bound_pods(cluster) == {}
        assert cluster.count("bind") == 0
        assert events(cluster, "BindingFailed")
        await settle()
        second = await controller.cycle()
        assert sorted(second.bound) == ["ml/job-0", "ml/job-1"]
    assert len(bound_pods(cluster)) == 2


def _reclaim_cluster(cluster: FakeCluster, *, budget: int | None = None) -> None:
    """One full node: 8 one-GPU pods of team-b (quota 0, so all borrowed), a 2-GPU pod of team-a
    (quota 8) pending: it must reclaim two of them."""
    cluster.put(Kind.NODE, node("n0"))
    cluster.put(Kind.QUEUE, queue("team-a", 8))
    cluster.put(Kind.QUEUE, queue("team-b", 0))
    for i in range(8):
        cluster.put(Kind.POD, pod(f"b{i}", queue="team-b", node_name="n0", phase="Running", gpu_index=str(i),
                                  labels={"app": "web"}, created=f"2026-01-01T00:00:0{i}Z"))
    if budget is not None:
        cluster.put(Kind.PDB, pdb("web", {"app": "web"}, min_available=budget))
    cluster.put(Kind.POD, pod("a0", 2, queue="team-a"))


@pytest.mark.asyncio
async def test_the_preemptor_waits_for_its_victims_to_terminate() -> None:
    cluster = FakeCluster(graceful_eviction=True)
    _reclaim_cluster(cluster)
    controller = make_controller(cluster)
    async with informing(controller):
        first = await controller.cycle()
        victims = sorted(e.pod for e in first.decisions.evictions)
        assert len(victims) == 2 and not first.bound and first.planned
        assert all(r.result == "evicted" for r in first.evicted)
        assert "a0" not in bound_pods(cluster)
        for key in victims:
            note = events(cluster, "Preempted", key.split("/")[1])[0]["note"]
            assert "reclaim" in note and "ml/a0" in note
        await settle()
        second = await controller.cycle()  # victims still terminating: nothing new is done
        assert not second.bound and cluster.count("evict") == 2
        assert events(cluster, "WaitingForVictims", "a0")
        cluster.finish_terminations()
        await settle()
        third = await controller.cycle()
        assert third.bound == ("ml/a0",)
    assert bound_pods(cluster)["ml/a0"] == "n0"
    assert cluster.count("bind") == 1


@pytest.mark.asyncio
async def test_a_pod_disruption_budget_makes_the_preemptor_wait_and_says_why() -> None:
    cluster = FakeCluster()
    _reclaim_cluster(cluster, budget=8)
    controller = make_controller(cluster, eviction_retry=10.0)
    clock = clock_of(cluster)
    async with running(controller):
        await until(lambda: controller.cycles >= 1 and bool(controller.plans), what="a plan")
        await settle()
        blocked = events(cluster, "EvictionBlocked", "a0")
        assert blocked and "PodDisruptionBudget (web)" in blocked[0]["note"], blocked
        assert "a0" not in str(bound_pods(cluster))
        evictions_before = cluster.count("evict", status=429)
        assert evictions_before == 2
        await clock.advance(10.0)  # retried, still refused
        await until(lambda: cluster.count("evict", status=429) == 4, what="a retry")
        cluster.put(Kind.PDB, pdb("web", {"app": "web"}, min_available=6))  # now two may go
        await clock.advance(10.0)
        await until(lambda: "ml/a0" in bound_pods(cluster), what="the preemptor bound")
    assert len([k for k in bound_pods(cluster) if k.startswith("ml/b")]) == 6
    assert cluster.count("bind") == 1


@pytest.mark.asyncio
async def test_pending_events_are_rate_limited_per_pod() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=0)
    cluster.put(Kind.POD, pod("huge", 16))  # no node has 16 GPUs
    controller = make_controller(cluster)
    clock = clock_of(cluster)
    async with informing(controller):
        for _ in range(5):
            await controller.cycle()
            await clock.advance(30)
        assert len(events(cluster, "FailedScheduling", "huge")) == 1
        await clock.advance(200)  # 350 s after the first: the same note may be repeated
        await controller.cycle()
        notes = [e["note"] for e in events(cluster, "FailedScheduling", "huge")]
    assert len(notes) == 2 and notes[0] == notes[1]
    assert "16" in notes[0]


@pytest.mark.asyncio
async def test_queue_and_pod_group_statuses() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=2)
    cluster.put(Kind.QUEUE, queue("research", 12))
    cluster.put(Kind.QUEUE, {**queue("team-a", 8, parent="research")})
    cluster.put(Kind.QUEUE, {**queue("team-b", 8, parent="research")})
    cluster.put(Kind.POD_GROUP, pod_group("job", 2))
    for i in range(2):
        cluster.put(Kind.POD, pod(f"job-{i}", 4, group="job"))
    controller = make_controller(cluster)
    async with informing(controller):
        await controller.cycle()
        await settle()
    team_a = cluster.object(Kind.QUEUE, "", "team-a")["status"]  # type: ignore[index]
    assert team_a["usage"]["nvidia.com/gpu"] == "10"  # 2 x 1 + 2 x 4
    assert team_a["guaranteedUsage"]["nvidia.com/gpu"] == "8"  # the part within its quota of 8
    assert team_a["borrowed"]["nvidia.com/gpu"] == "2"
    assert team_a["admittedGangs"] == 3 and team_a["pendingGangs"] == 0
    research = cluster.object(Kind.QUEUE, "", "research")["status"]  # type: ignore[index]
    assert research["usage"]["nvidia.com/gpu"] == "10"
    assert research["guaranteedUsage"]["nvidia.com/gpu"] == "8"  # team-a's 2 borrowed do not count
    over = {c["type"]: c for c in research["conditions"]}["OverCommitted"]
    assert over["status"] == "True" and "16" in over["message"]
    group = cluster.object(Kind.POD_GROUP, "ml", "job")["status"]  # type: ignore[index]
    assert group["phase"] == "Admitted" and group["boundPods"] == 2
    # Unchanged statuses are not written again.
    writes = cluster.count("patch_status")
    async with informing(controller):
        await controller.cycle()
    assert cluster.count("patch_status") == writes


@pytest.mark.asyncio
async def test_guaranteed_usage_is_the_part_of_usage_within_quota() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=2)
    cluster.put(Kind.QUEUE, queue("research", 6))
    cluster.put(Kind.QUEUE, queue("team-a", 8, parent="research"))  # over-commits research
    cluster.put(Kind.QUEUE, queue("team-c", parent="research"))  # no quota: nothing guaranteed
    cluster.put(Kind.POD_GROUP, pod_group("job", 2))
    for i in range(2):
        cluster.put(Kind.POD, pod(f"job-{i}", 4, group="job"))
    cluster.put(Kind.POD, pod("c0", 1, queue="team-c"))
    controller = make_controller(cluster)
    async with informing(controller):
        await controller.cycle()
        await settle()

    def figures(name: str) -> tuple[str, str, str]:
        status = cluster.object(Kind.QUEUE, "", name)["status"]  # type: ignore[index]
        return (status["usage"]["nvidia.com/gpu"], status["guaranteedUsage"]["nvidia.com/gpu"],
                status["borrowed"]["nvidia.com/gpu"])

    assert figures("team-a") == ("10", "8", "2")  # min(usage 10, quota 8)
    assert figures("team-c") == ("1", "0", "1")
    # research: min(8 + 0 from its children, its quota of 6)
    assert figures("research") == ("11", "6", "5")
    assert figures("team-b") == ("0", "0", "0")


@pytest.mark.asyncio
async def test_a_lost_binding_answer_is_not_a_second_binding() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=1)
    cluster.fail("bind", 0, after_apply=True)  # the binding is applied, its answer lost
    controller = make_controller(cluster)
    async with informing(controller):
        result = await drive(cluster, controller.cycle())
    assert result.bound == ("ml/p0",)
    assert [c.status for c in _calls(cluster, "bind", "p0")] == [0, 409]  # the retry finds it bound
    assert cluster.count("get") == 1


class _Hang:
    """A ClusterApi wrapper whose bind() never answers for the pods named: a crash mid-cycle."""

    def __init__(self, inner: Any, names: set[str]) -> None:
        self.inner = inner
        self.names = names
        self.stuck = asyncio.Event()

    def __getattr__(self, item: str) -> Any:
        return getattr(self.inner, item)

    async def bind(self, namespace: str, name: str, node_name: str, annotations: Any = None) -> None:
        if name in self.names:
            self.stuck.set()
            await asyncio.Event().wait()
        await self.inner.bind(namespace, name, node_name, annotations)


@pytest.mark.asyncio
async def test_restart_after_a_crash_with_bindings_in_flight() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=6)
    first = make_controller(cluster, "first")
    hang = _Hang(first.api, {"p2", "p3"})
    first.api = hang
    first.binder.api = hang
    task = asyncio.create_task(first.run())
    await until(lambda: hang.stuck.is_set() and len(bound_pods(cluster)) == 4, what="a cycle half done")
    assert {"ml/p2", "ml/p3"} <= set(first.binder.inflight)
    task.cancel()  # the controller dies: p2 and p3 are annotated, their Bindings never sent
    await asyncio.gather(task, return_exceptions=True)
    stale = cluster.object(Kind.POD, "ml", "p2")
    assert stale is not None and "gpufleet.dev/gpu-index" in stale["metadata"]["annotations"]
    assert "nodeName" not in stale["spec"]

    second = make_controller(cluster, "second")
    async with running(second):
        await until(lambda: len(bound_pods(cluster)) == 6, what="all six bound")
        await settle()
    binds = Counter(c.name for c in cluster.calls if c.op == "bind" and c.status == 201)
    assert binds == {f"p{i}": 1 for i in range(6)}  # none twice, none lost
    gpus = [(bound_pods(cluster)[f"ml/p{i}"], cluster.object(Kind.POD, "ml", f"p{i}")["metadata"]["annotations"]
             ["gpufleet.dev/gpu-index"]) for i in range(6)]  # type: ignore[index]
    assert len(set(gpus)) == 6  # no GPU given twice
    usage = cluster.object(Kind.QUEUE, "", "team-a")["status"]["usage"]["nvidia.com/gpu"]  # type: ignore[index]
    assert usage == "6"


@pytest.mark.asyncio
async def test_bad_objects_are_left_out_and_the_rest_scheduled() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=1)
    cluster.put(Kind.POD, pod("lost", queue="no-such-queue"))
    broken = pod("broken")
    broken["metadata"]["annotations"]["gpufleet.dev/gpu-blocks"] = "500"
    cluster.put(Kind.POD, broken)
    controller = make_controller(cluster)
    async with informing(controller):
        view = controller.snapshot()
        assert any("gpu-blocks" in p for p in view.problems)
        result = await controller.cycle()
    assert result.bound == ("ml/p0",)
    assert "does not exist" in events(cluster, "FailedScheduling", "lost")[0]["note"]


@pytest.mark.asyncio
async def test_every_call_the_controller_makes_is_in_the_rbac_rules() -> None:
    cluster = FakeCluster(graceful_eviction=True)
    _reclaim_cluster(cluster)
    cluster.put(Kind.POD_GROUP, pod_group("job", 1, queue="team-a"))
    from gpufleet.kube.controller.leader import LeaseConfig

    lease = LeaseConfig(namespace="gpufleet-system", name="gpufleet", identity="c")
    controller = make_controller(cluster, "c", lease=lease)
    async with running(controller):
        await clock_of(cluster).advance(0.1)
        await until(lambda: controller.cycles >= 1 and cluster.count("evict") >= 2, what="a cycle")
        cluster.finish_terminations()
        await until(lambda: "ml/a0" in bound_pods(cluster), what="the preemptor bound")
        await settle()
    used = {(c.op, c.kind) for c in cluster.calls if c.caller == "c"}
    assert {op for op, _ in used} >= {"list", "watch", "get", "create", "patch", "patch_status", "bind", "evict"}
    assert [u for u in used if not allowed(*u)] == []


@pytest.mark.asyncio
async def test_not_the_leader_means_no_writes() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=2)
    controller = make_controller(cluster)
    controller.is_leader = lambda: False  # type: ignore[method-assign]
    controller.binder.is_leader = controller.is_leader
    async with informing(controller):
        result = await controller.cycle()
    assert result.skipped == "not the leader" and len(result.decisions.bindings) == 2
    assert cluster.count("patch") == cluster.count("bind") == cluster.count("patch_status") == 0


def test_api_error_retryable() -> None:
    assert ApiError(0).retryable and ApiError(503).retryable and ApiError(409).retryable
    assert not ApiError(404).retryable and not ApiError(422).retryable


def test_fractional_binding_carries_the_mps_memory_limit_of_its_blocks() -> None:
    """The webhook's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT reads gpufleet.dev/mps-mem-limit: the
    controller writes it with the binding, from the node's GPU memory and the blocks held."""
    from gpufleet.domain import Binding, NodeName, PodKey
    from gpufleet.kube.controller.binder import desired_annotations

    binding = Binding(PodKey("ml/nb"), NodeName("n1"), (3,), 25)
    wanted = desired_annotations({"metadata": {"annotations": {}}}, binding, 81920)
    assert wanted == {"gpufleet.dev/gpu-index": "3", "gpufleet.dev/gpu-blocks": "25",
                      "gpufleet.dev/mps-mem-limit": "0=20480M"}
    # unknown GPU memory: no limit written; a whole-GPU binding drops a stale one
    assert "gpufleet.dev/mps-mem-limit" not in desired_annotations(None, binding, None)
    whole = Binding(PodKey("ml/nb"), NodeName("n1"), (0, 1), None)
    stale = {"metadata": {"annotations": {"gpufleet.dev/mps-mem-limit": "0=1M"}}}
    assert desired_annotations(stale, whole)["gpufleet.dev/mps-mem-limit"] is None


@pytest.mark.asyncio
async def test_no_borrower_is_started_only_to_be_reclaimed_the_next_cycle() -> None:
    """docs/semantics-notes.md, Replay (victims admitted in the same pass): a-borrow (queue a, no
    quota) is taken before b's in-quota b-small, which stands behind b's head b-big (4 GPUs,
    borrowing). Before, the first cycle bound a-borrow and the second evicted it for b-small."""
    cluster = FakeCluster()
    cluster.put(Kind.NODE, node("n0", gpus=1))
    cluster.put(Kind.QUEUE, queue("a", 0))
    cluster.put(Kind.QUEUE, queue("b", 2))
    cluster.put(Kind.POD, pod("a-borrow", 1, queue="a", created="2026-01-01T00:00:01Z"))
    cluster.put(Kind.POD, pod("b-big", 4, queue="b", created="2026-01-01T00:00:02Z"))
    cluster.put(Kind.POD, pod("b-small", 1, queue="b", created="2026-01-01T00:00:03Z"))
    controller = make_controller(cluster)
    async with informing(controller):
        first = await controller.cycle()
        assert first.bound == ("ml/b-small",) and not first.decisions.evictions
        reason = next(p.reason for p in first.decisions.pending if p.pod == "ml/a-borrow")
        assert reason.endswith("admitted in this pass, then taken back for ml/b-small")
        await settle()
        second = await controller.cycle()
        assert not second.decisions.evictions and not second.bound
    assert bound_pods(cluster) == {"ml/b-small": "n0"}
    assert cluster.count("evict") == 0
