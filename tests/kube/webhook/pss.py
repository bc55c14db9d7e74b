"""The Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/)
as the pod-security admission plugin checks a pod spec, written out for the tests: which level
(privileged, baseline, restricted) a pod meets. Only what the spec says is judged, as the plugin does
(the devices and mounts a device plugin adds at container start are not in the spec)."""

from __future__ import annotations

from typing import Any

_BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
_RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                       "projected", "secret"}  # fmt: skip


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for section in ("initContainers", "containers", "ephemeralContainers") for c in spec.get(section, [])]


def baseline_problems(pod: dict[str, Any]) -> list[str]:
    spec = pod["spec"]
    problems = [f"spec.{k}" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    problems += [f"volume {v['name']}: hostPath" for v in spec.get("volumes", []) if "hostPath" in v]
    problems += [f"sysctl {s['name']}" for s in spec.get("securityContext", {}).get("sysctls", [])
                 if s["name"] not in _SAFE_SYSCTLS]  # fmt: skip
    for context in [spec.get("securityContext", {})] + [c.get("securityContext", {}) for c in _containers(spec)]:
        if context.get("windowsOptions", {}).get("hostProcess"):
            problems.append("hostProcess")
        if context.get("seccompProfile", {}).get("type") == "Unconfined":
            problems.append("seccomp Unconfined")
        if context.get("appArmorProfile", {}).get("type") == "Unconfined":
            problems.append("appArmor Unconfined")
        se_type = context.get("seLinuxOptions", {}).get("type")
        if se_type not in (None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"):
            problems.append("seLinux type")
    for container in _containers(spec):
        context = container.get("securityContext", {})
        if context.get("privileged"):
            problems.append(f"{container['name']}: privileged")
        added = set(context.get("capabilities", {}).get("add", []))
        if added - _BASELINE_CAPABILITIES:
            problems.append(f"{container['name']}: capabilities")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            problems.append(f"{container['name']}: hostPort")
        if context.get("procMount", "Default") != "Default":
            problems.append(f"{container['name']}: procMount")
    return problems


def restricted_problems(pod: dict[str, Any]) -> list[str]:
    spec = pod["spec"]
    problems = baseline_problems(pod)
    problems += [f"volume {v['name']}: kind" for v in spec.get("volumes", [])
                 if not (set(v) - {"name"}) <= _RESTRICTED_VOLUMES]  # fmt: skip
    pod_context = spec.get("securityContext", {})
    for container in _containers(spec):
        context = container.get("securityContext", {})
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{container['name']}: allowPrivilegeEscalation")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            problems.append(f"{container['name']}: runAsNonRoot")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            problems.append(f"{container['name']}: runAsUser 0")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{container['name']}: seccompProfile")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []) or set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{container['name']}: capabilities")
    return problems


def level(pod: dict[str, Any]) -> str:
    """The strictest level ``pod`` meets."""
    if not restricted_problems(pod):
        return "restricted"
    return "baseline" if not baseline_problems(pod) else "privileged"
