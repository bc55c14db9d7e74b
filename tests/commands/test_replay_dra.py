"""`gpufleet replay` with Dynamic Resource Allocation objects: the resolver reads the claims before the
engine and hands the GPUs back to them after; each binding that allocates lists its devices in the
JSON (docs/semantics-notes.md, "Allocation") and in a devices column of the table; the resolver's
warnings are printed as the engine's are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpufleet.testing.dra_objects import DEVICE_CLASS, claim_template, dra_pod, resource_claim, resource_slice

NODE = ("apiVersion: v1\nkind: Node\nmetadata: {name: %s, labels: {nvidia.com/gpu.memory: '81920'}}\n"
        "status: {allocatable: {cpu: '64', memory: 512Gi, pods: '110'}}\n")
TWINS = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n2-gpus}
spec:
  driver: gpu.nvidia.com
  nodeName: n2
  pool: {name: n2, generation: 1}
  devices:
  - {name: gpu-a, attributes: {type: {string: gpu}, index: {int: 0}}}
  - {name: gpu-b, attributes: {type: {string: gpu}, index: {int: 0}}}
"""
SNAPSHOT = "---\n".join([
    NODE % "n1", NODE % "n2", resource_slice("n1", gpus=4), TWINS, DEVICE_CLASS, claim_template(count=2),
    resource_claim("p-1-gpu-x7k2", requests="      - name: gpu\n        exactly: {deviceClassName: gpu.nvidia.com, "
                   "count: 2}\n"),
    dra_pod("p-1", statuses="  - {name: gpu, resourceClaimName: p-1-gpu-x7k2}\n"),
    resource_claim("odd", requests="      - name: gpu\n        exactly: {deviceClassName: gpu.nvidia.com, "
                   "adminAccess: true}\n"),
    dra_pod("p-2", entries="  - {name: gpu, resourceClaimName: odd}\n"),
    dra_pod("p-3"),
    "apiVersion: v1\nkind: Pod\nmetadata: {name: plain, namespace: ml}\n"
    "spec: {schedulerName: gpufleet, nodeSelector: {kubernetes.io/hostname: none}, containers: [{name: c}]}\n",
])
WARNING = "node n2: DRA GPU devices gpu-a, gpu-b share index 0; its ResourceSlices are ignored"


def _replay(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "snap.yaml"
    path.write_text(SNAPSHOT)
    return subprocess.run([sys.executable, "-m", "gpufleet", "replay", str(path), *args],
                          capture_output=True, text=True, check=False, timeout=120)


def test_json_lists_each_allocated_device_with_its_claim(tmp_path: Path) -> None:
    result = _replay(tmp_path)
    assert result.returncode == 0, result.stderr
    decided = json.loads(result.stdout)
    (binding,) = decided["bindings"]
    assert binding == {"pod": "ml/p-1", "node": "n1", "gpus": [0, 1], "devices": [
        {"claim": "p-1-gpu-x7k2", "request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"},
        {"claim": "p-1-gpu-x7k2", "request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"},
    ]}
    pending = {p["pod"]: p["reason"] for p in decided["pending"]}
    assert pending["ml/p-2"] == 'resourceclaim "odd" request "gpu": adminAccess is not supported by gpufleet'
    assert pending["ml/p-3"] == 'waiting for resourceclaim for entry "gpu" (template "single-gpu") to be created'
    assert f"warning: {WARNING}" in result.stderr.splitlines()


def test_table_has_a_devices_column_and_the_warning(tmp_path: Path) -> None:
    result = _replay(tmp_path, "--format", "table")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["POD", "NODE", "GPUS", "SHARE", "DEVICES"]
    assert lines[2].split() == ["ml/p-1", "n1", "0,1", "2", "whole", "p-1-gpu-x7k2=n1/gpu-0", "p-1-gpu-x7k2=n1/gpu-1"]
    assert f"  {WARNING}" in lines


def test_output_lists_devices_only_when_a_binding_has_some() -> None:
    from gpufleet.adapters import decisions_to_dict, render_table
    from gpufleet.domain import Binding, ClaimAllocation, Decisions, DeviceResult, NodeName

    plain = Decisions(bindings=(Binding("ml/a", NodeName("n1"), gpus=(0,)),))
    assert "devices" not in decisions_to_dict(plain)["bindings"][0]
    assert "DEVICES" not in render_table(plain)
    shared = Decisions(bindings=(Binding("ml/b", NodeName("n1"), gpus=(3,), devices=(
        ClaimAllocation("shared", (DeviceResult("gpu", "gpu.nvidia.com", "n1", "gpu-3"),), shared=True),)),))
    assert decisions_to_dict(shared)["bindings"][0]["devices"] == [
        {"claim": "shared", "request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-3"}]
