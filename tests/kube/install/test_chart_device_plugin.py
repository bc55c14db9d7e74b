"""The chart's optional device plugin DaemonSet (devicePlugin.enabled) and its least-privilege identity."""

from __future__ import annotations

from typing import Any

import pytest

from .test_chart import CHART, NAMESPACE, _lint_problems, render

ON = {"devicePlugin": {"enabled": True}}


def _one(docs: list[dict[str, Any]], kind: str, suffix: str = "-device-plugin") -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    return doc


def test_off_by_default() -> None:
    assert not [d for d in render() if d["metadata"]["name"].endswith("-device-plugin")]


def test_the_daemonset_runs_the_plugin_on_gpu_nodes_with_the_kubelet_directory() -> None:
    docs = render(ON)
    daemonset = _one(docs, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == [
        "device-plugin", "--node=$(NODE_NAME)", "--kubelet-dir=/var/lib/kubelet/device-plugins",
        "--device-list-strategy=cdi", "--mps-host-dir=/run/gpufleet/mps", "--log-level=info"]
    assert container["env"][0] == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert container["volumeMounts"] == [{"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"}]
    assert pod["volumes"] == [{"name": "device-plugins", "hostPath": {
        "path": "/var/lib/kubelet/device-plugins", "type": "Directory"}}]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["priorityClassName"] == "system-node-critical"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert "privileged" not in container["securityContext"]
    assert pod["serviceAccountName"] == daemonset["metadata"]["name"]
    assert daemonset["metadata"]["namespace"] == NAMESPACE


def test_its_role_reads_pods_and_patches_them_only() -> None:
    docs = render(ON)
    role = _one(docs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]}]
    binding = _one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": role["metadata"]["name"], "namespace": NAMESPACE}]
    assert not [d for d in render({**ON, "rbac": {"create": False}}) if d["kind"] == "ClusterRole"
                and d["metadata"]["name"].endswith("-device-plugin")]


def test_values_are_passed_and_checked() -> None:
    docs = render({"devicePlugin": {"enabled": True, "deviceListStrategy": "envvar", "kubeletDir": "/k/dp",
                                    "image": "registry.example/gpufleet-agent:1"}})
    [container] = _one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert "--device-list-strategy=envvar" in container["args"] and "--kubelet-dir=/k/dp" in container["args"]
    assert container["image"] == "registry.example/gpufleet-agent:1"
    with pytest.raises(Exception, match="deviceListStrategy"):
        render({"devicePlugin": {"enabled": True, "deviceListStrategy": "volume-mounts"}})


def test_helm_lint_finds_nothing_with_the_device_plugin() -> None:
    assert _lint_problems(CHART, ON) == []
