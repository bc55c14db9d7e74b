"""The admission webhook: AdmissionReview in, patch out; the patch applied gives the wired pod."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest

from gpufleet.kube.webhook.mutation import MutationSettings
from gpufleet.kube.webhook.review import ReviewError, review, review_bytes

SETTINGS = MutationSettings()


def pod(annotations: dict[str, str] | None = None, *, scheduler: str = "gpufleet", gpus: int = 0,
        env: list[dict[str, Any]] | None = None, init: bool = False, name: str | None = "nb-1") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "cuda:12"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if env is not None:
        container["env"] = env
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [container]}
    if init:
        spec["initContainers"] = [{"name": "warmup", "image": "cuda:12"}]
    meta: dict[str, Any] = {"namespace": "ml", "annotations": annotations or {}}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = "nb-"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def admission(obj: Any, *, operation: str = "CREATE", kind: str = "Pod", uid: str = "u-1") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": operation,
            "object": obj,
        },
    }


def patched(obj: dict[str, Any], settings: MutationSettings = SETTINGS) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod after the response's patch, the response)."""
    answer = review(admission(obj), settings)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "u-1"
    if "patch" not in response:
        return obj, response
    assert response["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(obj, operations), response


SHARE = {"gpufleet.dev/mps-share": "1"}


def shares(after: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(limits, requests) of mps-share of every container, init containers first."""
    spec = after["spec"]
    return [(c["resources"]["limits"].get("gpufleet.dev/mps-share"), c["resources"]["requests"].get("gpufleet.dev/mps-share"))
            for c in spec.get("initContainers", []) + spec["containers"]]


def test_fractional_blocks_pod_gets_an_mps_share_and_no_gpu_wiring() -> None:
    """The GPU, its MPS pipe, its shared memory and the limits come from gpufleet's device plugin
    at container start: the pod spec gets one mps-share per container, no hostPath, no env var."""
    original = pod({"gpufleet.dev/gpu-blocks": "25"})
    after, response = patched(copy.deepcopy(original))
    assert response["allowed"] is True and "warnings" not in response
    [container] = after["spec"]["containers"]
    assert container == {**original["spec"]["containers"][0], "resources": {"limits": SHARE, "requests": SHARE}}
    assert after["spec"] == {**original["spec"], "containers": [container]}
    assert after["metadata"] == original["metadata"]
    operations = json.loads(base64.b64decode(response["patch"]))
    assert operations == [{"op": "add", "path": "/spec/containers/0/resources",
                           "value": {"limits": SHARE, "requests": SHARE}}]


def test_memory_pod_is_wired_the_same_way() -> None:
    after, _ = patched(pod({"gpufleet.dev/gpu-memory": "20Gi"}))
    assert shares(after) == [("1", "1")]
    assert "env" not in after["spec"]["containers"][0] and "volumes" not in after["spec"]


def test_the_share_joins_the_containers_own_resources() -> None:
    obj = pod({"gpufleet.dev/gpu-blocks": "25"})
    obj["spec"]["containers"][0]["resources"] = {"limits": {"memory": "8Gi"}, "requests": {"cpu": "2"}}
    after, _ = patched(obj)
    assert after["spec"]["containers"][0]["resources"] == {
        "limits": {"memory": "8Gi", "gpufleet.dev/mps-share": "1"},
        "requests": {"cpu": "2", "gpufleet.dev/mps-share": "1"}}


def test_static_mode_writes_nothing_more() -> None:
    after, _ = patched(pod({"gpufleet.dev/gpu-memory": "20Gi"}), MutationSettings(gpu_memory_mib=81920))
    assert after == patched(pod({"gpufleet.dev/gpu-memory": "20Gi"}))[0]


def test_static_mode_denies_memory_beyond_one_gpu() -> None:
    answer = review(admission(pod({"gpufleet.dev/gpu-memory": "100Gi"})), MutationSettings(gpu_memory_mib=81920))
    assert answer["response"]["allowed"] is False
    assert "more than one GPU" in answer["response"]["status"]["message"]


def test_whole_gpu_pod_is_left_to_the_device_plugin() -> None:
    original = pod(gpus=2)
    after, response = patched(copy.deepcopy(original))
    assert response["allowed"] is True and "patch" not in response
    assert after == original


@pytest.mark.parametrize("obj", [
    pod({"gpufleet.dev/gpu-blocks": "25"}, scheduler="default-scheduler"),  # not ours
    pod({}),  # ours, not fractional
    pod({"gpufleet.dev/gpu-index": "3"}),  # ours, not fractional
])
def test_pods_that_are_not_ours_or_not_fractional_are_untouched(obj: dict[str, Any]) -> None:
    after, response = patched(copy.deepcopy(obj))
    assert response == {"uid": "u-1", "allowed": True}
    assert after == obj


def test_readmission_is_idempotent() -> None:
    once, _ = patched(pod({"gpufleet.dev/gpu-blocks": "25"}, init=True))
    twice, response = patched(copy.deepcopy(once))
    assert "patch" not in response
    assert twice == once
    assert shares(once) == [("1", "1"), ("1", "1")]


def test_a_share_the_user_set_is_replaced_not_added_to() -> None:
    obj = pod({"gpufleet.dev/gpu-blocks": "25"})
    obj["spec"]["containers"][0]["resources"] = {"limits": {"gpufleet.dev/mps-share": "4"}}
    after, _ = patched(obj)
    assert shares(after) == [("1", "1")]


def test_init_containers_are_wired_too() -> None:
    after, _ = patched(pod({"gpufleet.dev/gpu-blocks": "25"}, init=True))
    assert after["spec"]["initContainers"][0]["resources"] == {"limits": SHARE, "requests": SHARE}


def test_own_dev_shm_is_kept_with_a_warning() -> None:
    obj = pod({"gpufleet.dev/gpu-blocks": "25"})
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    obj["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    after, response = patched(obj)
    assert after["spec"]["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert response["warnings"] == [
        "gpufleet: containers[0] (main) mounts its own /dev/shm: gpufleet's device plugin mounts the MPS server's "
        "shared memory there, so CUDA in this container may fail to connect to MPS"]


def test_node_selector_and_runtime_class_settings() -> None:
    settings = MutationSettings(node_selector={"gpufleet.dev/mps": "true"}, runtime_class="nvidia")
    after, _ = patched(pod({"gpufleet.dev/gpu-blocks": "25"}), settings)
    assert after["spec"]["nodeSelector"] == {"gpufleet.dev/mps": "true"}
    assert after["spec"]["runtimeClassName"] == "nvidia"


def test_generate_name_pods_are_wired() -> None:
    after, response = patched(pod({"gpufleet.dev/gpu-blocks": "25"}, name=None))
    assert response["allowed"] is True and "warnings" not in response
    assert shares(after) == [("1", "1")]


@pytest.mark.parametrize(("annotations", "gpus", "message"), [
    ({"gpufleet.dev/gpu-blocks": "150"}, 0, "gpu-blocks: must be an integer 1..100"),
    ({"gpufleet.dev/gpu-blocks": "a quarter"}, 0, "gpu-blocks: must be an integer 1..100"),
    ({"gpufleet.dev/gpu-memory": "-3Gi"}, 0, "gpu-memory"),
    ({"gpufleet.dev/gpu-blocks": "25"}, 1, "cannot be combined with a nvidia.com/gpu request"),
])
def test_invalid_fractional_annotations_are_denied(annotations: dict[str, str], gpus: int, message: str) -> None:
    answer = review(admission(pod(annotations, gpus=gpus)), SETTINGS)
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert message in response["status"]["message"]
    assert "patch" not in response


def test_other_oddities_are_allowed_with_a_warning() -> None:
    obj = pod({"gpufleet.dev/gpu-blocks": "25"})
    obj["spec"]["tolerations"] = [{"key": "k", "operator": "Sometimes"}]
    after, response = patched(obj)
    assert response["allowed"] is True
    assert any("spec.tolerations[0].operator" in w for w in response["warnings"])
    assert shares(after) == [("1", "1")]


@pytest.mark.parametrize("obj", [
    {"apiVersion": "v1", "kind": "Pod"},  # no spec, no metadata
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"gpufleet.dev/gpu-blocks": "5"}},
     "spec": {"schedulerName": "gpufleet", "containers": "not a list"}},
    "not an object",
])
def test_malformed_pods_never_break_admission(obj: Any) -> None:
    answer = review(admission(obj), SETTINGS)
    assert answer["response"]["allowed"] is True


def test_updates_and_other_kinds_pass_through() -> None:
    obj = pod({"gpufleet.dev/gpu-blocks": "25"})
    for request in (admission(obj, operation="UPDATE"), admission(obj, kind="ConfigMap")):
        assert review(request, SETTINGS)["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize("body", [
    b"not json",
    b"[]",
    json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}).encode(),
    json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
    json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}).encode(),
])
def test_bodies_that_are_not_admission_reviews_are_rejected(body: bytes) -> None:
    with pytest.raises(ReviewError):
        review_bytes(body, SETTINGS)


@pytest.mark.parametrize(("obj", "message"), [
    (pod({"gpufleet.dev/gpu-blocks": "1", "gpufleet.dev/gpu-index": "0,1,2,3"}),
     "annotation gpufleet.dev/gpu-index is written by the scheduler at binding; a new pod may not set it"),
    (pod({"gpufleet.dev/gpu-memory": "10Gi", "gpufleet.dev/mps-mem-limit": "0=81920M"}),
     "annotation gpufleet.dev/mps-mem-limit is written by the scheduler at binding; a new pod may not set it"),
])
def test_fractional_pods_may_not_preset_what_the_scheduler_writes(obj: dict[str, Any], message: str) -> None:
    for validate in (False, True):
        response = review(admission(copy.deepcopy(obj)), SETTINGS, validate=validate)["response"]
        assert response == {"uid": "u-1", "allowed": False, "status": {
            "status": "Failure", "code": 403, "reason": "Forbidden", "message": message}}


def test_a_fractional_pod_with_a_preset_node_is_denied() -> None:
    obj = pod({"gpufleet.dev/gpu-blocks": "1"})
    obj["spec"]["nodeName"] = "n0"
    response = review(admission(obj), SETTINGS)["response"]
    assert response["status"]["message"] == (
        "spec.nodeName is set (n0): pods of schedulerName gpufleet are placed by the scheduler, leave it empty")
    assert response["allowed"] is False and "patch" not in response
