"""`gpufleet admin reclaim | priority | drain` against the HTTP API server emulator: reclaim evicts only
the borrowing gangs, whole, newest first, until the queue is at its quota, with Events and the ledger's
mark; priority changes the PodGroup; drain cordons and marks the node, or evicts a GPU's gangs; dry runs
write nothing; bad input is one line and exit 2."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from click.testing import CliRunner, Result

from gpufleet.cli import main
from gpufleet.commands import cluster_tools
from gpufleet.domain import ANNOTATION_DRAIN
from gpufleet.kube import Kind, connect
from gpufleet.kube.controller.grouper import ANNOTATION_OPERATOR_PRIORITY, MANAGED_BY
from gpufleet.ledger import ANNOTATION_EVICTED_BY
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster
from kube.controller.controller_objects import node, pdb, pod, pod_group, priority_class, queue

WRITES = ("create", "patch", "patch_status", "replace", "delete", "evict", "bind")


def running(name: str, *, node_name: str, started: str, group: str | None = None, q: str = "team-a",
            gpus: int = 1, gpu_index: str | None = None) -> dict[str, Any]:
    return pod(name, gpus, queue=q, group=group, node_name=node_name, phase="Running", created=started,
               gpu_index=gpu_index)


@pytest_asyncio.fixture
async def emulator(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator(store=FakeCluster()) as server:
        store = server.store
        for name in ("n1", "n2"):
            store.put(Kind.NODE, node(name))
        store.put(Kind.QUEUE, queue("team-a", 3))
        store.put(Kind.QUEUE, queue("team-b", 12))
        store.put(Kind.PRIORITY_CLASS, priority_class("high", 50))
        for name in ("old", "new"):
            store.put(Kind.POD_GROUP, pod_group(name, 2))
        # team-a: quota 3, uses 5 (old: 2, solo: 1, new: 2); team-b: 2 of 12.
        for i in range(2):
            store.put(Kind.POD, running(f"old-{i}", node_name="n1", started="2026-01-01T01:00:00Z", group="old",
                                        gpu_index=str(i)))
            store.put(Kind.POD, running(f"new-{i}", node_name="n1" if i == 0 else "n2",
                                        started="2026-01-01T03:00:00Z", group="new", gpu_index=str(2 + i)))
            store.put(Kind.POD, running(f"b-{i}", node_name="n2", started="2026-01-01T04:00:00Z", q="team-b",
                                        gpu_index=str(4 + i)))
        store.put(Kind.POD, running("solo", node_name="n2", started="2026-01-01T02:00:00Z", gpu_index="0"))
        monkeypatch.setattr(cluster_tools, "api_factory", lambda kubeconfig, context: connect(server=server.url_text))
        yield server


async def admin(*args: str) -> Result:
    """The CLI in a thread of its own (its own event loop), joined before returning."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return await asyncio.get_running_loop().run_in_executor(pool, CliRunner().invoke, main, ["admin", *args])


def writes(server: ApiServerEmulator) -> int:
    return sum(server.store.count(op) for op in WRITES)


def alive(server: ApiServerEmulator) -> set[str]:
    return {p["metadata"]["name"] for p in server.store.objects(Kind.POD)}


def events(server: ApiServerEmulator, reason: str) -> list[dict[str, Any]]:
    return [e for e in server.store.objects(Kind.EVENT) if e["reason"] == reason]


@pytest.mark.asyncio
async def test_reclaim_evicts_the_newest_borrowing_gang_whole_until_at_quota(emulator: ApiServerEmulator) -> None:
    result = await admin("reclaim", "team-a")
    assert result.exit_code == 0, result.output
    assert alive(emulator) == {"old-0", "old-1", "solo", "b-0", "b-1"}
    assert emulator.store.count("evict") == 2
    patched = [c for c in emulator.store.calls if c.op == "patch" and c.kind is Kind.POD]
    assert {c.name for c in patched} == {"new-0", "new-1"}  # marked for the ledger before the eviction
    found = events(emulator, "OperatorReclaim")
    assert sorted((e["regarding"]["kind"], e["regarding"]["name"]) for e in found) == [
        ("Pod", "new-0"), ("Pod", "new-1"), ("PodGroup", "new")]
    assert all("queue team-a uses 5 nvidia.com/gpu over its quota of 3" in e["note"] for e in found)
    assert result.output.splitlines()[-1] == ("queue team-a used 5 nvidia.com/gpu of its quota of 3 nvidia.com/gpu; "
                                              "it uses 3 nvidia.com/gpu now that 1 gang(s) were evicted")


@pytest.mark.asyncio
async def test_reclaim_marks_each_pod_for_the_ledger_before_evicting(emulator: ApiServerEmulator) -> None:
    emulator.store.graceful_eviction = True  # evicted pods linger: their annotations can be read
    result = await admin("reclaim", "team-a")
    assert result.exit_code == 0, result.output
    for name in ("new-0", "new-1"):
        obj = emulator.store.object(Kind.POD, "ml", name)
        assert obj is not None and obj["metadata"]["annotations"][ANNOTATION_EVICTED_BY] == "operator"


@pytest.mark.asyncio
async def test_reclaim_goes_on_until_the_queue_is_at_quota(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    obj = store.object(Kind.QUEUE, "", "team-a")
    assert obj is not None
    obj["spec"]["resources"]["nvidia.com/gpu"]["quota"] = "1"
    store.put(Kind.QUEUE, obj)
    dry = await admin("reclaim", "team-a", "--dry-run")
    assert dry.exit_code == 0, dry.output
    lines = [line for line in dry.output.splitlines() if line.startswith("would evict")]
    assert [line.split()[3] for line in lines] == ["ml/new", "ml/solo", "ml/old"]  # newest first, whole gangs
    assert writes(emulator) == 0


@pytest.mark.asyncio
async def test_reclaim_dry_run_writes_nothing(emulator: ApiServerEmulator) -> None:
    result = await admin("reclaim", "team-a", "--dry-run")
    assert result.exit_code == 0, result.output
    assert writes(emulator) == 0
    assert result.output.splitlines()[0].startswith("would evict gang ml/new of queue team-a (2 pods: ml/new-0, ml/new-1)")


@pytest.mark.asyncio
async def test_reclaim_of_a_queue_within_quota_evicts_nothing(emulator: ApiServerEmulator) -> None:
    result = await admin("reclaim", "team-b")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "queue team-b uses 2 nvidia.com/gpu of its quota of 12 nvidia.com/gpu: nothing to reclaim"
    assert writes(emulator) == 0


@pytest.mark.asyncio
async def test_reclaim_of_a_parent_takes_its_childrens_gangs(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.QUEUE, queue("org", 4))
    for name in ("team-a", "team-b"):
        obj = store.object(Kind.QUEUE, "", name)
        assert obj is not None
        obj["spec"]["parent"] = "org"
        obj["spec"]["resources"]["nvidia.com/gpu"]["quota"] = "2"
        store.put(Kind.QUEUE, obj)
    result = await admin("reclaim", "org", "--dry-run")  # org uses 7 of 4; team-a (5 of 2) goes first
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("would evict")]
    assert [line.split()[3] for line in lines] == ["ml/new", "ml/solo"]
    assert "its queue team-a is over its own quota too" in lines[0]


@pytest.mark.asyncio
async def test_reclaim_honours_a_pod_disruption_budget(emulator: ApiServerEmulator) -> None:
    emulator.store.put(Kind.PDB, pdb("keep", {"gpufleet.dev/pod-group": "new"}, min_available=2))
    result = await admin("reclaim", "team-a")
    assert result.exit_code == 1
    assert "2 pod(s) kept by a PodDisruptionBudget: ml/new-0, ml/new-1" in result.output
    assert {"new-0", "new-1"} <= alive(emulator)
    obj = emulator.store.object(Kind.POD, "ml", "new-0")
    assert obj is not None and ANNOTATION_EVICTED_BY not in obj["metadata"]["annotations"]  # unmarked again


@pytest.mark.asyncio
async def test_reclaim_of_an_unknown_queue_is_one_line_and_exit_2(emulator: ApiServerEmulator) -> None:
    result = await admin("reclaim", "nope")
    assert result.exit_code == 2
    assert result.output.strip() == "gpufleet admin reclaim: queue 'nope' does not exist"


@pytest.mark.asyncio
async def test_priority_sets_the_podgroups_class(emulator: ApiServerEmulator) -> None:
    result = await admin("priority", "ml/old", "high")
    assert result.exit_code == 0, result.output
    group = emulator.store.object(Kind.POD_GROUP, "ml", "old")
    assert group is not None and group["spec"]["priorityClassName"] == "high"
    assert ANNOTATION_OPERATOR_PRIORITY not in (group["metadata"].get("annotations") or {})  # not the grouper's
    (event,) = events(emulator, "OperatorPriority")
    assert event["regarding"]["name"] == "old" and "-> high" in event["note"]


@pytest.mark.asyncio
async def test_priority_of_a_workload_changes_the_podgroup_the_grouper_made(emulator: ApiServerEmulator) -> None:
    group = pod_group("job-train-0123456789", 2)
    group["metadata"]["labels"] = dict([MANAGED_BY])
    group["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                             "uid": "u1", "controller": True}]
    emulator.store.put(Kind.POD_GROUP, group)
    dry = await admin("priority", "ml/train", "high", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert writes(emulator) == 0
    assert dry.output.strip() == "PodGroup ml/job-train-0123456789: would set priorityClassName high (was none)"
    result = await admin("priority", "ml/train", "high")
    assert result.exit_code == 0, result.output
    stored = emulator.store.object(Kind.POD_GROUP, "ml", "job-train-0123456789")
    assert stored is not None and stored["spec"]["priorityClassName"] == "high"
    assert stored["metadata"]["annotations"][ANNOTATION_OPERATOR_PRIORITY] == "high"  # the grouper keeps it


@pytest.mark.asyncio
@pytest.mark.parametrize(("args", "line"), [
    (["ml/old", "nope"], "gpufleet admin priority: CLASS: priority class 'nope' does not exist"),
    (["ml/ghost", "high"], "gpufleet admin priority: JOB: no PodGroup ml/ghost, and none the pod-grouper made "
                           "for a workload named ghost in namespace ml"),
    (["old", "high"], "gpufleet admin priority: JOB: expected NAMESPACE/NAME of a PodGroup or of a workload, "
                      "got 'old'"),
])
async def test_priority_bad_input_is_one_line_and_exit_2(emulator: ApiServerEmulator, args: list[str],
                                                         line: str) -> None:
    result = await admin("priority", *args)
    assert result.exit_code == 2
    assert result.output.strip() == line
    assert writes(emulator) == 0


@pytest.mark.asyncio
async def test_drain_cordons_and_marks_the_node_for_the_controller(emulator: ApiServerEmulator) -> None:
    dry = await admin("drain", "n1", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert writes(emulator) == 0
    assert [line.split()[3] for line in dry.output.splitlines()[1:]] == ["ml/new", "ml/old"]  # every gang on n1, whole
    result = await admin("drain", "n1")
    assert result.exit_code == 0, result.output
    obj = emulator.store.object(Kind.NODE, "", "n1")
    assert obj is not None and obj["spec"]["unschedulable"] is True
    assert obj["metadata"]["annotations"][ANNOTATION_DRAIN] == "true"
    assert emulator.store.count("evict") == 0  # the controller drains it, gang by gang, requeued
    (event,) = events(emulator, "OperatorDrain")
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": obj["metadata"]["uid"]}


@pytest.mark.asyncio
async def test_drain_of_a_gpu_evicts_the_gangs_on_it_whole(emulator: ApiServerEmulator) -> None:
    dry = await admin("drain", "n2/3", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert writes(emulator) == 0
    result = await admin("drain", "n2/3")
    assert result.exit_code == 0, result.output
    assert alive(emulator) == {"old-0", "old-1", "solo", "b-0", "b-1"}  # new-1 holds GPU 3: all of gang new
    node_obj = emulator.store.object(Kind.NODE, "", "n2")
    assert node_obj is not None and not node_obj["spec"].get("unschedulable")
    assert {e["regarding"]["name"] for e in events(emulator, "OperatorDrain")} == {"new-0", "new-1", "new", "n2"}


@pytest.mark.asyncio
@pytest.mark.parametrize(("target", "line"), [
    ("nope", "gpufleet admin drain: NODE: node nope does not exist"),
    ("n1/8", "gpufleet admin drain: GPU: node n1 has 8 GPU(s) (indices 0 to 7), not GPU 8"),
    ("N1", 'gpufleet admin drain: NODE[/GPU]: expected a node name such as "gpu-node-1", or a node and GPU '
           'indices such as "gpu-node-1/3", got \'N1\''),
    ("n1/x", 'gpufleet admin drain: NODE[/GPU]: expected a node name such as "gpu-node-1", or a node and GPU '
             'indices such as "gpu-node-1/3", got \'n1/x\''),
])
async def test_drain_bad_input_is_one_line_and_exit_2(emulator: ApiServerEmulator, target: str, line: str) -> None:
    result = await admin("drain", target)
    assert result.exit_code == 2
    assert result.output.strip() == line
    assert writes(emulator) == 0


@pytest.mark.asyncio
async def test_the_operator_role_allows_every_call_the_commands_make(emulator: ApiServerEmulator) -> None:
    from gpufleet.kube.install.rbac import allowed
    from gpufleet.kube.install.tenancy import OPERATOR_RULES

    for args in (["reclaim", "team-a"], ["priority", "ml/old", "high"], ["drain", "n2/0"], ["drain", "n1"]):
        result = await admin(*args)
        assert result.exit_code == 0, result.output
    used = {(call.op, call.kind) for call in emulator.store.calls}
    assert {("evict", Kind.POD), ("patch", Kind.NODE), ("patch", Kind.POD_GROUP), ("create", Kind.EVENT)} <= used
    assert [u for u in used if not allowed(*u, rules=OPERATOR_RULES)] == []
