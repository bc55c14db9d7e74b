"""`gpufleet snapshot` with volumes: PVCs, PVs and StorageClasses cut down to what volume binding
reads, and a round trip through the HTTP emulator: the controller's view of the cluster and
`replay` of its snapshot hold the same claims, volumes and classes, and decide the same; `explain`
names the volumes a binding chose."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from gpufleet.domain import Snapshot, VolumeBinding
from gpufleet.engine import schedule
from gpufleet.kube.client.port import Kind
from gpufleet.kube.inspect.explain import explain_in_cluster
from gpufleet.kube.inspect.snapshot import strip_object
from gpufleet.testing.fake_cluster import FakeCluster

from ..controller.controller_objects import node, pod, queue
from ..controller.volume_objects import FAST, LOCAL, claim, local_pv, storage_class, with_claims
from .cluster_objects import seen_and_replayed

NOISE = {"uid": "5f0c-...", "resourceVersion": "4711", "finalizers": ["kubernetes.io/pvc-protection"],
         "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]}
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def test_a_claim_keeps_what_binding_reads() -> None:
    raw = claim("data", LOCAL, annotations={"volume.kubernetes.io/selected-node": "n1", LAST_APPLIED: "{...}",
                                            "pv.kubernetes.io/bind-completed": "yes"})
    raw["metadata"].update(NOISE, deletionTimestamp="2026-01-01T00:00:00Z", labels={"app": "db"})
    raw["spec"].update(volumeMode="Filesystem", volumeName="pv-1", dataSource={"kind": "VolumeSnapshot"},
                       resources={"requests": {"storage": "50Gi"}, "limits": {"storage": "60Gi"}},
                       selector={"matchLabels": {"tier": "fast"}})
    raw["status"] = {"phase": "Bound", "capacity": {"storage": "100Gi"}}
    assert strip_object(Kind.PERSISTENT_VOLUME_CLAIM, raw) == {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "ml", "labels": {"app": "db"},
                     "annotations": {"volume.kubernetes.io/selected-node": "n1"},
                     "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"storageClassName": LOCAL, "volumeName": "pv-1", "accessModes": ["ReadWriteOnce"],
                 "volumeMode": "Filesystem", "resources": {"requests": {"storage": "50Gi"}},
                 "selector": {"matchLabels": {"tier": "fast"}}},
    }


def test_a_volume_and_a_class_keep_what_binding_reads() -> None:
    raw = local_pv("pv-1", "n1")
    raw["metadata"].update(NOISE, labels={"topology.kubernetes.io/zone": "z1"},
                           annotations={"pv.kubernetes.io/bound-by-controller": "yes"})
    raw["spec"]["claimRef"] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ml",
                               "name": "data", "uid": "5f0c-...", "resourceVersion": "12"}
    raw["status"] = {"phase": "Bound", "lastPhaseTransitionTime": "2026-01-01T00:00:00Z"}
    stripped = strip_object(Kind.PERSISTENT_VOLUME, raw)
    assert stripped["metadata"] == {"name": "pv-1", "labels": {"topology.kubernetes.io/zone": "z1"}}
    assert stripped["spec"]["claimRef"] == {"namespace": "ml", "name": "data"}
    assert set(stripped["spec"]) == {"storageClassName", "capacity", "accessModes", "volumeMode", "nodeAffinity",
                                     "claimRef"}
    assert stripped["status"] == {"phase": "Bound"}
    sc = storage_class(FAST, "ebs.csi.aws.com", default=True)
    sc["metadata"].update(NOISE, creationTimestamp="2025-06-01T00:00:00Z")
    sc["metadata"]["annotations"][LAST_APPLIED] = "{...}"
    sc.update(parameters={"type": "gp3"}, reclaimPolicy="Delete", allowVolumeExpansion=True,
              allowedTopologies=[{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["z1"]}]}])
    assert strip_object(Kind.STORAGE_CLASS, sc) == {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": FAST, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                     "creationTimestamp": "2025-06-01T00:00:00Z"},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["z1"]}]}],
    }


def test_a_pod_keeps_only_the_volumes_that_name_claims() -> None:
    raw = with_claims(pod("a"), "data")
    raw["spec"]["volumes"] += [
        {"name": "cfg", "configMap": {"name": "cfg"}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": FAST}}}},
    ]
    assert strip_object(Kind.POD, raw)["spec"]["volumes"] == [
        {"name": "vol-data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": FAST}}}},
    ]
    assert "volumes" not in strip_object(Kind.POD, pod("b"))["spec"]


def volume_cluster_objects() -> dict[Kind, list[dict[str, Any]]]:
    """Two nodes, a local PV on n2, a provisioning class (the default) and a local class; pods
    naming a claim of each, a claim of the default class, a missing claim and an ephemeral one."""
    scratch = pod("e")
    scratch["spec"]["volumes"] = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]
    objects: dict[Kind, list[dict[str, Any]]] = {
        Kind.NODE: [node("n1"), node("n2")],
        Kind.QUEUE: [queue("team-a", 8)],
        Kind.STORAGE_CLASS: [storage_class(FAST, "ebs.csi.aws.com", default=True),
                             storage_class(LOCAL, "kubernetes.io/no-provisioner")],
        Kind.PERSISTENT_VOLUME: [local_pv("pv-local", "n2")],
        Kind.PERSISTENT_VOLUME_CLAIM: [claim("data", LOCAL), claim("scratch", FAST), claim("plain", None),
                                       claim("e-scratch", FAST)],
        Kind.POD: [with_claims(pod("a"), "data"), with_claims(pod("b"), "scratch"), with_claims(pod("c"), "plain"),
                   with_claims(pod("d"), "missing"), scratch],
    }
    for item in objects[Kind.PERSISTENT_VOLUME_CLAIM]:
        item["metadata"].update(NOISE)
    return objects


def _without_uids(snapshot: Snapshot) -> Snapshot:
    return dataclasses.replace(snapshot, claims=tuple(dataclasses.replace(c, uid="") for c in snapshot.claims))


def test_snapshot_then_replay_sees_what_the_controller_sees_over_http() -> None:
    seen, replayed = seen_and_replayed(volume_cluster_objects())
    assert len(seen.claims) == 4 and len(seen.volumes) == 1 and len(seen.storage_classes) == 2
    assert all(c.uid for c in seen.claims)  # the controller keeps the uid for a PV's claimRef; replay needs none
    key = str
    assert sorted(_without_uids(seen).claims, key=key) == sorted(replayed.claims, key=key)
    assert sorted(seen.volumes, key=key) == sorted(replayed.volumes, key=key)
    assert sorted(seen.storage_classes, key=key) == sorted(replayed.storage_classes, key=key)
    assert {p.key: p.claims for p in seen.pods} == {p.key: p.claims for p in replayed.pods}
    assert {p.key: p.ephemeral_claims for p in seen.pods} == {p.key: p.ephemeral_claims for p in replayed.pods}
    decided = schedule(seen)
    assert decided == schedule(replayed)
    chosen = {b.pod: b.volumes for b in decided.bindings}
    assert chosen["ml/a"] == (VolumeBinding("data", "pv-local"),) and chosen["ml/b"] == (VolumeBinding("scratch"),)
    assert chosen["ml/c"] == (VolumeBinding("plain"),)  # the default class provisions it
    assert [p.pod for p in decided.pending if 'persistentvolumeclaim "missing" not found' in p.reason] == ["ml/d"]


@pytest.mark.parametrize("kind", [Kind.PERSISTENT_VOLUME_CLAIM, Kind.PERSISTENT_VOLUME, Kind.STORAGE_CLASS])
def test_stripped_storage_objects_read_back_as_the_originals(kind: Kind) -> None:
    from gpufleet.kube.controller.convert import convert_object

    for raw in volume_cluster_objects()[kind]:
        original = convert_object(kind, raw)
        again = convert_object(kind, strip_object(kind, raw))
        if kind is Kind.PERSISTENT_VOLUME_CLAIM:
            original = dataclasses.replace(original, uid="")
        assert again == original


def test_explain_names_the_volumes_chosen_and_the_claim_waited_for() -> None:
    cluster = FakeCluster()
    for kind, items in volume_cluster_objects().items():
        for item in items:
            cluster.put(kind, item)

    def explain(name: str) -> list[str]:
        return list(asyncio.run(explain_in_cluster(cluster.client("explain"), "ml", name)).lines)

    assert explain("a")[1:] == ["gpufleet would bind it to node n2 (GPU 0).",
                                'With its volumes: persistentvolumeclaim "data" gets persistentvolume "pv-local".']
    node_b = explain("b")[1].split("node ")[1].split(" ")[0]
    assert explain("b")[2] == f'With its volumes: persistentvolumeclaim "scratch" is provisioned on node {node_b}.'
    assert explain("d")[1] == 'It would stay pending: persistentvolumeclaim "missing" not found.'
