"""resource.k8s.io/v1 objects as NVIDIA's DRA driver for GPUs and its examples write them, as YAML text
(shared by the DRA tests of the adapters, the controller and the inspect commands, and by scenario
files): a ResourceSlice of a node's GPUs, the DeviceClass ``gpu.nvidia.com``, ResourceClaimTemplates and
ResourceClaims with ``exactly`` requests, and pods naming them. :func:`objects` parses them into the
dicts an API server holds."""

from __future__ import annotations

from typing import Any

import yaml

GPU_CLASS_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


def gpu_device(index: int, memory: str = "80Gi", product: str = "NVIDIA H100 80GB HBM3") -> str:
    return f"""\
  - name: gpu-{index}
    attributes:
      architecture: {{string: Hopper}}
      brand: {{string: Nvidia}}
      cudaComputeCapability: {{version: 9.0.0}}
      driverVersion: {{version: 570.124.6}}
      index: {{int: {index}}}
      minor: {{int: {index}}}
      productName: {{string: {product}}}
      type: {{string: gpu}}
      uuid: {{string: GPU-{index:08d}-aaaa-bbbb-cccc-dddddddddddd}}
      addressingMode: {{string: None}}
      resource.kubernetes.io/pcieRoot: {{string: pci0000:{index:02d}}}
    capacity:
      memory: {{value: {memory}}}
"""


def resource_slice(node: str, gpus: int = 4, generation: int = 1, memory: str = "80Gi") -> str:
    return f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: {node}-gpu.nvidia.com-x7k2p
  ownerReferences:
  - {{apiVersion: v1, kind: Node, name: {node}, uid: 00000000-0000-0000-0000-000000000001}}
spec:
  driver: gpu.nvidia.com
  nodeName: {node}
  pool:
    name: {node}
    generation: {generation}
    resourceSliceCount: 1
  devices:
""" + "".join(gpu_device(i, memory) for i in range(gpus))


DEVICE_CLASS = f"""\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.nvidia.com
spec:
  selectors:
  - cel:
      expression: "{GPU_CLASS_SELECTOR}"
"""


def claim_template(name: str = "single-gpu", namespace: str = "ml", count: int = 1, extra: str = "") -> str:
    return f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: {namespace}
  name: {name}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          count: {count}
{extra}"""


def resource_claim(name: str, namespace: str = "ml", uid: str = "", requests: str = "", status: str = "") -> str:
    requests = requests or """\
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
"""
    meta_uid = f"\n  uid: {uid}" if uid else ""
    return f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  namespace: {namespace}
  name: {name}{meta_uid}
spec:
  devices:
    requests:
{requests}{status}"""


def dra_pod(name: str, namespace: str = "ml", entries: str = "", statuses: str = "", node: str = "",
            annotations: str = "{}", phase: str = "Pending") -> str:
    entries = entries or "  - {name: gpu, resourceClaimTemplateName: single-gpu}\n"
    node_line = f"  nodeName: {node}\n" if node else ""
    status = f"status:\n  phase: {phase}\n" + (f"  resourceClaimStatuses:\n{statuses}" if statuses else "")
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}, uid: uid-{name}, annotations: {annotations}}}
spec:
  schedulerName: gpufleet
{node_line}  containers:
  - name: ctr
    image: ubuntu:22.04
    command: ["bash", "-c", "nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims:
      - name: gpu
  resourceClaims:
{entries}{status}"""


def objects(*texts: str) -> list[dict[str, Any]]:
    """The objects of YAML ``texts`` (each one document), as an API server holds them."""
    return [dict(yaml.safe_load(text)) for text in texts]
