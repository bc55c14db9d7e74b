"""GPU visibility a pod sets itself is refused at admission, for every pod the webhook sees (not only
gpufleet's): real AdmissionReview v1 JSON, over HTTPS too; and the fractional pods the webhook wires
need no more than the Pod Security level the user's pod already meets (restricted included)."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.kube.webhook.mutation import MutationSettings
from gpufleet.kube.webhook.review import review
from gpufleet.kube.webhook.server import build_app, tls_context
from gpufleet.kube.webhook.visibility import VISIBILITY_ENV_VARS

from .pss import level, restricted_problems
from .test_webhook_review import patched
from .test_webhook_server import _client_context, _serving, make_pair

SETTINGS = MutationSettings()
WHY = "a pod may not choose the GPUs it sees; request GPUs as resources"


def a_pod(*, scheduler: str = "default-scheduler", annotations: dict[str, str] | None = None,
          env: list[dict[str, Any]] | None = None, mounts: list[dict[str, Any]] | None = None,
          volumes: list[dict[str, Any]] | None = None, resources: dict[str, Any] | None = None,
          init: dict[str, Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "cuda:12"}
    for key, value in (("env", env), ("volumeMounts", mounts), ("resources", resources)):
        if value is not None:
            container[key] = value
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [container]}
    if init is not None:
        spec["initContainers"] = [{"name": "warmup", "image": "cuda:12", **init}]
    if volumes is not None:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", "annotations": annotations or {}}, "spec": spec}


def request(obj: dict[str, Any], *, operation: str = "CREATE", sub: str = "",
            old: dict[str, Any] | None = None) -> dict[str, Any]:
    req: dict[str, Any] = {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "ml", "name": "p",
        "operation": operation, "object": obj, "userInfo": {"username": "mallory"},
    }
    if sub:
        req["subResource"] = sub
    if old is not None:
        req["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def _host(name: str, path: str) -> list[dict[str, Any]]:
    return [{"name": name, "hostPath": {"path": path}}]


def _mount(path: str) -> list[dict[str, Any]]:
    return [{"name": "v", "mountPath": path}]


def _ephemeral(env: list[dict[str, Any]]) -> dict[str, Any]:
    obj = a_pod()
    obj["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox", "env": env}]
    return obj


FRACTIONAL = {"gpufleet.dev/gpu-blocks": "25"}
CDI = {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}
SHARE = {"limits": {"gpufleet.dev/mps-share": "1"}}

# (case, AdmissionReview, the exact 403 message)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("visible devices env", request(a_pod(env=[{"name": "MODEL", "value": "bert"},
                                               {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
     f"spec.containers[0].env[1] (container main) sets NVIDIA_VISIBLE_DEVICES: {WHY}"),
    ("MIG config env of an init container", request(a_pod(init={"env": [{"name": "NVIDIA_MIG_CONFIG_DEVICES",
                                                                         "value": "all"}]})),
     f"spec.initContainers[0].env[0] (container warmup) sets NVIDIA_MIG_CONFIG_DEVICES: {WHY}"),
    ("MIG monitor env", request(a_pod(env=[{"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"}])),
     f"spec.containers[0].env[0] (container main) sets NVIDIA_MIG_MONITOR_DEVICES: {WHY}"),
    ("env from the downward API", request(a_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.annotations['gpufleet.dev/gpu-index']"}}}])),
     f"spec.containers[0].env[0] (container main) sets NVIDIA_VISIBLE_DEVICES: {WHY}"),
    ("fractional pod of gpufleet's with the env", request(a_pod(scheduler="gpufleet", annotations=FRACTIONAL,
                                                                env=[{"name": "NVIDIA_VISIBLE_DEVICES",
                                                                      "value": "0,1,2,3"}])),
     f"spec.containers[0].env[0] (container main) sets NVIDIA_VISIBLE_DEVICES: {WHY}"),
    ("device-list mount", request(a_pod(mounts=_mount("/var/run/nvidia-container-devices/all"))),
     "spec.containers[0].volumeMounts[0] (container main) mounts at /var/run/nvidia-container-devices/all, "
     f"under /var/run/nvidia-container-devices: {WHY}"),
    ("device-list mount, the directory itself", request(a_pod(mounts=_mount("/var/run/nvidia-container-devices/"))),
     "spec.containers[0].volumeMounts[0] (container main) mounts at /var/run/nvidia-container-devices/, "
     f"under /var/run/nvidia-container-devices: {WHY}"),
    ("device-list mount through /run", request(a_pod(mounts=_mount("//run/x/../nvidia-container-devices/GPU-1"))),
     "spec.containers[0].volumeMounts[0] (container main) mounts at //run/x/../nvidia-container-devices/GPU-1, "
     f"under /var/run/nvidia-container-devices: {WHY}"),
    ("hostPath of a GPU device node", request(a_pod(volumes=_host("gpu", "/dev/nvidia0"))),
     f"spec.volumes[0] (volume gpu) is a hostPath of /dev/nvidia0, which reaches /dev/nvidia*: {WHY}"),
    ("hostPath of /dev", request(a_pod(volumes=_host("dev", "/dev/"))),
     f"spec.volumes[0] (volume dev) is a hostPath of /dev/, which reaches /dev/nvidia*: {WHY}"),
    ("hostPath of the host's root", request(a_pod(volumes=_host("root", "/"))),
     f"spec.volumes[0] (volume root) is a hostPath of /, which reaches /dev/nvidia*: {WHY}"),
    ("hostPath of another GPU's MPS pipe", request(a_pod(volumes=_host("pipe", "/run/gpufleet/mps/gpu-1/pipe"))),
     f"spec.volumes[0] (volume pipe) is a hostPath of /run/gpufleet/mps/gpu-1/pipe, which reaches "
     f"/run/gpufleet/mps: {WHY}"),
    ("hostPath above the MPS root, through /var/run", request(a_pod(volumes=_host("run", "/var/run/gpufleet"))),
     f"spec.volumes[0] (volume run) is a hostPath of /var/run/gpufleet, which reaches /run/gpufleet/mps: {WHY}"),
    ("hostPath of the device-plugin sockets",
     request(a_pod(volumes=[{"name": "logs", "hostPath": {"path": "/var/log"}},
                            *_host("dp", "/var/lib/kubelet/device-plugins/kubelet.sock")])),
     "spec.volumes[1] (volume dp) is a hostPath of /var/lib/kubelet/device-plugins/kubelet.sock, which reaches "
     f"/var/lib/kubelet/device-plugins: {WHY}"),
    ("hostPath of the CDI specs", request(a_pod(volumes=_host("cdi", "/etc/cdi"))),
     f"spec.volumes[0] (volume cdi) is a hostPath of /etc/cdi, which reaches /etc/cdi: {WHY}"),
    ("CDI annotation", request(a_pod(annotations=CDI)),
     f"metadata.annotations[cdi.k8s.io/gpu] names CDI devices: {WHY}"),
    ("CDI annotation added by an update", request(a_pod(annotations=CDI), operation="UPDATE", old=a_pod()),
     f"metadata.annotations[cdi.k8s.io/gpu] names CDI devices: {WHY}"),
    ("CDI annotation changed by an update",
     request(a_pod(annotations=CDI), operation="UPDATE", old=a_pod(annotations={"cdi.k8s.io/gpu": "x=y"})),
     f"metadata.annotations[cdi.k8s.io/gpu] names CDI devices: {WHY}"),
    ("env of an ephemeral container",
     request(_ephemeral([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]), operation="UPDATE",
             sub="ephemeralcontainers", old=a_pod()),
     f"spec.ephemeralContainers[0].env[0] (container debug) sets NVIDIA_VISIBLE_DEVICES: {WHY}"),
    ("a GPU index preset on a pod of another scheduler",
     request(a_pod(annotations={"gpufleet.dev/gpu-index": "0"}, resources={"limits": {"nvidia.com/gpu": "1"}})),
     "metadata.annotations[gpufleet.dev/gpu-index] is written by gpufleet's scheduler at binding and read by its "
     f"device plugin; a pod of scheduler default-scheduler may not set it: {WHY}"),
    ("an MPS memory limit preset on a pod that names no scheduler",
     request({**a_pod(annotations={"gpufleet.dev/mps-mem-limit": "0=81920M"}),
              "spec": {"containers": [{"name": "main", "image": "x"}]}}),
     "metadata.annotations[gpufleet.dev/mps-mem-limit] is written by gpufleet's scheduler at binding and read by "
     f"its device plugin; a pod of scheduler default-scheduler may not set it: {WHY}"),
    ("an mps-share of a pod that is not gpufleet's", request(a_pod(resources=SHARE, annotations=FRACTIONAL)),
     "spec.containers[0].resources.limits[gpufleet.dev/mps-share] (container main): only fractional pods of "
     f"gpufleet's get gpufleet.dev/mps-share (from its webhook); {WHY}"),
    ("an mps-share of a whole-GPU pod of gpufleet's",
     request(a_pod(scheduler="gpufleet", resources={"requests": {"gpufleet.dev/mps-share": "1"}})),
     "spec.containers[0].resources.requests[gpufleet.dev/mps-share] (container main): only fractional pods of "
     f"gpufleet's get gpufleet.dev/mps-share (from its webhook); {WHY}"),
    ("DRA claims of a pod of another scheduler (kube-scheduler would allocate them outside gpufleet's quota)",
     request({**a_pod(), "spec": {**a_pod()["spec"], "resourceClaims": [
         {"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]}}),
     "spec.resourceClaims: a pod of scheduler default-scheduler would get its devices from kube-scheduler, "
     "outside gpufleet's quota; set schedulerName: gpufleet"),
]  # fmt: skip

ALLOWED: list[tuple[str, dict[str, Any]]] = [
    ("a plain pod", request(a_pod())),
    ("other env, mounts and hostPaths", request(a_pod(
        env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}],
        mounts=_mount("/var/run/secrets/app"), volumes=_host("logs", "/var/log/pods"),
        annotations={"example.com/cdi.k8s.io": "x"}))),
    ("a whole-GPU pod", request(a_pod(resources={"limits": {"nvidia.com/gpu": "2"}}))),
    ("a fractional pod of gpufleet's with its share", request(a_pod(scheduler="gpufleet", annotations=FRACTIONAL,
                                                                    resources={**SHARE, "requests": SHARE["limits"]}))),
    ("an update that keeps a CDI annotation", request(a_pod(annotations={**CDI, "team": "a"}), operation="UPDATE",
                                                      old=a_pod(annotations=CDI))),
    ("an update of labels", request(a_pod(annotations={"team": "b"}), operation="UPDATE", old=a_pod())),
    ("a GPU index added by an update (the admission policy's to judge)",
     request(a_pod(annotations={"gpufleet.dev/gpu-index": "0"}), operation="UPDATE", old=a_pod())),
    ("a debug container", request(_ephemeral([{"name": "TERM", "value": "xterm"}]), operation="UPDATE",
                                  sub="ephemeralcontainers", old=a_pod())),
    ("DRA claims of a pod of gpufleet's", request({**a_pod(scheduler="gpufleet"), "spec": {
        **a_pod(scheduler="gpufleet")["spec"], "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}})),
]  # fmt: skip


def _forbidden(message: str) -> dict[str, Any]:
    return {"uid": "u-1", "allowed": False,
            "status": {"status": "Failure", "code": 403, "reason": "Forbidden", "message": message}}


@pytest.mark.parametrize(("case", "body", "message"), REFUSED, ids=[case for case, _, _ in REFUSED])
def test_each_visibility_field_is_refused_with_its_message(case: str, body: dict[str, Any], message: str) -> None:
    for validate in (False, True):
        assert review(copy.deepcopy(body), SETTINGS, validate=validate)["response"] == _forbidden(message), case


@pytest.mark.parametrize(("case", "body"), ALLOWED, ids=[case for case, _ in ALLOWED])
def test_pods_that_set_no_visibility_pass(case: str, body: dict[str, Any]) -> None:
    response = review(copy.deepcopy(body), SETTINGS, validate=True)["response"]
    assert response == {"uid": "u-1", "allowed": True}, case


def test_the_mps_root_is_the_webhooks_setting() -> None:
    body = request(a_pod(volumes=_host("mps", "/srv/mps/gpu-0/shm")))
    assert review(copy.deepcopy(body), SETTINGS)["response"]["allowed"] is True
    assert review(body, MutationSettings(mps_host_dir="/srv/mps"))["response"] == _forbidden(
        f"spec.volumes[0] (volume mps) is a hostPath of /srv/mps/gpu-0/shm, which reaches /srv/mps: {WHY}")


def test_over_https_every_case_on_both_paths(tmp_path: Path) -> None:
    """The server as the API server calls it: /mutate (the fractional entry) and /validate (the
    gpu-visibility entry), HTTPS with the chart's kind of certificate."""
    ca_file, cert_file, key_file = make_pair(tmp_path, "one")
    got: dict[tuple[str, str], Any] = {}

    async def body(url: str) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
            for path in ("/mutate", "/validate"):
                for case, review_body in [(c, b) for c, b, _ in REFUSED] + ALLOWED:
                    async with session.post(f"{url}{path}", data=json.dumps(review_body).encode(),
                                            headers={"Content-Type": "application/json"},
                                            ssl=_client_context(ca_file)) as reply:
                        assert reply.status == 200
                        got[(path, case)] = (await reply.json())["response"]

    asyncio.run(_serving(build_app(SETTINGS), tls_context(str(cert_file), str(key_file)), body))
    for path in ("/mutate", "/validate"):
        for case, _, message in REFUSED:
            assert got[(path, case)] == _forbidden(message), (path, case)
        for case, _ in ALLOWED:
            assert got[(path, case)]["allowed"] is True, (path, case)


# --- properties ---------------------------------------------------------------------------------

_NAMES = st.sampled_from(["PATH", "MODEL", "CUDA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "HOME", "LANG"])
_ENV = st.lists(st.builds(lambda n, v: {"name": n, "value": v}, _NAMES, st.text(max_size=5)), max_size=4)
_CONTAINERS = st.lists(st.builds(lambda env: {"image": "x", "env": env}, _ENV), min_size=1, max_size=3)
_SECTIONS = ("initContainers", "containers", "ephemeralContainers")


@settings(max_examples=150, deadline=None)
@given(sections=st.fixed_dictionaries({s: _CONTAINERS for s in _SECTIONS}), section=st.sampled_from(_SECTIONS),
       data=st.data(), variable=st.sampled_from(VISIBILITY_ENV_VARS), scheduler=st.sampled_from(["gpufleet", "x"]),
       annotations=st.sampled_from([{}, FRACTIONAL]))
def test_a_visibility_variable_anywhere_in_any_container_is_refused(
        sections: dict[str, list[dict[str, Any]]], section: str, data: st.DataObject, variable: str,
        scheduler: str, annotations: dict[str, str]) -> None:
    containers = sections[section]
    index = data.draw(st.integers(0, len(containers) - 1), label="container")
    env = containers[index]["env"]
    position = data.draw(st.integers(0, len(env)), label="position")
    env.insert(position, {"name": variable, "value": "all"})
    spec: dict[str, Any] = {"schedulerName": scheduler}
    for name, items in sections.items():
        spec[name] = [{"name": f"{name}-{i}", **c} for i, c in enumerate(items)]
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": annotations}, "spec": spec}
    ephemeral = section == "ephemeralContainers" and data.draw(st.booleans(), label="as an update")
    body = request(obj, operation="UPDATE", sub="ephemeralcontainers", old=obj) if ephemeral else request(obj)
    response = review(body, SETTINGS)["response"]
    assert response == _forbidden(
        f"spec.{section}[{index}].env[{position}] (container {section}-{index}) sets {variable}: {WHY}")


@settings(max_examples=100, deadline=None)
@given(sections=st.fixed_dictionaries({s: _CONTAINERS for s in ("initContainers", "containers")}),
       host=st.sampled_from(["/var/log", "/data/x", "/srv", "/tmp/cache", "/var/lib/docker-cache"]))
def test_pods_without_visibility_fields_are_allowed(sections: dict[str, list[dict[str, Any]]], host: str) -> None:
    spec: dict[str, Any] = {"volumes": _host("h", host)}
    for name, items in sections.items():
        spec[name] = [{"name": f"{name}-{i}", **c} for i, c in enumerate(items)]
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    assert review(request(obj), SETTINGS, validate=True)["response"] == {"uid": "u-1", "allowed": True}


# --- Pod Security ---------------------------------------------------------------------------------

RESTRICTED_CONTEXT = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                      "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip


def test_a_restricted_fractional_pod_stays_restricted_once_wired() -> None:
    """The wiring adds an extended resource (and the DaemonSet's node selector and a runtime class),
    none of which the Pod Security Standards look at: the pod needs no more than what its author
    wrote, down to `restricted` (the GPU, the MPS pipe and /dev/shm are added at container start by
    the device plugin, outside the spec)."""
    obj = a_pod(scheduler="gpufleet", annotations=FRACTIONAL,
                init={"securityContext": RESTRICTED_CONTEXT},
                volumes=[{"name": "scratch", "emptyDir": {}}])
    obj["spec"]["containers"][0]["securityContext"] = RESTRICTED_CONTEXT
    assert restricted_problems(obj) == []
    settings_ = MutationSettings(node_selector={"nvidia.com/gpu.present": "true"}, runtime_class="nvidia")
    after, response = patched(copy.deepcopy(obj), settings_)
    assert response["allowed"] is True and after != obj
    assert restricted_problems(after) == [] and level(after) == "restricted"
    # and a plain fractional pod (no securityContext) meets baseline before and after
    plain = a_pod(scheduler="gpufleet", annotations=FRACTIONAL)
    assert level(plain) == level(patched(copy.deepcopy(plain))[0]) == "baseline"


def test_the_pss_helper_sees_what_the_old_wiring_added() -> None:
    """The check above is not vacuous: a hostPath (the MPS root of the former wiring) is not even
    baseline."""
    obj = a_pod(scheduler="gpufleet", annotations=FRACTIONAL)
    obj["spec"]["containers"][0]["securityContext"] = RESTRICTED_CONTEXT
    old = jsonpatch.apply_patch(obj, [{"op": "add", "path": "/spec/volumes", "value": [
        {"name": "gpufleet-mps", "hostPath": {"path": "/run/gpufleet/mps", "type": "Directory"}}]}])
    assert level(old) == "privileged"


def test_the_messages_in_the_docs_are_the_webhooks() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "fractional-gpus.md").read_text(encoding="utf-8")
    section = docs[docs.index("## Who may choose GPUs"):docs.index("## What isolation this gives")]
    block = section.split("```")[1]
    lines = [line for line in block.splitlines() if line]
    assert len(lines) == 9 and set(lines) <= {message for _, _, message in REFUSED}


_PATHS = st.sampled_from(["/", "/dev", "/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap1", "/dev/shm", "/run",
                          "/run/gpufleet", "/run/gpufleet/mps/gpu-0/shm", "/var/run/gpufleet/mps", "/var/lib/kubelet",
                          "/var/lib/kubelet/pods", "/var/lib/kubelet/device-plugins/kubelet.sock", "/etc/cdi",
                          "/etc", "/var/log", "/srv/data", "/var/run/cdi/nvidia.yaml"])


def _respelled(path: str, tricks: list[tuple[int, str]]) -> str:
    """``path`` written another way that the host resolves to the same place: ``//``, ``./``,
    ``x/..`` inserted between components, a trailing ``/``."""
    parts = path.strip("/").split("/") if path != "/" else []
    for at, trick in tricks:
        parts.insert(at % (len(parts) + 1), {"slash": "", "dot": ".", "detour": "x/.."}[trick])
    return "/" + "/".join(parts) + ("/" if tricks and tricks[0][1] == "slash" else "")


@settings(max_examples=200, deadline=None)
@given(path=_PATHS, tricks=st.lists(st.tuples(st.integers(0, 6), st.sampled_from(["slash", "dot", "detour"])),
                                    max_size=4))
def test_a_hostpath_is_judged_by_where_it_leads_not_how_it_is_spelled(path: str, tricks: list[tuple[int, str]]) -> None:
    def verdict(p: str) -> str | None:
        message = review(request(a_pod(volumes=_host("h", p))), SETTINGS)["response"].get("status", {}).get("message")
        return message.split(", which reaches ", 1)[1] if message else None

    respelled = _respelled(path, tricks)
    assert verdict(respelled) == verdict(path), respelled
    expected = {"/": "/dev/nvidia*", "/dev": "/dev/nvidia*", "/dev/nvidia0": "/dev/nvidia*",
                "/dev/nvidia-caps/nvidia-cap1": "/dev/nvidia*", "/run": "/run/gpufleet/mps",
                "/run/gpufleet": "/run/gpufleet/mps", "/run/gpufleet/mps/gpu-0/shm": "/run/gpufleet/mps",
                "/var/run/gpufleet/mps": "/run/gpufleet/mps", "/var/lib/kubelet": "/var/lib/kubelet/device-plugins",
                "/var/lib/kubelet/device-plugins/kubelet.sock": "/var/lib/kubelet/device-plugins",
                "/etc/cdi": "/etc/cdi", "/etc": "/etc/cdi", "/var/run/cdi/nvidia.yaml": "/var/run/cdi"}
    reached = expected.get(path)
    assert verdict(path) == (f"{reached}: {WHY}" if reached else None)
