"""The chart's optional node agent DaemonSet (agent.enabled) and its least-privilege identity."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube.install.rbac import AGENT_RULES

from .test_chart import CHART, NAMESPACE, _lint_problems, render

ON = {"agent": {"enabled": True}}


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith("-agent")]
    return doc


def test_off_by_default() -> None:
    assert not [d for d in render() if d["metadata"]["name"].endswith("-agent")]


def test_the_daemonset_runs_the_agent_on_gpu_nodes_with_the_host_pids() -> None:
    daemonset = _one(render(ON), "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == ["agent", "--interval=1", "--clean-period=3600", "--retired-pages-limit=60",
                                 "--feature-labels", "--usage-export", "--metrics-port=9402", "--proc-root=/proc",
                                 "--log-level=info"]
    assert container["env"][0] == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert pod["hostPID"] is True and "volumes" not in pod
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert "privileged" not in container["securityContext"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert pod["serviceAccountName"] == daemonset["metadata"]["name"]
    assert daemonset["metadata"]["namespace"] == NAMESPACE


def test_beside_gfd_and_without_the_usage_export() -> None:
    pod = _one(render({"agent": {"enabled": True, "featureLabels": False, "usageExport": False}}),
               "DaemonSet")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert "--no-feature-labels" in container["args"] and "--no-usage-export" in container["args"]


def test_without_host_pids_the_host_proc_is_mounted_read_only() -> None:
    pod = _one(render({"agent": {"enabled": True, "hostPID": False, "interval": 2, "cleanPeriod": 900,
                                 "affinity": {"nodeAffinity": {}}}}), "DaemonSet")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["hostPID"] is False
    assert "--proc-root=/host/proc" in container["args"] and "--clean-period=900" in container["args"]
    assert container["volumeMounts"] == [{"name": "host-proc", "mountPath": "/host/proc", "readOnly": True}]
    assert pod["volumes"] == [{"name": "host-proc", "hostPath": {"path": "/proc", "type": "Directory"}}]
    assert pod["affinity"] == {"nodeAffinity": {}}


def test_its_role_is_the_generated_rules_and_writes_no_pod() -> None:
    docs = render(ON)
    role = _one(docs, "ClusterRole")
    assert role["rules"] == [dict(rule) for rule in AGENT_RULES]
    pod_verbs = {v for r in role["rules"] if "" in r["apiGroups"] for res in r["resources"]
                 if res.startswith("pods") for v in r["verbs"]}
    assert pod_verbs == {"list", "watch"}
    binding = _one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": role["metadata"]["name"], "namespace": NAMESPACE}]
    assert not [d for d in render({**ON, "rbac": {"create": False}}) if d["kind"] == "ClusterRole"
                and d["metadata"]["name"].endswith("-agent")]


def test_values_are_checked() -> None:
    with pytest.raises(Exception, match="interval"):
        render({"agent": {"enabled": True, "interval": 0}})
    with pytest.raises(Exception, match="logLevel"):
        render({"agent": {"enabled": True, "logLevel": "chatty"}})


def test_helm_lint_finds_nothing_with_the_agent() -> None:
    assert _lint_problems(CHART, ON) == []
