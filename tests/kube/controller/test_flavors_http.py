"""GPU-model quotas with the real controller over HTTP against the API server emulator
(docs/semantics.md, "GPU-model quotas"): ResourceFlavors are informed, a pod takes its queue's
first flavor where it is in quota, and the controller writes the flavor it took on the pod, over a
tenant's forged one, which gains nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gpufleet.domain import GPU, Binding, NodeName, PodKey
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.binder import desired_annotations
from gpufleet.kube.install.rbac import allowed
from gpufleet.testing.emulator import ApiServerEmulator

from .controller_objects import bound_pods, eventually, node, pod, running_over_http

JsonDict = dict[str, Any]
PRODUCT = "nvidia.com/gpu.product"


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator() as server:
        yield server


def flavor(name: str, product: str) -> JsonDict:
    return {"metadata": {"name": name}, "spec": {"nodeLabels": {PRODUCT: product}}}


def flavored_queue(name: str, flavors: list[tuple[str, int]]) -> JsonDict:
    return {"metadata": {"name": name},
            "spec": {"flavors": [{"name": f, "resources": {GPU: {"quota": str(q)}}} for f, q in flavors]}}


@pytest.mark.asyncio
async def test_pod_takes_first_flavor_in_quota_and_the_flavor_is_written_over_a_forged_one(
        emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.NODE, node("h1", 8, {PRODUCT: "H100"}))
    store.put(Kind.NODE, node("a1", 8, {PRODUCT: "A100"}))
    store.put(Kind.RESOURCE_FLAVOR, flavor("h100", "H100"))
    store.put(Kind.RESOURCE_FLAVOR, flavor("a100", "A100"))
    store.put(Kind.QUEUE, flavored_queue("team-a", [("h100", 2), ("a100", 8)]))
    forged = pod("p1", 4)
    forged["metadata"]["annotations"]["gpufleet.dev/flavor"] = "h100"  # the tenant's claim: ignored
    async with running_over_http(emulator):
        store.put(Kind.POD, forged)
        await eventually(lambda: len(bound_pods(store)) == 1, what="p1 bound")
        await eventually(lambda: (store.object(Kind.POD, "ml", "p1") or {}).get("metadata", {}).get(
            "annotations", {}).get("gpufleet.dev/flavor") == "a100", what="flavor written")
    placed = store.object(Kind.POD, "ml", "p1")
    assert placed is not None and placed["spec"]["nodeName"] == "a1"  # h100's quota is 2: a100 is in quota
    used = {(call.op, call.kind) for call in store.calls}
    assert ("watch", Kind.RESOURCE_FLAVOR) in used or ("list", Kind.RESOURCE_FLAVOR) in used
    assert [u for u in used if not allowed(*u)] == []  # the controller's ClusterRole allows every call


def test_flavor_annotation_is_the_controllers() -> None:
    """Written with a flavored binding; a tenant's on a pod that took none is removed."""
    binding = Binding(PodKey("ml/p"), NodeName("a1"), (0,), flavor="a100")
    assert desired_annotations({"metadata": {"annotations": {}}}, binding)["gpufleet.dev/flavor"] == "a100"
    forged = {"metadata": {"annotations": {"gpufleet.dev/flavor": "h100"}}}
    assert desired_annotations(forged, binding)["gpufleet.dev/flavor"] == "a100"
    plain = Binding(PodKey("ml/p"), NodeName("a1"), (0,))
    assert desired_annotations(forged, plain)["gpufleet.dev/flavor"] is None
    assert "gpufleet.dev/flavor" not in desired_annotations({"metadata": {"annotations": {}}}, plain)
