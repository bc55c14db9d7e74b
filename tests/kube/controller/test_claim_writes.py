"""What the controller writes on a ResourceClaim before a pod's Binding (gpufleet.kube.controller.claim_writes),
without an API: the allocation, the MPS config of a fractional pod, reservedFor of a shared claim."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpufleet.adapters import load_snapshot_text
from gpufleet.domain import Binding, ClaimAllocation, DeviceResult, NodeName, PodKey
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.claim_writes import ClaimContext, claim_writes, mps_config
from gpufleet.testing.dra_objects import DEVICE_CLASS, objects, resource_claim

RESULT = DeviceResult("gpu", "gpu.nvidia.com", "n1", "gpu-3")


def test_the_mps_config_gives_the_blocks_share_of_threads_and_memory() -> None:
    assert mps_config(25, 81920) == {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {
        "strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25,
                                         "defaultPinnedDeviceMemoryLimit": "20480Mi"}}}
    assert mps_config(33, 40536)["sharing"]["mpsConfig"]["defaultPinnedDeviceMemoryLimit"] == "13376Mi"  # rounded down
    assert mps_config(10, None)["sharing"]["mpsConfig"] == {"defaultActiveThreadPercentage": 10}  # memory unknown


def test_a_pod_joining_a_claim_keeps_the_holders_the_cache_does_not_show_yet() -> None:
    """The last cycle allocated the claim to ml/a (in flight); the cache still shows it unallocated."""
    snapshot = load_snapshot_text(DEVICE_CLASS + "---\n" + resource_claim("shared"), "snap.yaml")
    claim = snapshot.resource_claims[0]
    seen = dataclasses.replace(claim, allocation=(RESULT,), allocated_node=NodeName("n1"), reserved_for=("a",))
    context = ClaimContext(claims={seen.key: seen}, classes={c.name: c for c in snapshot.device_classes})
    cached: dict[Any, Any] = {(Kind.RESOURCE_CLAIM, "ml", "shared"): objects(resource_claim("shared"))[0]}
    join = Binding(PodKey("ml/b"), NodeName("n1"), gpus=(3,), devices=(ClaimAllocation("shared", (RESULT,), True),))
    writes, uses, problems = claim_writes([join], context, lambda k, ns, n: cached.get((k, ns, n)),
                                          lambda pod: f"uid-{pod.partition('/')[2]}")
    target = (Kind.RESOURCE_CLAIM, "ml", "shared")
    assert problems == {} and uses == {"ml/b": [target]}
    assert writes[target].status == {"reservedFor": [{"resource": "pods", "name": "a", "uid": "uid-a"},
                                                     {"resource": "pods", "name": "b", "uid": "uid-b"}]}
    missing, _, problems = claim_writes([join], context, lambda k, ns, n: None, lambda pod: "")
    assert missing == {} and problems == {"ml/b": 'resourceclaim "shared" not found'}


def test_the_mps_config_of_a_fractional_pod_comes_last_after_any_config_of_the_claim() -> None:
    """The driver applies the last config for a request: gpufleet's limits, not the claim's."""
    from gpufleet.domain import DeviceConfig
    from gpufleet.kube.controller.claim_writes import allocation_status

    snapshot = load_snapshot_text(DEVICE_CLASS + "---\n" + resource_claim("c"), "snap.yaml")
    claim = dataclasses.replace(snapshot.resource_claims[0], config=(DeviceConfig(
        "gpu.nvidia.com", {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                           "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 100}}}),))
    status = allocation_status(claim, ClaimAllocation("c", (RESULT,)), "n1",
                               {c.name: c for c in snapshot.device_classes}, blocks=25, gpu_memory_mib=81920)
    last = status["devices"]["config"][-1]
    assert last == {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com",
                                                                            "parameters": mps_config(25, 81920)}}
