"""ResourceSlice, DeviceClass, ResourceClaim and ResourceClaimTemplate (resource.k8s.io/v1) and the claims
a pod names (docs/semantics-notes.md, "Dynamic Resource Allocation"): read into the snapshot, checked,
and written back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpufleet.adapters import (
    claim_template_from_dict,
    device_class_from_dict,
    dump_snapshot,
    load_snapshot_text,
    reader_for,
    resource_claim_from_dict,
    resource_slice_from_dict,
)
from gpufleet.domain import (
    ClaimTemplate,
    DeviceClass,
    DeviceConfig,
    DeviceRequest,
    DeviceResult,
    PodClaim,
    ResourceClaim,
)
from gpufleet.testing.dra_objects import (
    DEVICE_CLASS,
    GPU_CLASS_SELECTOR,
    claim_template,
    dra_pod,
    resource_claim,
    resource_slice,
)

MPS_TEMPLATE = claim_template("mps-gpu", extra="""\
      config:
      - requests: ["gpu"]
        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing:
              strategy: MPS
              mpsConfig:
                defaultActiveThreadPercentage: 50
                defaultPinnedDeviceMemoryLimit: 10Gi
""")

ALLOCATED = resource_claim("shared-gpu", uid="c-1", status="""\
status:
  allocation:
    devices:
      results:
      - {request: gpu, driver: gpu.nvidia.com, pool: n1, device: gpu-3, adminAccess: null}
      config:
      - source: FromClass
        requests: [gpu]
        opaque: {driver: gpu.nvidia.com, parameters: {kind: GpuConfig}}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields:
        - {key: metadata.name, operator: In, values: [n1]}
  reservedFor:
  - {resource: pods, name: p-0, uid: uid-p-0}
  - {apiGroup: apps, resource: deployments, name: d}
""")

UNSUPPORTED = resource_claim("odd", requests="""\
      - name: first
        firstAvailable:
        - {name: big, deviceClassName: gpu.nvidia.com}
      - name: all
        exactly: {deviceClassName: gpu.nvidia.com, allocationMode: All}
      - name: admin
        exactly: {deviceClassName: gpu.nvidia.com, adminAccess: true}
      - name: tolerant
        exactly:
          deviceClassName: gpu.nvidia.com
          tolerations: [{key: gpu.nvidia.com/xid, operator: Exists, effect: NoSchedule}]
      - name: picky
        exactly:
          deviceClassName: gpu.nvidia.com
          count: 2
          selectors:
          - cel: {expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}
    constraints:
    - {requests: [picky], matchAttribute: gpu.nvidia.com/uuid}
""")

SNAPSHOT = "---\n".join([
    resource_slice("n1", gpus=2),
    DEVICE_CLASS,
    claim_template(),
    MPS_TEMPLATE,
    ALLOCATED,
    UNSUPPORTED,
    dra_pod("p-0", node="n1", phase="Running",
            entries="  - {name: gpu, resourceClaimName: shared-gpu}\n"),
    dra_pod("p-1", statuses="  - {name: gpu, resourceClaimName: p-1-gpu-x7k2}\n"),
    dra_pod("p-2", entries="  - {name: gpu, resourceClaimTemplateName: single-gpu}\n"
                           "  - {name: shared, resourceClaimName: shared-gpu}\n"),
])


def test_objects_are_read_into_the_snapshot() -> None:
    snapshot = load_snapshot_text(SNAPSHOT, "snap.yaml")
    (slice_,) = snapshot.resource_slices
    assert (slice_.name, slice_.driver, slice_.pool, slice_.node, slice_.generation) == (
        "n1-gpu.nvidia.com-x7k2p", "gpu.nvidia.com", "n1", "n1", 1)
    gpu1 = slice_.devices[1]
    assert gpu1.name == "gpu-1"
    assert gpu1.attributes["gpu.nvidia.com/index"] == 1
    assert gpu1.attributes["gpu.nvidia.com/type"] == "gpu"
    assert gpu1.attributes["gpu.nvidia.com/productName"] == "NVIDIA H100 80GB HBM3"
    assert gpu1.attributes["gpu.nvidia.com/cudaComputeCapability"] == "9.0.0"
    assert gpu1.attributes["resource.kubernetes.io/pcieRoot"] == "pci0000:01"
    assert gpu1.capacity == {"gpu.nvidia.com/memory": "80Gi"}
    assert snapshot.device_classes == (DeviceClass("gpu.nvidia.com", (GPU_CLASS_SELECTOR,)),)
    assert snapshot.claim_templates[0] == ClaimTemplate(
        "ml", "single-gpu", (DeviceRequest("gpu", "gpu.nvidia.com", 1),))
    mps = snapshot.claim_templates[1]
    assert mps.config == (DeviceConfig("gpu.nvidia.com", {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                                     "defaultPinnedDeviceMemoryLimit": "10Gi"}}}, ("gpu",)),)
    shared, odd = snapshot.resource_claims
    assert shared == ResourceClaim(
        "ml", "shared-gpu", "c-1", (DeviceRequest("gpu", "gpu.nvidia.com"),),
        allocation=(DeviceResult("gpu", "gpu.nvidia.com", "n1", "gpu-3"),), allocated_node="n1",
        reserved_for=("p-0",))
    assert shared.allocated
    assert [(r.name, r.unsupported) for r in odd.requests] == [
        ("first", "firstAvailable"), ("all", "allocationMode All"), ("admin", "adminAccess"),
        ("tolerant", "device tolerations"), ("picky", None)]
    assert odd.requests[-1].count == 2
    assert odd.requests[-1].selectors == (
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",)
    assert odd.unsupported == "constraints"
    pods = {p.name: p for p in snapshot.pods}
    assert pods["p-0"].resource_claims == (PodClaim("gpu", claim="shared-gpu"),)
    assert pods["p-1"].resource_claims == (PodClaim("gpu", template="single-gpu", generated="p-1-gpu-x7k2"),)
    assert pods["p-1"].resource_claims[0].claim_name == "p-1-gpu-x7k2"
    assert pods["p-2"].resource_claims == (PodClaim("gpu", template="single-gpu"),
                                           PodClaim("shared", claim="shared-gpu"))
    assert pods["p-2"].resource_claims[0].claim_name is None
    assert pods["p-2"].requests.get("nvidia.com/gpu") is None  # containers' resources.claims ask nothing else


def test_readers_by_kind_and_version() -> None:
    assert reader_for("resource.k8s.io/v1", "ResourceSlice") is resource_slice_from_dict
    assert reader_for("resource.k8s.io/v1", "DeviceClass") is device_class_from_dict
    assert reader_for("resource.k8s.io/v1", "ResourceClaim") is resource_claim_from_dict
    assert reader_for("resource.k8s.io/v1", "ResourceClaimTemplate") is claim_template_from_dict
    assert reader_for("resource.k8s.io/v1beta1", "ResourceClaim") is None  # an older version: skipped


def test_slices_not_local_to_a_node_and_deletion() -> None:
    text = "---\n".join([
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: net}\n"
        "spec: {driver: net.example.com, allNodes: true, pool: {name: fabric, generation: 3}, "
        "devices: [{name: nic-0, attributes: {gpu.nvidia.com/type: {string: nic}}}]}\n",
        resource_claim("gone").replace("  name: gone", "  name: gone\n  deletionTimestamp: '2026-01-01T00:00:00Z'"),
    ])
    snapshot = load_snapshot_text(text, "snap.yaml")
    (net,) = snapshot.resource_slices
    assert (net.node, net.generation) == (None, 3)
    assert net.devices[0].attributes == {"gpu.nvidia.com/type": "nic"}  # a qualified name stays as it is
    assert snapshot.resource_claims[0].deleting


def test_round_trip_through_the_writer() -> None:
    snapshot = load_snapshot_text(SNAPSHOT, "snap.yaml")
    back = load_snapshot_text(dump_snapshot(snapshot), "back.yaml")
    assert back.resource_slices == snapshot.resource_slices
    assert back.device_classes == snapshot.device_classes
    assert back.claim_templates == snapshot.claim_templates
    assert back.resource_claims == snapshot.resource_claims
    assert back.pods == snapshot.pods


def test_a_cluster_without_dra_reads_and_writes_as_before() -> None:
    text = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {nvidia.com/gpu: '8'}}\n"
    snapshot = load_snapshot_text(text, "snap.yaml")
    assert (snapshot.resource_slices, snapshot.device_classes, snapshot.resource_claims,
            snapshot.claim_templates) == ((), (), (), ())
    assert "resource.k8s.io" not in dump_snapshot(snapshot)


CLAIM = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c, namespace: ml}\n"
SLICE = "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\n"
CLASS = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.nvidia.com}\n"
TEMPLATE = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t, namespace: ml}\n"
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n  containers: [{name: c}]\n"
_SPEC = "spec: {driver: gpu.nvidia.com, nodeName: n1, pool: {name: n1}, devices: "

# Bad input, checked with the other kinds' in test_bad_input.py: (id, snapshot text, message after "snap.yaml: ").
BAD: list[tuple[str, str, str]] = [
    ("slice-driver", SLICE + "spec: {pool: {name: n1}}\n",
     "document 1 (ResourceSlice s): spec.driver: required field missing"),
    ("slice-pool-name", SLICE + "spec: {driver: gpu.nvidia.com, pool: {generation: 1}}\n",
     "document 1 (ResourceSlice s): spec.pool.name: required field missing"),
    ("slice-generation", SLICE + "spec: {driver: gpu.nvidia.com, pool: {name: n1, generation: '1'}}\n",
     'document 1 (ResourceSlice s): spec.pool.generation: must be a non-negative integer, got "1"'),
    ("slice-attribute-none", SLICE + _SPEC + "[{name: gpu-0, attributes: {index: {}}}]}\n",
     "document 1 (ResourceSlice s): spec.devices[0].attributes.index: must set exactly one of int, bool, "
     "string, version"),
    ("slice-attribute-int", SLICE + _SPEC + "[{name: gpu-0, attributes: {index: {int: '0'}}}]}\n",
     'document 1 (ResourceSlice s): spec.devices[0].attributes.index.int: must be an integer, got "0"'),
    ("slice-capacity", SLICE + _SPEC + "[{name: gpu-0, capacity: {memory: {value: lots}}}]}\n",
     'document 1 (ResourceSlice s): spec.devices[0].capacity.memory.value: malformed quantity "lots"'),
    ("slice-device-twice", SLICE + _SPEC + "[{name: gpu-0}, {name: gpu-0}]}\n",
     'document 1 (ResourceSlice s): spec.devices[1].name: duplicate device "gpu-0"'),
    ("slice-duplicate", SLICE + "spec: {driver: d, pool: {name: p}}\n---\n" + SLICE + "spec: {driver: d, pool: {name: p}}\n",
     "document 2 (ResourceSlice s): metadata.name: duplicate ResourceSlice s (first in document 1)"),
    ("class-selector", CLASS + "spec: {selectors: [{cel: {}}]}\n",
     "document 1 (DeviceClass gpu.nvidia.com): spec.selectors[0].cel.expression: required field missing"),
    ("class-config", CLASS + "spec: {config: [{opaque: {parameters: {}}}]}\n",
     "document 1 (DeviceClass gpu.nvidia.com): spec.config[0].opaque.driver: required field missing"),
    ("claim-neither", CLAIM + "spec: {devices: {requests: [{name: gpu}]}}\n",
     "document 1 (ResourceClaim ml/c): spec.devices.requests[0]: must set exactly one of exactly, firstAvailable"),
    ("claim-class", CLAIM + "spec: {devices: {requests: [{name: gpu, exactly: {count: 1}}]}}\n",
     "document 1 (ResourceClaim ml/c): spec.devices.requests[0].exactly.deviceClassName: required field missing"),
    ("claim-count", CLAIM + "spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: g, count: 0}}]}}\n",
     "document 1 (ResourceClaim ml/c): spec.devices.requests[0].exactly.count: must be a positive integer, got 0"),
    ("claim-mode", CLAIM + "spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: g, "
     "allocationMode: Some}}]}}\n",
     "document 1 (ResourceClaim ml/c): spec.devices.requests[0].exactly.allocationMode: must be one of "
     'ExactCount, All, got "Some"'),
    ("claim-request-twice", CLAIM + "spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: g}}, "
     "{name: gpu, exactly: {deviceClassName: g}}]}}\n",
     'document 1 (ResourceClaim ml/c): spec.devices.requests[1].name: duplicate request "gpu"'),
    ("claim-result", CLAIM + "status: {allocation: {devices: {results: [{request: gpu, driver: d, pool: p}]}}}\n",
     "document 1 (ResourceClaim ml/c): status.allocation.devices.results[0].device: required field missing"),
    ("claim-reserved", CLAIM + "status: {reservedFor: [{resource: pods}]}\n",
     "document 1 (ResourceClaim ml/c): status.reservedFor[0].name: required field missing"),
    ("claim-duplicate", CLAIM + "---\n" + CLAIM,
     "document 2 (ResourceClaim ml/c): metadata.name: duplicate ResourceClaim ml/c (first in document 1)"),
    ("template-spec", TEMPLATE + "spec: {spec: {devices: {requests: 3}}}\n",
     "document 1 (ResourceClaimTemplate ml/t): spec.spec.devices.requests: must be a list, got 3"),
    ("pod-claim-both", POD + "  resourceClaims: [{name: gpu, resourceClaimName: a, resourceClaimTemplateName: b}]\n",
     "document 1 (Pod ml/p): spec.resourceClaims[0]: must set exactly one of resourceClaimName, "
     "resourceClaimTemplateName"),
    ("pod-claim-name", POD + "  resourceClaims: [{resourceClaimName: a}]\n",
     "document 1 (Pod ml/p): spec.resourceClaims[0].name: required field missing"),
    ("pod-claim-status", POD + "  resourceClaims: [{name: gpu, resourceClaimTemplateName: t}]\n"
     "status: {resourceClaimStatuses: [{name: gpu, resourceClaimName: 7}]}\n",
     "document 1 (Pod ml/p): status.resourceClaimStatuses[0].resourceClaimName: must be a string, got 7"),
]


def test_replay_reads_dra_objects(tmp_path: Path) -> None:
    """A snapshot of DRA objects through the command: read, and the decisions as JSON."""
    path = tmp_path / "snap.yaml"
    path.write_text(SNAPSHOT)
    result = subprocess.run([sys.executable, "-m", "gpufleet", "replay", str(path)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)) == {"bindings", "evictions", "pending"}
