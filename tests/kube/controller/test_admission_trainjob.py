"""Admission by suspension of a Kubeflow TrainJob (docs/semantics-notes.md), whose pod template and
node count live in its runtime (a TrainingRuntime of its namespace or a ClusterTrainingRuntime): the
real controller over HTTP against the API server emulator. The test plays the Kubeflow Trainer and
JobSet controllers: the TrainJob's JobSet, Job and pods exist only once it is unsuspended."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.kube.install.rbac import allowed
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, eventually, node, pod
from .test_admission_suspend import cluster, cycles, not_admitted_events, running

pytestmark = pytest.mark.asyncio

JsonDict = dict[str, Any]
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
RJOB = "jobset.sigs.k8s.io/replicatedjob-name"


def runtime(kind: Kind = Kind.TRAINING_RUNTIME, name: str = "torch-distributed") -> JsonDict:
    """A runtime after upstream's torch-distributed: an initializer and the trainer's "node" job (one
    GPU per node in the runtime; the TrainJob asks for more)."""
    node_template = {"spec": {"schedulerName": "gpufleet", "containers": [
        {"name": "node", "image": "pytorch/pytorch:2.7", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    init_template = {"spec": {"schedulerName": "gpufleet", "containers": [{"name": "dataset-initializer",
                                                                           "image": "init:1"}]}}
    meta: JsonDict = {"name": name, **({"namespace": "ml"} if kind.namespaced else {})}
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta, "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
        "template": {"spec": {"replicatedJobs": [
            {"name": "dataset-initializer", "template": {"metadata": {"labels": {ANCESTOR: "dataset-initializer"}},
                                                         "spec": {"template": init_template}}},
            {"name": "node", "dependsOn": [{"name": "dataset-initializer", "status": "Complete"}],
             "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {"template": node_template}}},
        ]}}}}


def trainjob(name: str, runtime_ref: JsonDict, nodes: int | None = 2, gpus: int = 4) -> JsonDict:
    trainer: JsonDict = {"image": "ghcr.io/kubeflow/trainer/mnist:1",
                         "resourcesPerNode": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    if nodes is not None:
        trainer["numNodes"] = nodes
    return {"apiVersion": Kind.TRAIN_JOB.api_version, "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "ml", "labels": {"gpufleet.dev/queue": "team-a"}},
            "spec": {"suspend": True, "runtimeRef": runtime_ref, "trainer": trainer}}


def is_suspended(store: FakeCluster, name: str) -> bool:
    return bool((store.object(Kind.TRAIN_JOB, "ml", name) or {}).get("spec", {}).get("suspend"))


def owned(obj: JsonDict, owner: JsonDict) -> JsonDict:
    meta = owner["metadata"]
    obj["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                           "name": meta["name"], "uid": meta["uid"], "controller": True}]
    return obj


TEMPLATE = {"spec": {"schedulerName": "gpufleet", "containers": [{"name": "node", "image": "x"}]}}


def make_jobset(store: FakeCluster, name: str, nodes: int, suspend: bool = False) -> JsonDict:
    """The Trainer's JobSet of the TrainJob (upstream makes it at once, suspended as the TrainJob is)."""
    train = store.object(Kind.TRAIN_JOB, "ml", name)
    assert train is not None
    return store.put(Kind.JOB_SET, owned({"apiVersion": Kind.JOB_SET.api_version, "kind": "JobSet",
                                          "metadata": {"name": name, "namespace": "ml"},
                                          "spec": {"suspend": suspend, "replicatedJobs": [{"name": "node", "template": {
                                              "spec": {"parallelism": nodes, "template": TEMPLATE}}}]}}, train))


def play_trainer(store: FakeCluster, name: str, nodes: int, gpus: int) -> None:
    """The Trainer and JobSet controllers' part once the TrainJob runs: its JobSet, the node Job, its pods."""
    template = TEMPLATE
    jobset = make_jobset(store, name, nodes)
    job = store.put(Kind.JOB, owned({"apiVersion": "batch/v1", "kind": "Job",
                                     "metadata": {"name": f"{name}-node-0", "namespace": "ml"},
                                     "spec": {"parallelism": nodes, "template": template}}, jobset))
    for i in range(nodes):
        store.put(Kind.POD, owned(pod(f"{name}-node-0-{i}", gpus, queue=None, labels={RJOB: "node"}), job))


@pytest.mark.parametrize("kind", [Kind.TRAINING_RUNTIME, Kind.CLUSTER_TRAINING_RUNTIME])
async def test_a_suspended_trainjob_is_admitted_from_its_runtime_only_when_it_fits(
        emulator: ApiServerEmulator, kind: Kind) -> None:
    store = emulator.store
    cluster(store, "suspend", gpus=3)  # nodes of 4 GPUs each (resourcesPerNode over the runtime's 1)
    store.put(kind, runtime(kind))
    ref = {"name": "torch-distributed", "kind": kind.kind} if kind is Kind.TRAINING_RUNTIME else {
        "name": "torch-distributed"}  # upstream's default kind: ClusterTrainingRuntime
    async with running(emulator) as c:
        store.put(Kind.TRAIN_JOB, trainjob("ft", ref))
        await eventually(lambda: bool(store.objects(Kind.POD_GROUP)), what="PodGroup made for the TrainJob")
        [group] = store.objects(Kind.POD_GROUP)
        assert group["spec"]["minMember"] == 2  # the TrainJob's numNodes, over the runtime's mlPolicy
        await eventually(lambda: len(not_admitted_events(store)) == 1, what="its GangNotAdmitted Event")
        [event] = not_admitted_events(store)
        assert "TrainJob ml/ft stays suspended" in event["note"] and "without 4 free GPUs" in event["note"]
        await cycles(c, 5)
        assert is_suspended(store, "ft") and store.objects(Kind.POD) == []
        assert len(not_admitted_events(store)) == 1
        store.put(Kind.NODE, node("n1", 8))  # room for 2 nodes of 4 GPUs
        await eventually(lambda: not is_suspended(store, "ft"), what="the TrainJob unsuspended")
        play_trainer(store, "ft", nodes=2, gpus=4)
        await eventually(lambda: len(bound_pods(store)) == 2, what="its node pods bound whole")
        assert {p["spec"]["nodeName"] for p in store.objects(Kind.POD)} == {"n1"}
    used = {(call.op, call.kind) for call in store.calls}
    assert ("patch", Kind.TRAIN_JOB) in used and ("list", kind) in used
    assert [u for u in used if not allowed(*u)] == []  # the controller's ClusterRole allows every call


async def test_a_suspended_trainjob_with_its_suspended_jobset_is_one_gang(emulator: ApiServerEmulator) -> None:
    """Upstream's Trainer makes the JobSet at once, suspended like the TrainJob: the JobSet is nested
    in the TrainJob, so it gets no gang, no virtual pods and no unsuspending of its own."""
    store = emulator.store
    cluster(store, "suspend", gpus=3)
    store.put(Kind.TRAINING_RUNTIME, runtime())
    async with running(emulator) as c:
        store.put(Kind.TRAIN_JOB, trainjob("ft", {"name": "torch-distributed", "kind": "TrainingRuntime"}))
        make_jobset(store, "ft", nodes=2, suspend=True)
        await eventually(lambda: len(not_admitted_events(store)) == 1, what="the TrainJob told why it waits")
        await cycles(c, 3)
        [group] = store.objects(Kind.POD_GROUP)
        assert group["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
        assert [e["regarding"]["kind"] for e in not_admitted_events(store)] == ["TrainJob"]
        store.put(Kind.NODE, node("n1", 8))
        await eventually(lambda: not is_suspended(store, "ft"), what="the TrainJob unsuspended")
        await cycles(c, 3)
        assert len(store.objects(Kind.POD_GROUP)) == 1
    assert not any(call.op == "patch" and call.kind is Kind.JOB_SET for call in store.calls)  # the Trainer's to do


async def test_a_trainjob_without_num_nodes_takes_its_runtimes(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    cluster(store, "suspend", gpus=8)
    store.put(Kind.TRAINING_RUNTIME, runtime())
    async with running(emulator):
        store.put(Kind.TRAIN_JOB, trainjob("one", {"name": "torch-distributed", "kind": "TrainingRuntime"},
                                           nodes=None))
        await eventually(lambda: not is_suspended(store, "one"), what="admitted: one node of 4 GPUs fits")
        [group] = store.objects(Kind.POD_GROUP)
        assert group["spec"]["minMember"] == 1  # the runtime's mlPolicy numNodes


async def test_a_trainjob_whose_runtime_is_missing_warns_and_stays_suspended(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    cluster(store, "suspend", gpus=8)
    async with running(emulator) as c:
        store.put(Kind.TRAIN_JOB, trainjob("lost", {"name": "nope", "kind": "TrainingRuntime"}))

        def warnings() -> list[JsonDict]:
            return [e for e in store.objects(Kind.EVENT) if e.get("type") == "Warning"
                    and e["regarding"].get("kind") == "TrainJob"]

        await eventually(lambda: bool(warnings()), what="a Warning Event on the TrainJob")
        [warning] = warnings()
        assert warning["reason"] == "GroupingFailed"
        assert warning["note"] == "TrainJob ml/lost: spec.runtimeRef: TrainingRuntime ml/nope not found"
        await cycles(c, 5)
        assert is_suspended(store, "lost") and store.objects(Kind.POD) == [] and len(warnings()) == 1
        store.put(Kind.TRAINING_RUNTIME, runtime(name="nope"))  # the runtime made: admitted
        await eventually(lambda: not is_suspended(store, "lost"), what="admitted once its runtime exists")


async def test_runtime_crds_absent_are_skipped_with_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet.kube.controller.grouper")
    absent = {Kind.TRAINING_RUNTIME, Kind.CLUSTER_TRAINING_RUNTIME}
    async with ApiServerEmulator(store=FakeCluster(not_served=absent)) as emulator:
        cluster(emulator.store, "suspend", gpus=8)
        async with running(emulator) as c:
            assert c.grouper is not None and not absent & set(c.grouper.kinds)
            emulator.store.put(Kind.TRAIN_JOB, trainjob("ft", {"name": "torch-distributed"}))
            await cycles(c, 3)
            assert is_suspended(emulator.store, "ft")
    lines = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
    assert sorted(line.split()[2] for line in lines) == ["ClusterTrainingRuntime", "TrainingRuntime"]
