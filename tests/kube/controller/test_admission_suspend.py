"""Admission by suspension (docs/semantics-notes.md) with the real controller over HTTP against the API
server emulator: a suspended Job is unsuspended only once its whole gang fits, so no pod of it exists
before; in the default admission (pods) a suspended Job is left alone. The test plays the Job
controller: it creates the Job's pods only once ``spec.suspend`` is false."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpufleet.kube.client.lightkube_api import connect
from gpufleet.kube.client.port import Kind, RealClock
from gpufleet.kube.controller.loop import Controller, ControllerConfig
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.kube.install.rbac import allowed
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, eventually, node, pod, queue

pytestmark = pytest.mark.asyncio

JsonDict = dict[str, Any]


async def _run(emulator: ApiServerEmulator) -> AsyncIterator[Controller]:
    # resync: cycles keep coming without changes, so "stays suspended" is seen over several cycles.
    config = ControllerConfig(identity="c", min_interval=0.0, resync=0.02, concurrency=16, engine_in_thread=False)
    c = Controller(connect(server=emulator.url_text, field_manager="c", timeout=5.0), RealClock(), config,
                   ControllerMetrics())
    c.binder.backoff = 0.001
    task = asyncio.create_task(c.run())
    try:
        await eventually(lambda: c.ready and c.grouper is not None and c.grouper.synced, what="informers synced")
        yield c
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await c.api.close()


def running(emulator: ApiServerEmulator) -> Any:
    import contextlib

    return contextlib.asynccontextmanager(_run)(emulator)


def suspended_job(name: str, parallelism: int = 4, gpus: int = 1) -> JsonDict:
    template = {"spec": {"schedulerName": "gpufleet", "containers": [
        {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "labels": {"gpufleet.dev/queue": "team-a"}},
            "spec": {"parallelism": parallelism, "completions": parallelism, "suspend": True, "template": template}}


def cluster(store: FakeCluster, admission: str | None, gpus: int) -> None:
    store.put(Kind.NODE, node("n0", gpus))
    store.put(Kind.QUEUE, queue("team-a", 16))
    if admission is not None:
        store.put(Kind.SCHEDULER_CONFIG, {"metadata": {"name": "default"}, "spec": {"admission": admission}})


def is_suspended(store: FakeCluster, name: str) -> bool:
    job = store.object(Kind.JOB, "ml", name)
    assert job is not None
    return bool(job["spec"].get("suspend"))


def play_job_controller(store: FakeCluster, name: str) -> int:
    """The Job controller's part: the Job's pods once it is not suspended (how many exist)."""
    job = store.object(Kind.JOB, "ml", name)
    assert job is not None
    if job["spec"].get("suspend"):
        return 0
    meta = job["metadata"]
    for i in range(job["spec"]["parallelism"]):
        if store.object(Kind.POD, "ml", f"{name}-{i}") is None:
            member = pod(f"{name}-{i}", 1, queue=None)
            member["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                                      "uid": meta["uid"], "controller": True}]
            store.put(Kind.POD, member)
    return int(job["spec"]["parallelism"])


async def cycles(c: Controller, n: int) -> None:
    start = c.cycles
    await eventually(lambda: c.cycles >= start + n, what=f"{n} cycles")


async def test_suspended_job_is_admitted_only_when_its_whole_gang_fits(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    cluster(store, "suspend", gpus=3)  # 3 free GPUs for a gang of 4: it must not start
    async with running(emulator) as c:
        store.put(Kind.JOB, suspended_job("train"))
        await eventually(lambda: bool(store.objects(Kind.POD_GROUP)), what="PodGroup made for the suspended Job")
        await cycles(c, 5)
        assert is_suspended(store, "train")
        assert play_job_controller(store, "train") == 0 and store.objects(Kind.POD) == []
        assert not [e for e in store.objects(Kind.EVENT) if "virtual" in str(e)]  # virtual pods never reported
        store.put(Kind.NODE, node("n1", 8))
        await eventually(lambda: not is_suspended(store, "train"), what="the Job unsuspended")
        assert play_job_controller(store, "train") == 4
        await eventually(lambda: len(bound_pods(store)) == 4, what="its pods bound whole")
    used = {(call.op, call.kind) for call in store.calls}
    assert ("patch", Kind.JOB) in used
    assert not any(call.op == "create" and call.kind is Kind.POD for call in store.calls)  # no virtual pod written
    assert [u for u in used if not allowed(*u)] == []  # the controller's ClusterRole allows every call


async def test_pods_admission_leaves_a_suspended_job_alone(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    cluster(store, None, gpus=8)  # room for it, but admission is pods (the default)
    async with running(emulator) as c:
        store.put(Kind.JOB, suspended_job("train"))
        await eventually(lambda: bool(store.objects(Kind.POD_GROUP)), what="PodGroup made")
        await cycles(c, 5)
        assert is_suspended(store, "train")
    assert not any(call.op == "patch" and call.kind is Kind.JOB for call in store.calls)


async def test_places_of_an_admitted_job_are_held_until_its_pods_exist(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    cluster(store, "suspend", gpus=3)
    async with running(emulator) as c:
        store.put(Kind.JOB, suspended_job("a"))
        store.put(Kind.JOB, suspended_job("b"))
        await eventually(lambda: len(store.objects(Kind.POD_GROUP)) == 2, what="PodGroups made")
        await cycles(c, 3)
        store.put(Kind.NODE, node("n1", 3))  # 6 GPUs: room for one gang of 4, not two
        await eventually(lambda: not (is_suspended(store, "a") and is_suspended(store, "b")), what="one admitted")
        first, second = ("a", "b") if not is_suspended(store, "a") else ("b", "a")
        await cycles(c, 5)  # its pods do not exist yet: its places stay taken
        assert is_suspended(store, second)
        assert play_job_controller(store, first) == 4
        await eventually(lambda: len(bound_pods(store)) == 4, what="the admitted Job's pods bound whole")
        await cycles(c, 5)
        assert is_suspended(store, second) and play_job_controller(store, second) == 0


async def test_suspended_jobset_is_admitted_whole(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    cluster(store, "suspend", gpus=3)
    template = {"spec": {"schedulerName": "gpufleet", "containers": [
        {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    async with running(emulator) as c:
        jobset = store.put(Kind.JOB_SET, {
            "apiVersion": Kind.JOB_SET.api_version, "kind": "JobSet",
            "metadata": {"name": "trainer", "namespace": "ml", "labels": {"gpufleet.dev/queue": "team-a"}},
            "spec": {"suspend": True, "replicatedJobs": [{"name": "workers", "replicas": 2, "template": {
                "spec": {"parallelism": 2, "completions": 2, "template": template}}}]}})
        await eventually(lambda: bool(store.objects(Kind.POD_GROUP)), what="PodGroup made")
        await cycles(c, 5)
        current = store.object(Kind.JOB_SET, "ml", "trainer")
        assert current is not None and current["spec"]["suspend"] is True
        store.put(Kind.NODE, node("n1", 8))
        await eventually(lambda: (store.object(Kind.JOB_SET, "ml", "trainer") or {})["spec"].get("suspend") is False,
                         what="the JobSet unsuspended")
        meta = jobset["metadata"]
        for j in range(2):  # the JobSet controller's part: its Jobs and their pods
            child = store.put(Kind.JOB, {
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": f"trainer-workers-{j}", "namespace": "ml", "ownerReferences": [
                    {"apiVersion": Kind.JOB_SET.api_version, "kind": "JobSet", "name": "trainer",
                     "uid": meta["uid"], "controller": True}]},
                "spec": {"parallelism": 2, "completions": 2, "template": template}})
            for i in range(2):
                member = pod(f"trainer-workers-{j}-{i}", 1, queue=None,
                             labels={"jobset.sigs.k8s.io/replicatedjob-name": "workers"})
                member["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                                          "name": child["metadata"]["name"],
                                                          "uid": child["metadata"]["uid"], "controller": True}]
                store.put(Kind.POD, member)
        await eventually(lambda: len(bound_pods(store)) == 4, what="its pods bound whole")
    used = {(call.op, call.kind) for call in store.calls}
    assert ("patch", Kind.JOB_SET) in used and [u for u in used if not allowed(*u)] == []


def not_admitted_events(store: FakeCluster) -> list[JsonDict]:
    return [e for e in store.objects(Kind.EVENT) if e.get("reason") == "GangNotAdmitted"]


async def test_an_unplaceable_suspended_job_gets_one_event_and_its_group_the_reason(
        emulator: ApiServerEmulator) -> None:
    store = emulator.store
    cluster(store, "suspend", gpus=3)  # 3 GPUs for pods of 4 each
    async with running(emulator) as c:
        store.put(Kind.JOB, suspended_job("train", parallelism=2, gpus=4))
        await eventually(lambda: len(not_admitted_events(store)) == 1, what="the Job's GangNotAdmitted Event")
        [event] = not_admitted_events(store)
        job = store.object(Kind.JOB, "ml", "train")
        assert job is not None
        assert event["regarding"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                      "namespace": "ml", "uid": job["metadata"]["uid"]}
        # The blocking resource named; the virtual pods are not (they exist nowhere).
        assert "Job ml/train stays suspended" in event["note"] and "without 4 free GPUs" in event["note"]
        assert "virtual" not in event["note"]

        def status() -> JsonDict:
            [group] = store.objects(Kind.POD_GROUP)
            return dict(group.get("status") or {})

        await eventually(lambda: "free GPUs" in status().get("lastReason", ""), what="the PodGroup's reason")
        [scheduled] = status()["conditions"]
        assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable"
        assert "without 4 free GPUs" in scheduled["message"] and status()["phase"] == "Pending"
        await cycles(c, 5)
        assert len(not_admitted_events(store)) == 1 and is_suspended(store, "train")
        store.put(Kind.NODE, node("n1", 8))
        await eventually(lambda: not is_suspended(store, "train"), what="the Job unsuspended")
        assert len(not_admitted_events(store)) == 1
