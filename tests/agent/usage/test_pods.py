"""pod_index: pods as JSON to the usage export's index."""

from __future__ import annotations

from typing import Any

from gpufleet.agent.usage import PodEntry, pod_index

UID = "0C9E2F4A-6B1D-48E3-A7F5-3D2B9C1E8A60"
HASH = "8b1f0e2d4c6a48e09f7b3d5c1a2e4f60"


def pod(uid: str, name: str, namespace: str = "ml", annotations: dict[str, str] | None = None,
        **status: Any) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": name, "namespace": namespace, "annotations": annotations or {}},
            "status": status}


def test_containers_are_keyed_by_their_runtime_id_without_the_scheme() -> None:
    index = pod_index([pod(UID, "train-0", containerStatuses=[
        {"name": "trainer", "containerID": "containerd://" + "AB" * 32},
        {"name": "sidecar", "containerID": "cri-o://" + "cd" * 32},
        {"name": "waiting"},  # not started: no ID yet
    ], initContainerStatuses=[{"name": "fetch", "containerID": "docker://" + "ef" * 32}])])
    assert index == {UID.lower(): PodEntry("ml", "train-0", {
        "ab" * 32: "trainer", "cd" * 32: "sidecar", "ef" * 32: "fetch"})}


def test_pods_without_uid_namespace_or_name_and_malformed_statuses_are_left_out() -> None:
    index = pod_index([{"metadata": {"name": "x", "namespace": "ml"}}, {"metadata": None},
                       pod("u-1", "ok", containerStatuses=["junk", {"name": 3, "containerID": "x://y"}])])
    assert index == {"u-1": PodEntry("ml", "ok", {})}


def test_allocated_gpus_are_attached_by_uid() -> None:
    index = pod_index([pod(UID, "train-0")], gpus={UID.lower(): frozenset({"GPU-a"})})
    assert index[UID.lower()].gpus == frozenset({"GPU-a"})


def test_a_static_pod_is_found_by_its_config_hash_too() -> None:
    index = pod_index([pod("mirror-uid", "dcgm-node-1", "kube-system", {"kubernetes.io/config.mirror": HASH})])
    assert index["mirror-uid"] is index[HASH]


def test_a_tenant_claiming_another_pod_s_uid_or_a_contested_hash_gains_nothing() -> None:
    victim = pod(UID, "victim", "team-a")
    thief = pod("thief-uid", "thief", "team-b", {"kubernetes.io/config.mirror": UID.lower()})
    static = pod("mirror-uid", "static", "kube-system", {"kubernetes.io/config.mirror": HASH})
    rival = pod("rival-uid", "rival", "team-b", {"kubernetes.io/config.mirror": HASH})
    index = pod_index([thief, victim, static, rival])
    assert index[UID.lower()].name == "victim"
    assert HASH not in index and set(index) == {UID.lower(), "thief-uid", "mirror-uid", "rival-uid"}
