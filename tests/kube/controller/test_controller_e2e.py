"""Opt-in end-to-end test against a real cluster: runs only when ``KUBECONFIG`` is set.

Use a disposable cluster (kind, k3d) with gpufleet's CRDs installed (``gpufleet manifests |
kubectl apply -f -``): the controller started here schedules every pending pod of
``schedulerName: gpufleet`` in the cluster, not only the test's own. The test creates a namespace,
a Queue and a CPU-only pod (no GPU needed), waits for the controller to bind it, then cleans up.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

from gpufleet.kube.client.port import Kind, RealClock
from gpufleet.kube.controller.leader import LeaseConfig
from gpufleet.kube.controller.loop import Controller, ControllerConfig

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="KUBECONFIG is not set: no cluster to test against"),
]


async def test_a_pod_is_bound_in_a_real_cluster() -> None:
    from lightkube import AsyncClient
    from lightkube.generic_resource import create_global_resource
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace

    from gpufleet.kube.client.lightkube_api import connect

    suffix = uuid.uuid4().hex[:6]
    namespace, queue_name = f"gpufleet-e2e-{suffix}", f"e2e-{suffix}"
    api = connect(os.environ["KUBECONFIG"], field_manager="gpufleet-e2e")
    admin = AsyncClient()
    queue_resource = create_global_resource("gpufleet.dev", "v1alpha1", "Queue", "queues")
    await admin.create(Namespace(metadata=ObjectMeta(name=namespace)))
    try:
        await api.create(Kind.QUEUE, {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Queue",
                                      "metadata": {"name": queue_name}, "spec": {}})
        await api.create(Kind.POD, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "sleeper", "namespace": namespace, "labels": {"gpufleet.dev/queue": queue_name}},
            "spec": {"schedulerName": "gpufleet", "containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.9",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
        })
        lease = LeaseConfig(namespace=namespace, name="gpufleet-e2e", identity=f"e2e-{suffix}")
        controller = Controller(api, RealClock(), ControllerConfig(identity=lease.identity, lease=lease,
                                                                   min_interval=0.5))
        task = asyncio.create_task(controller.run())
        try:
            deadline = time.monotonic() + 120
            while True:
                pod = await api.get(Kind.POD, namespace, "sleeper")
                if pod is not None and (pod.get("spec") or {}).get("nodeName"):
                    break
                assert time.monotonic() < deadline, "the pod was not bound within 120 s"
                await asyncio.sleep(1)
            assert pod["metadata"].get("annotations", {}).get("gpufleet.dev/gpu-index") is None
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await admin.delete(Namespace, namespace)
        await admin.delete(queue_resource, queue_name)
        await admin.close()
        await api.close()
