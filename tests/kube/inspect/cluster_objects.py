"""A small cluster to read, and the one in-memory fake of the API port serving it.

The cluster, as the API server would return it (managedFields, statuses and foreign annotations
included, to check that snapshots strip them):

- nodes n1, n2: 8 GPUs of 80 GiB each; n3: one such GPU;
- queues team-a and team-b, each with a quota of 8 GPUs;
- team-b/b-run-0 runs on n1 with 8 GPUs, team-b/b-run-1 on n2 with 4: team-b borrows 4;
- kube-system/dns runs on n2 (another scheduler's pod, CPU only) and ml/done has finished;
- pending: team-a/a-train (8 GPUs, within team-a's quota: it reclaims n2 from b-run-1),
  team-a/a-huge (16 GPUs in one pod: no node has them), team-a/a-nb (gpu-memory 20Gi: a quarter
  of n3's GPU), and default/web pending for the default scheduler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.kube.client.port import Kind
from gpufleet.kube.inspect.snapshot import read_cluster
from gpufleet.testing.fake_cluster import FakeClient, FakeCluster

NOISE_META = {
    "uid": "0b7c-...",
    "resourceVersion": "4711",
    "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:metadata": {}}}],
}


def node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            **NOISE_META,
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.memory": "81920",
                       "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"podCIDR": "10.0.0.0/24", "providerID": f"kind://{name}"},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["registry.k8s.io/pause:3.9"], "sizeBytes": 1}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }


def pod(namespace: str, name: str, *, gpus: int = 0, node_name: str | None = None, phase: str = "Pending",
        queue: str | None = None, scheduler: str = "gpufleet", annotations: dict[str, str] | None = None,
        priority_class: str | None = None, created: str = "2025-01-01T00:00:00Z") -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    labels = {"app": name}
    if queue:
        labels["gpufleet.dev/queue"] = queue
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "trainer:1", "resources": resources,
                        "env": [{"name": "A", "value": "1"}], "terminationMessagePath": "/dev/termination-log"}],
        "restartPolicy": "Always",
        "serviceAccountName": "default",
        "dnsPolicy": "ClusterFirst",
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable"}
    if node_name:
        spec["nodeName"] = node_name
        status["startTime"] = created
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": created,
            **NOISE_META,
            "labels": labels,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", **(annotations or {})},
        },
        "spec": spec,
        "status": status,
    }


def queue(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name, **NOISE_META},
        "spec": {"resources": {"nvidia.com/gpu": {"quota": str(gpus)}}},
        "status": {"usage": {"nvidia.com/gpu": "0"}},
    }


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name, **NOISE_META}, "value": value, "preemptionPolicy": "PreemptLowerPriority"}


def cluster_objects() -> dict[Kind, list[dict[str, Any]]]:
    """The cluster of the module docstring, by kind."""
    return {
        Kind.NODE: [node("n2"), node("n1"), node("n3", gpus=1)],
        Kind.QUEUE: [queue("team-b", 8), queue("team-a", 8)],
        Kind.PRIORITY_CLASS: [priority_class("train", 1000), priority_class("notebook", 10)],
        Kind.POD_GROUP: [],
        Kind.SCHEDULER_CONFIG: [{
            "apiVersion": "gpufleet.dev/v1alpha1", "kind": "SchedulerConfig",
            "metadata": {"name": "default", **NOISE_META}, "spec": {"defaultQueue": "team-a"},
        }],
        Kind.POD: [
            pod("team-b", "b-run-0", gpus=8, node_name="n1", phase="Running", queue="team-b",
                annotations={"gpufleet.dev/gpu-index": "0,1,2,3,4,5,6,7"}, created="2025-01-01T00:00:00Z"),
            pod("team-b", "b-run-1", gpus=4, node_name="n2", phase="Running", queue="team-b",
                annotations={"gpufleet.dev/gpu-index": "0,1,2,3"}, created="2025-01-01T01:00:00Z"),
            pod("kube-system", "dns", node_name="n2", phase="Running", scheduler="default-scheduler"),
            pod("ml", "done", gpus=8, node_name="n1", phase="Succeeded", queue="team-a"),
            pod("team-a", "a-train", gpus=8, queue="team-a", priority_class="train"),
            pod("team-a", "a-huge", gpus=16, queue="team-a", priority_class="train"),
            pod("team-a", "a-nb", queue="team-a", priority_class="notebook",
                annotations={"gpufleet.dev/gpu-memory": "20Gi"}),
            pod("default", "web", scheduler="default-scheduler"),
        ],
    }


def fake_cluster(objects: Mapping[Kind, list[dict[str, Any]]] | None = None, *, not_served: Iterable[Kind] = (),
                 server: str = "https://fake-apiserver:6443") -> FakeCluster:
    """:class:`FakeCluster` holding ``objects`` (default: :func:`cluster_objects`); kinds in
    ``not_served`` are not served (no CRD); its clients' current namespace is team-a."""
    cluster = FakeCluster(server=server, default_namespace="team-a", not_served=not_served)
    for kind, items in (objects if objects is not None else cluster_objects()).items():
        for obj in items:
            cluster.put(kind, obj)
    cluster.calls.clear()
    return cluster


def client(objects: Mapping[Kind, list[dict[str, Any]]] | None = None, *,
           not_served: Iterable[Kind] = ()) -> FakeClient:
    """A client of :func:`fake_cluster`."""
    return fake_cluster(objects, not_served=not_served).client("gpufleet")


def snapshot_yaml(api: Any) -> str:
    """The snapshot read through ``api``, as YAML."""
    return asyncio.run(read_cluster(api)).to_yaml()


def seen_and_replayed(objects: Mapping[Kind, list[dict[str, Any]]]) -> tuple[Any, Any]:
    """(the snapshot the controller builds from ``objects`` served over HTTP by the API server emulator,
    the snapshot ``replay`` reads from ``gpufleet snapshot`` of them); the view must have no problems."""
    from gpufleet.adapters import load_snapshot_text
    from gpufleet.kube.client.lightkube_api import connect
    from gpufleet.kube.client.port import RealClock
    from gpufleet.kube.controller.loop import Controller, ControllerConfig
    from gpufleet.kube.controller.metrics import ControllerMetrics
    from gpufleet.testing.emulator import ApiServerEmulator

    from ..controller.controller_objects import informing

    async def run() -> tuple[Any, Any]:
        async with ApiServerEmulator() as emulator:
            for kind, items in objects.items():
                for item in items:
                    emulator.store.put(kind, item)
            config = ControllerConfig(identity="c", min_interval=0.0, engine_in_thread=False)
            api = connect(server=emulator.url_text, field_manager="c", timeout=5.0)
            controller = Controller(api, RealClock(), config, ControllerMetrics())
            try:
                async with informing(controller, real_time=True):  # no cycle binds anything meanwhile
                    view = controller.snapshot()
                assert not view.problems
                text = (await read_cluster(api)).to_yaml()
            finally:
                await api.close()
            return view.snapshot, load_snapshot_text(text, "snapshot.yaml")

    return asyncio.run(run())
