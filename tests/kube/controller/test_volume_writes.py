"""What a binding's volumes still need written (kube-scheduler's VolumeBinding PreBind writes)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.domain import Binding, NodeName, PodKey, VolumeBinding
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.volume_writes import VolumeWriteProblem, volume_writes

from .volume_objects import BOUND_BY, FAST, LOCAL, SELECTED, claim, local_pv

REF = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ml", "name": "data", "uid": "u-data"}


def _cache(*objects: tuple[Kind, dict[str, Any]]) -> Any:
    store = {(kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj for kind, obj in objects}
    return lambda kind, namespace, name: store.get((kind, namespace, name))


def _claim(name: str, storage_class_name: str, **meta: Any) -> tuple[Kind, dict[str, Any]]:
    obj = claim(name, storage_class_name)
    obj["metadata"].update(uid=f"u-{name}", resourceVersion="7", **meta)
    return Kind.PERSISTENT_VOLUME_CLAIM, obj


def _pv(claim_ref: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> tuple[Kind, dict[str, Any]]:
    obj = local_pv("pv-1", "n1")
    obj["metadata"]["resourceVersion"] = "9"
    if annotations:
        obj["metadata"]["annotations"] = annotations
    if claim_ref:
        obj["spec"]["claimRef"] = claim_ref
    return Kind.PERSISTENT_VOLUME, obj


def _writes(*objects: tuple[Kind, dict[str, Any]], volume: str | None = "pv-1", claim_name: str = "data") -> list[Any]:
    binding = Binding(PodKey("ml/a"), NodeName("n1"), (0,), volumes=(VolumeBinding(claim_name, volume),))
    return [(w.kind, w.namespace, w.name, w.patch) for w in volume_writes(binding, _cache(*objects))]


def test_a_free_pv_gets_the_claim_ref_and_the_annotation_under_its_version() -> None:
    assert _writes(_claim("data", LOCAL), _pv()) == [(Kind.PERSISTENT_VOLUME, "", "pv-1", {
        "spec": {"claimRef": REF}, "metadata": {"annotations": {BOUND_BY: "yes"}, "resourceVersion": "9"}})]


def test_a_pv_already_bound_to_the_claim_needs_nothing() -> None:
    assert _writes(_claim("data", LOCAL), _pv(REF, {BOUND_BY: "yes"})) == []


def test_a_pv_pre_bound_by_its_owner_gets_the_uid_only() -> None:
    owner_ref = {"namespace": "ml", "name": "data"}
    assert _writes(_claim("data", LOCAL), _pv(owner_ref)) == [(Kind.PERSISTENT_VOLUME, "", "pv-1", {
        "spec": {"claimRef": REF}, "metadata": {"resourceVersion": "9"}})]


def test_a_claim_ref_of_an_older_claim_of_that_name_is_replaced() -> None:
    old = {**REF, "uid": "u-old"}
    [(_, _, _, patch)] = _writes(_claim("data", LOCAL), _pv(old))
    assert patch == {"spec": {"claimRef": REF}, "metadata": {"annotations": {BOUND_BY: "yes"}, "resourceVersion": "9"}}


def test_a_claim_to_provision_gets_its_node_once() -> None:
    assert _writes(_claim("scratch", FAST), volume=None, claim_name="scratch") == [
        (Kind.PERSISTENT_VOLUME_CLAIM, "ml", "scratch", {"metadata": {"annotations": {SELECTED: "n1"},
                                                                      "resourceVersion": "7"}})]
    selected = _claim("scratch", FAST, annotations={SELECTED: "n1"})
    assert _writes(selected, volume=None, claim_name="scratch") == []


@pytest.mark.parametrize(("objects", "message"), [
    ((), 'persistentvolumeclaim "data" not found'),
    ((_claim("data", LOCAL),), 'persistentvolumeclaim "data": persistentvolume "pv-1" not found'),
])
def test_a_claim_or_pv_not_in_the_cache_is_a_problem(objects: tuple[Any, ...], message: str) -> None:
    with pytest.raises(VolumeWriteProblem, match=message):
        _writes(*objects)
