"""The pod-grouper with the real controller over HTTP against the API server emulator: owners of each
kind get their PodGroup, their pods its label, the gang is bound whole, and deletion cleans up."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gpufleet.domain import LABEL_POD_GROUP
from gpufleet.kube.client.port import Kind
from gpufleet.kube.install.rbac import allowed
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, eventually, node, pod, pod_group, queue, running_over_http

pytestmark = pytest.mark.asyncio

JsonDict = dict[str, Any]


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator() as server:
        yield server


running = running_over_http


def owned(obj: JsonDict, owner: JsonDict) -> JsonDict:
    meta = owner["metadata"]
    obj["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                           "name": meta["name"], "uid": meta["uid"], "controller": True}]
    return obj


def template(gpus: int = 1) -> JsonDict:
    return {"spec": {"schedulerName": "gpufleet", "containers": [
        {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def workload(kind: Kind, name: str, spec: JsonDict) -> JsonDict:
    """An owner of ``kind`` in namespace ml, labelled with queue team-a."""
    return {"apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": name, "namespace": "ml", "labels": {"gpufleet.dev/queue": "team-a"}}, "spec": spec}


def job(name: str, parallelism: int = 4, *, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> JsonDict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "labels": {"gpufleet.dev/queue": "team-a", **(labels or {})},
                         "annotations": annotations or {}},
            "spec": {"parallelism": parallelism, "completions": parallelism, "template": template()}}


def member(name: str, owner: JsonDict, labels: dict[str, str] | None = None) -> JsonDict:
    return owned(pod(name, 1, queue=None, labels=labels), owner)


def groups_of(store: FakeCluster) -> list[JsonDict]:
    return store.objects(Kind.POD_GROUP)


def labels_of(store: FakeCluster) -> dict[str, str | None]:
    return {p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get(LABEL_POD_GROUP)
            for p in store.objects(Kind.POD)}


def basics(store: FakeCluster, gpus: int = 8) -> None:
    store.put(Kind.NODE, node("n0", gpus))
    store.put(Kind.QUEUE, queue("team-a", 16))


async def test_job_gang_is_grouped_bound_whole_and_cleaned_up(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store, gpus=3)  # 3 of the 4 pods fit: none may start
    async with running(emulator):
        owner = store.put(Kind.JOB, job("train"))
        for i in range(4):
            store.put(Kind.POD, member(f"train-{i}", owner))
        await eventually(lambda: len(groups_of(store)) == 1 and all(labels_of(store).values()),
                         what="PodGroup created and pods labelled")
        group = groups_of(store)[0]
        assert group["spec"] == {"minMember": 4, "queue": "team-a"}
        assert group["metadata"]["name"].startswith("job-train-")
        assert set(labels_of(store).values()) == {group["metadata"]["name"]}
        ref = group["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
            "Job", owner["metadata"]["uid"], True, True)
        await eventually(lambda: "fit" in _condition(store, "train-0") or "free" in _condition(store, "train-0"),
                         what="the gang decided pending")
        assert bound_pods(store) == {}  # no partial binding
        store.put(Kind.NODE, node("n1", 8))
        await eventually(lambda: len(bound_pods(store)) == 4, what="gang bound whole")
        store.delete(Kind.JOB, "ml", "train")
        await eventually(lambda: not groups_of(store), what="PodGroup deleted with its owner")
    used = {(call.op, call.kind) for call in store.calls}
    assert {("create", Kind.POD_GROUP), ("delete", Kind.POD_GROUP), ("patch", Kind.POD), ("watch", Kind.JOB)} <= used
    assert [u for u in used if not allowed(*u)] == []  # the controller's ClusterRole allows every call


async def test_gang_present_before_the_controller_starts_is_never_bound_as_singletons(
        emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    owner = store.put(Kind.JOB, job("early", 3))
    for i in range(3):
        store.put(Kind.POD, member(f"early-{i}", owner))
    async with running(emulator):
        await eventually(lambda: len(bound_pods(store)) == 3, what="gang bound")
        # the PodGroup's status is written after the bindings (the next cycle): wait for it too
        await eventually(lambda: [g.get("status", {}).get("boundPods") for g in groups_of(store)] == [3],
                         what="PodGroup status written")
    [group] = groups_of(store)
    assert set(labels_of(store).values()) == {group["metadata"]["name"]}  # labelled before bound
    assert group["status"]["boundPods"] == 3


KUBEFLOW_ROLE = "training.kubeflow.org/replica-type"


async def kubeflow_gang_bound(store: FakeCluster, owner: JsonDict, lead: str, workers: int) -> JsonDict:
    """Put a Kubeflow job's pods (one ``lead``, ``workers`` workers) as its operator would, wait until
    the gang is bound, and return its one PodGroup, whose name every pod carries."""
    name = owner["metadata"]["name"]
    store.put(Kind.POD, member(f"{name}-{lead}-0", owner, {KUBEFLOW_ROLE: lead}))
    for i in range(workers):
        store.put(Kind.POD, member(f"{name}-worker-{i}", owner, {KUBEFLOW_ROLE: "worker"}))
    await eventually(lambda: len(bound_pods(store)) == workers + 1, what="gang bound")
    [group] = groups_of(store)
    assert set(labels_of(store).values()) == {group["metadata"]["name"]}
    return group


async def test_pytorchjob_master_and_workers_are_one_gang(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    async with running(emulator):
        owner = store.put(Kind.PYTORCH_JOB, workload(Kind.PYTORCH_JOB, "llama", {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": template()}, "Worker": {"replicas": 3, "template": template()}}}))
        group = await kubeflow_gang_bound(store, owner, "master", 3)
        assert group["spec"]["minMember"] == 4 and group["metadata"]["name"].startswith("pytorchjob-llama-")


async def test_jobset_pods_of_its_jobs_join_one_gang(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    async with running(emulator):
        jobset = store.put(Kind.JOB_SET, workload(Kind.JOB_SET, "trainer", {"replicatedJobs": [
            {"name": "workers", "replicas": 2,
             "template": {"spec": {"parallelism": 2, "completions": 2, "template": template()}}}]}))
        for j in range(2):
            child = store.put(Kind.JOB, owned(job(f"trainer-workers-{j}", 2), jobset))
            for i in range(2):
                store.put(Kind.POD, member(f"trainer-workers-{j}-{i}", child,
                                           {"jobset.sigs.k8s.io/replicatedjob-name": "workers"}))
        await eventually(lambda: len(bound_pods(store)) == 4, what="gang bound")
        [group] = groups_of(store)  # none for the JobSet's own Jobs
        assert group["spec"]["minMember"] == 4 and group["metadata"]["name"].startswith("jobset-trainer-")
        assert group["metadata"]["ownerReferences"][0]["kind"] == "JobSet"


async def test_raycluster_head_and_workers_are_one_gang(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    async with running(emulator):
        cluster = store.put(Kind.RAY_CLUSTER, workload(Kind.RAY_CLUSTER, "ray", {
            "headGroupSpec": {"template": template()},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": template()}]}))
        store.put(Kind.POD, member("ray-head", cluster, {"ray.io/node-type": "head"}))
        for i in range(2):
            store.put(Kind.POD, member(f"ray-worker-{i}", cluster, {"ray.io/node-type": "worker"}))
        await eventually(lambda: len(bound_pods(store)) == 3, what="gang bound")
        [group] = groups_of(store)
        assert group["spec"]["minMember"] == 3 and group["metadata"]["name"].startswith("raycluster-ray-")


async def test_leaderworkerset_gets_a_gang_per_group(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    index = "leaderworkerset.sigs.k8s.io/group-index"
    async with running(emulator):
        lws = store.put(Kind.LEADER_WORKER_SET, workload(Kind.LEADER_WORKER_SET, "vllm", {
            "replicas": 2,
            "leaderWorkerTemplate": {"size": 2, "leaderTemplate": template(), "workerTemplate": template()}}))
        leaders = store.put(Kind.STATEFUL_SET, owned({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {
            "name": "vllm", "namespace": "ml"}, "spec": {"replicas": 2, "template": template()}}, lws))
        for g in range(2):  # worker Pod <- worker StatefulSet <- leader Pod <- leader StatefulSet <- LWS
            leader = store.put(Kind.POD, member(f"vllm-{g}", leaders, {index: str(g)}))
            workers = store.put(Kind.STATEFUL_SET, owned({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {
                "name": f"vllm-{g}", "namespace": "ml"}, "spec": {"replicas": 1, "template": template()}}, leader))
            store.put(Kind.POD, member(f"vllm-{g}-1", workers, {index: str(g)}))
        await eventually(lambda: len(bound_pods(store)) == 4, what="both gangs bound")
        groups = groups_of(store)
        assert len(groups) == 2 and {g["spec"]["minMember"] for g in groups} == {2}
        labels = labels_of(store)
        assert labels["vllm-0"] == labels["vllm-0-1"] != labels["vllm-1"] == labels["vllm-1-1"]


async def test_deployment_pods_each_get_their_own_group(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    async with running(emulator):
        deploy = store.put(Kind.DEPLOYMENT, workload(Kind.DEPLOYMENT, "serve", {"replicas": 2, "template": template()}))
        rs = store.put(Kind.REPLICA_SET, owned({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
            "name": "serve-7d9c8", "namespace": "ml"}, "spec": {"replicas": 2}}, deploy))
        for i in range(2):
            store.put(Kind.POD, member(f"serve-7d9c8-{i}", rs))
        await eventually(lambda: len(bound_pods(store)) == 2, what="pods bound")
        assert len(groups_of(store)) == 2 and all(g["spec"]["minMember"] == 1 for g in groups_of(store))
        store.delete(Kind.POD, "ml", "serve-7d9c8-0")
        await eventually(lambda: len(groups_of(store)) == 1, what="the deleted pod's group deleted")


async def test_hand_written_group_is_never_relabelled(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    store.put(Kind.POD_GROUP, pod_group("mine", 2))
    async with running(emulator):
        owner = store.put(Kind.JOB, job("train", 2))
        for i in range(2):
            store.put(Kind.POD, owned(pod(f"train-{i}", 1, group="mine"), owner))
        await eventually(lambda: len(bound_pods(store)) == 2, what="bound as the hand-written gang")
        assert set(labels_of(store).values()) == {"mine"}
        mine = store.object(Kind.POD_GROUP, "ml", "mine")
        assert mine is not None and mine["spec"] == {"minMember": 2}  # untouched


async def test_absent_crds_are_skipped_with_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet.kube.controller.grouper")
    absent = {Kind.RAY_CLUSTER, Kind.RAY_JOB, Kind.LEADER_WORKER_SET}
    async with ApiServerEmulator(store=FakeCluster(not_served=absent)) as emulator:
        store = emulator.store
        basics(store)
        async with running(emulator) as c:
            assert c.grouper is not None and not absent & set(c.grouper.kinds)
            owner = store.put(Kind.JOB, job("train", 2))
            for i in range(2):
                store.put(Kind.POD, member(f"train-{i}", owner))
            await eventually(lambda: len(bound_pods(store)) == 2, what="Jobs still grouped")
    lines = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
    assert sorted(line.split()[2] for line in lines) == ["LeaderWorkerSet", "RayCluster", "RayJob"]


def _condition(store: FakeCluster, name: str) -> str:
    obj = store.object(Kind.POD, "ml", name) or {}
    return " ".join(c.get("message", "") for c in (obj.get("status") or {}).get("conditions") or ()
                    if c.get("type") == "PodScheduled")


@pytest.mark.parametrize(("labels", "annotations", "words"), [
    ({"gpufleet.dev/queue": "nope"}, {}, "queue nope does not exist"),
    ({}, {"gpufleet.dev/min-member": "9"}, "min-member: 9 is more than the 4 pods"),
])
async def test_bad_owner_gives_a_warning_and_a_pending_reason(
        emulator: ApiServerEmulator, labels: dict[str, str], annotations: dict[str, str], words: str) -> None:
    store = emulator.store
    basics(store)
    async with running(emulator) as c:
        owner = store.put(Kind.JOB, job("train", labels=labels, annotations=annotations))
        for i in range(4):
            store.put(Kind.POD, member(f"train-{i}", owner))
        await eventually(lambda: words in _condition(store, "train-0"), what="pending reason")
        warnings = [e for e in store.objects(Kind.EVENT) if e["reason"] == "GroupingFailed"]
        assert warnings and warnings[0]["type"] == "Warning" and words in warnings[0]["note"]
        assert warnings[0]["regarding"]["kind"] == "Job" and warnings[0]["regarding"]["apiVersion"] == "batch/v1"
        assert not groups_of(store) and bound_pods(store) == {}
        assert all(labels_of(store).values())  # labelled, so they wait as a gang rather than one by one
        assert c.cycles >= 1


async def test_bad_deployment_warns_once_for_its_pods(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    async with running(emulator):
        spec = {"replicas": 2, "template": template()}
        deploy = workload(Kind.DEPLOYMENT, "serve", spec)
        deploy["metadata"]["labels"]["gpufleet.dev/queue"] = "nope"
        deploy = store.put(Kind.DEPLOYMENT, deploy)
        rs = store.put(Kind.REPLICA_SET, owned({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
            "name": "serve-1", "namespace": "ml"}, "spec": {"replicas": 2}}, deploy))
        for i in range(2):
            store.put(Kind.POD, member(f"serve-1-{i}", rs))
        await eventually(lambda: all("queue nope" in _condition(store, f"serve-1-{i}") for i in range(2)),
                         what="pending reasons")
        warnings = [e for e in store.objects(Kind.EVENT) if e["reason"] == "GroupingFailed"]
        assert [e["regarding"]["kind"] for e in warnings] == ["Deployment"]
        assert not groups_of(store) and bound_pods(store) == {}


async def test_owner_queue_its_project_does_not_allow_gains_nothing(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    store.put(Kind.QUEUE, queue("team-b", 16))
    store.put(Kind.PROJECT, {"metadata": {"name": "vision"},
                             "spec": {"namespaces": {"names": ["ml"]}, "queues": ["team-a"]}})
    store.put(Kind.PROJECT, {"metadata": {"name": "speech"},  # team-b is another Project's queue
                             "spec": {"namespaces": {"names": ["audio"]}, "queues": ["team-b"]}})
    async with running(emulator):
        owner = store.put(Kind.JOB, job("grab", 2, labels={"gpufleet.dev/queue": "team-b"}))
        for i in range(2):
            store.put(Kind.POD, member(f"grab-{i}", owner))
        await eventually(lambda: "team-b" in _condition(store, "grab-0"), what="pending reason")
        assert not groups_of(store) and bound_pods(store) == {}


async def test_owners_of_other_schedulers_pods_are_left_alone(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    theirs = job("theirs", 2, labels={"gpufleet.dev/queue": "nope"})  # would be a problem if it were ours
    theirs["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    async with running(emulator) as c:
        store.put(Kind.JOB, theirs)
        owner = store.put(Kind.JOB, job("ours", 2))
        for i in range(2):
            store.put(Kind.POD, member(f"ours-{i}", owner))
        await eventually(lambda: len(bound_pods(store)) == 2, what="our gang bound")
        await eventually(lambda: c.cycles >= 2, what="another cycle")
        assert [g["metadata"]["ownerReferences"][0]["name"] for g in groups_of(store)] == ["ours"]
        assert not [e for e in store.objects(Kind.EVENT) if e["reason"] == "GroupingFailed"]


async def test_no_group_workloads_leaves_owners_alone(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    async with running(emulator, group_workloads=False) as c:
        assert c.grouper is None
        owner = store.put(Kind.JOB, job("train", 2))
        for i in range(2):
            store.put(Kind.POD, member(f"train-{i}", owner))
        await eventually(lambda: len(bound_pods(store)) == 2, what="bound as singletons")
        assert not groups_of(store) and not any(labels_of(store).values())



async def test_mpijob_launcher_and_workers_are_one_gang_cleaned_up_with_it(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    async with running(emulator):
        owner = store.put(Kind.MPI_JOB, workload(Kind.MPI_JOB, "allreduce", {"mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": template(0)}, "Worker": {"replicas": 2, "template": template()}}}))
        group = await kubeflow_gang_bound(store, owner, "launcher", 2)
        assert group["spec"]["minMember"] == 3 and group["metadata"]["name"].startswith("mpijob-allreduce-")
        store.delete(Kind.MPI_JOB, "ml", "allreduce")
        await eventually(lambda: not groups_of(store), what="PodGroup deleted with its owner")


async def test_trainjob_node_pods_of_its_jobset_are_one_gang(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store, gpus=2)  # 2 of the 3 nodes' pods fit: none may start
    rjob = "jobset.sigs.k8s.io/replicatedjob-name"
    async with running(emulator):
        train = store.put(Kind.TRAIN_JOB, workload(Kind.TRAIN_JOB, "ft", {
            "runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 3}}))
        jobset = store.put(Kind.JOB_SET, owned({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                "metadata": {"name": "ft", "namespace": "ml"},
                                                "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {
                                                    "spec": {"parallelism": 3, "template": template()}}}]}}, train))
        child = store.put(Kind.JOB, owned(job("ft-node-0", 3), jobset))
        for i in range(3):
            store.put(Kind.POD, member(f"ft-node-0-{i}", child, {rjob: "node"}))
        await eventually(lambda: len(groups_of(store)) == 1 and all(labels_of(store).values()), what="grouped")
        [group] = groups_of(store)  # none for the JobSet or its Job
        assert group["spec"]["minMember"] == 3 and group["metadata"]["name"].startswith("trainjob-ft-")
        assert group["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
        await eventually(lambda: bool(_condition(store, "ft-node-0-0")), what="the gang decided pending")
        assert bound_pods(store) == {}
        store.put(Kind.NODE, node("n1", 8))
        await eventually(lambda: len(bound_pods(store)) == 3, what="gang bound whole")
        store.delete(Kind.TRAIN_JOB, "ml", "ft")
        await eventually(lambda: not groups_of(store), what="PodGroup deleted with its owner")


async def test_rayjob_cluster_pods_are_one_gang_of_the_rayjob(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    cluster_spec = {"headGroupSpec": {"template": template()},
                    "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": template()}]}
    async with running(emulator):
        rayjob = store.put(Kind.RAY_JOB, workload(Kind.RAY_JOB, "tune", {"entrypoint": "python tune.py",
                                                                         "rayClusterSpec": cluster_spec}))
        cluster = store.put(Kind.RAY_CLUSTER, owned({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {
            "name": "tune-raycluster-x7k2", "namespace": "ml"}, "spec": cluster_spec}, rayjob))
        store.put(Kind.POD, member("tune-head", cluster, {"ray.io/node-type": "head"}))
        for i in range(2):
            store.put(Kind.POD, member(f"tune-worker-{i}", cluster, {"ray.io/node-type": "worker"}))
        await eventually(lambda: len(bound_pods(store)) == 3, what="gang bound")
        [group] = groups_of(store)  # the RayJob's, not its RayCluster's
        assert group["spec"]["minMember"] == 3 and group["metadata"]["name"].startswith("rayjob-tune-")
        assert group["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
        assert set(labels_of(store).values()) == {group["metadata"]["name"]}
        store.delete(Kind.RAY_JOB, "ml", "tune")
        await eventually(lambda: not groups_of(store), what="PodGroup deleted with its owner")


async def test_statefulset_pods_each_get_their_own_group(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    async with running(emulator):
        sts = store.put(Kind.STATEFUL_SET, workload(Kind.STATEFUL_SET, "db", {"replicas": 2, "template": template()}))
        for i in range(2):
            store.put(Kind.POD, member(f"db-{i}", sts))
        await eventually(lambda: len(bound_pods(store)) == 2, what="pods bound")
        groups = groups_of(store)
        assert len(groups) == 2 and all(g["spec"]["minMember"] == 1 for g in groups)
        assert all(g["metadata"]["name"].startswith("sts-db-") for g in groups)
        labels = labels_of(store)
        assert labels["db-0"] != labels["db-1"]
        store.delete(Kind.STATEFUL_SET, "ml", "db")
        await eventually(lambda: not groups_of(store), what="PodGroups deleted with their owner")


async def test_elastic_pytorchjob_scale_up_joins_the_gang_and_scale_down_keeps_it(
        emulator: ApiServerEmulator) -> None:
    store = emulator.store
    basics(store)
    async with running(emulator) as c:
        owner = store.put(Kind.PYTORCH_JOB, workload(Kind.PYTORCH_JOB, "elastic", {
            "elasticPolicy": {"minReplicas": 2, "maxReplicas": 4},
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template()},
                                    "Worker": {"replicas": 2, "template": template()}}}))
        group = await kubeflow_gang_bound(store, owner, "master", 2)
        name = group["metadata"]["name"]
        assert group["spec"]["minMember"] == 3
        for i in (2, 3):  # the operator scales the workers up to maxReplicas
            store.put(Kind.POD, member(f"elastic-worker-{i}", owner, {KUBEFLOW_ROLE: "worker"}))
        await eventually(lambda: len(bound_pods(store)) == 5, what="scale-up members placed on their own")
        assert set(labels_of(store).values()) == {name}
        for i in (2, 3):  # and down again
            store.delete(Kind.POD, "ml", f"elastic-worker-{i}")
        await eventually(lambda: c.cache.count(Kind.POD) == 3, what="the controller sees the scale-down")
        after = c.cycles
        store.put(Kind.NODE, node("n1", 8))  # an event: one more cycle, after the scale-down, that keeps the group
        await eventually(lambda: c.cycles > after, what="one more cycle")
        [kept] = groups_of(store)
        assert kept["metadata"]["name"] == name and kept["spec"]["minMember"] == 3
        assert kept["metadata"]["uid"] == group["metadata"]["uid"]


async def test_failed_podgroup_create_binds_nothing_until_the_group_is_made(emulator: ApiServerEmulator) -> None:
    """The PodGroup's create runs on while the cycle decides: when it fails, the cycle that saw the
    group as made binds nothing; the next one writes it again and the gang is bound whole after."""
    store = emulator.store
    basics(store)
    store.fail("create", 422, kind=Kind.POD_GROUP)  # not retried by the call
    owner = store.put(Kind.JOB, job("late", 3))
    for i in range(3):
        store.put(Kind.POD, member(f"late-{i}", owner))
    async with running(emulator):
        await eventually(lambda: len(bound_pods(store)) == 3, what="gang bound")
    [group] = groups_of(store)
    assert set(labels_of(store).values()) == {group["metadata"]["name"]}
    creates = [i for i, c in enumerate(store.calls) if (c.op, c.kind) == ("create", Kind.POD_GROUP)]
    made = next(i for i in creates if store.calls[i].status == 201)
    assert store.calls[creates[0]].status == 422
    binds = [i for i, c in enumerate(store.calls) if c.op == "bind"]
    assert len(binds) == 3 and min(binds) > made  # not one pod bound before its group existed


async def test_a_failed_podgroup_create_holds_only_its_own_gang(emulator: ApiServerEmulator) -> None:
    """Bindings wait per gang for their own PodGroup (no evictions decided): the gang whose create
    failed is not bound in that cycle, the other one is; the failed one binds once its group is made."""
    store = emulator.store
    basics(store)
    owners = {name: store.put(Kind.JOB, job(name, 2)) for name in ("good", "bad")}
    for name, owner in owners.items():
        for i in range(2):
            store.put(Kind.POD, member(f"{name}-{i}", owner))
    store.fail("create", 422, kind=Kind.POD_GROUP,
               match=lambda _namespace, group: "-bad-" in group)  # not retried by the call
    async with running(emulator):
        await eventually(lambda: len(bound_pods(store)) == 4, what="both gangs bound")
    calls = store.calls
    made = {c.name: i for i, c in enumerate(calls) if (c.op, c.kind, c.status) == ("create", Kind.POD_GROUP, 201)}
    [failed] = [i for i, c in enumerate(calls) if (c.op, c.kind) == ("create", Kind.POD_GROUP) and c.status == 422]
    binds = {c.name: i for i, c in enumerate(calls) if c.op == "bind"}
    good, bad = (next(v for k, v in made.items() if f"-{name}-" in k) for name in ("good", "bad"))
    assert bad > failed
    assert all(binds[f"bad-{i}"] > bad for i in range(2))  # never bound before its group existed
    assert all(binds[f"good-{i}"] > good for i in range(2))
    assert max(binds[f"good-{i}"] for i in range(2)) < bad  # the good gang did not wait for the bad one's retry


async def test_no_eviction_for_a_gang_before_its_podgroup_is_made(emulator: ApiServerEmulator) -> None:
    """A cycle that evicts for a gang the engine saw whole (here: reclaim for a new Job whose PodGroup
    create fails) sends nothing until every PodGroup write is answered, and acts on nothing when one
    failed: the borrower is evicted only after the group exists."""
    store = emulator.store
    store.put(Kind.NODE, node("n0", 8))
    store.put(Kind.QUEUE, queue("team-a", 8))
    store.put(Kind.QUEUE, queue("team-b", 0))
    store.put(Kind.POD, pod("borrower", 8, queue="team-b", node_name="n0", phase="Running",
                            gpu_index="0,1,2,3,4,5,6,7"))
    store.fail("create", 422, kind=Kind.POD_GROUP)  # not retried by the call
    owner = store.put(Kind.JOB, job("claim", 2))
    for i in range(2):
        store.put(Kind.POD, member(f"claim-{i}", owner))
    async with running(emulator):
        await eventually(lambda: store.count("evict") >= 1, what="the borrower reclaimed")
    calls = store.calls
    creates = [i for i, c in enumerate(calls) if (c.op, c.kind) == ("create", Kind.POD_GROUP)]
    assert calls[creates[0]].status == 422
    made = next(i for i in creates if calls[i].status == 201)
    first_evict = next(i for i, c in enumerate(calls) if c.op == "evict")
    assert first_evict > made
