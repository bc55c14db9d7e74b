"""PersistentVolumeClaim, PersistentVolume and StorageClass documents, and the claims a pod names
(docs/semantics-notes.md, "Volumes"): read into the snapshot, checked, and written back."""

from __future__ import annotations

import pytest

from gpufleet.adapters import (
    InputError,
    claim_from_dict,
    dump_snapshot,
    load_snapshot_text,
    persistent_volume_from_dict,
    reader_for,
    storage_class_from_dict,
)
from gpufleet.domain import (
    LabelSelector,
    PersistentVolume,
    SelectorRequirement,
    SelectorTerm,
    StorageClass,
    VolumeClaim,
)

GI = 1 << 30

SNAPSHOT = """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions:
  - {key: topology.kubernetes.io/zone, values: [a, b]}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-1, labels: {topology.kubernetes.io/zone: a}}
spec:
  storageClassName: local
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  volumeMode: Block
  claimRef: {namespace: ml, name: data, uid: u-1}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n1]}]
status: {phase: Bound}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: ml
  uid: u-1
  deletionTimestamp: "2026-01-01T00:00:00Z"
  annotations: {volume.kubernetes.io/selected-node: n1}
spec:
  storageClassName: local
  volumeName: pv-1
  accessModes: [ReadWriteOncePod]
  volumeMode: Block
  resources: {requests: {storage: 5G}}
  selector:
    matchLabels: {tier: fast}
    matchExpressions: [{key: disk, operator: Exists}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  schedulerName: gpufleet
  containers: [{name: c}]
  volumes:
  - {name: d, persistentVolumeClaim: {claimName: data}}
  - {name: scratch, ephemeral: {volumeClaimTemplate: {spec: {}}}}
  - {name: again, persistentVolumeClaim: {claimName: data}}
  - {name: e, emptyDir: {}}
"""


def test_objects_are_read_into_the_snapshot() -> None:
    snapshot = load_snapshot_text(SNAPSHOT, "snap.yaml")
    assert snapshot.storage_classes == (
        StorageClass(
            name="local",
            provisioner="kubernetes.io/no-provisioner",
            wait_for_first_consumer=True,
            allowed_topologies=(
                SelectorTerm(expressions=(SelectorRequirement("topology.kubernetes.io/zone", "In", ("a", "b")),)),
            ),
            is_default=True,
            creation_time=1767225600.0,
        ),
    )
    assert snapshot.volumes == (
        PersistentVolume(
            name="pv-1",
            labels={"topology.kubernetes.io/zone": "a"},
            storage_class="local",
            capacity_bytes=10 * GI,
            access_modes=("ReadWriteOnce",),
            volume_mode="Block",
            node_affinity=(
                SelectorTerm(expressions=(SelectorRequirement("kubernetes.io/hostname", "In", ("n1",)),)),
            ),
            claim="ml/data",
            phase="Bound",
        ),
    )
    assert snapshot.claims == (
        VolumeClaim(
            namespace="ml",
            name="data",
            uid="u-1",
            storage_class="local",
            volume_name="pv-1",
            request_bytes=5 * 10**9,
            access_modes=("ReadWriteOncePod",),
            volume_mode="Block",
            selector=LabelSelector((("tier", "fast"),), (SelectorRequirement("disk", "Exists", ()),)),
            selected_node="n1",  # type: ignore[arg-type]
            deleting=True,
        ),
    )
    pod = snapshot.pods[0]
    assert pod.claims == ("data", "p-scratch")
    assert pod.ephemeral_claims == frozenset({"p-scratch"})


def test_defaults() -> None:
    claim = claim_from_dict({"metadata": {"name": "c"}})
    assert claim == VolumeClaim(namespace="default", name="c")
    assert claim_from_dict({"metadata": {"name": "c"}, "spec": {"storageClassName": ""}}).storage_class == ""
    assert persistent_volume_from_dict({"metadata": {"name": "v"}}) == PersistentVolume(name="v")
    assert storage_class_from_dict({"metadata": {"name": "s"}, "provisioner": "p"}) == StorageClass(
        name="s", provisioner="p"
    )
    assert reader_for("v1", "PersistentVolumeClaim") is claim_from_dict
    assert reader_for("v1", "PersistentVolume") is persistent_volume_from_dict
    assert reader_for("storage.k8s.io/v1", "StorageClass") is storage_class_from_dict


def test_round_trip_through_the_writer() -> None:
    snapshot = load_snapshot_text(SNAPSHOT, "snap.yaml")
    back = load_snapshot_text(dump_snapshot(snapshot), "back.yaml")
    assert back.claims == snapshot.claims
    assert back.volumes == snapshot.volumes
    assert back.storage_classes == snapshot.storage_classes
    assert back.pods == snapshot.pods


PVC = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: ml}\n"
PV = "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pv-1}\n"
SC = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: local}\nprovisioner: x\n"
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n  containers: [{name: c}]\n"

BAD: list[tuple[str, str, str]] = [
    ("claim-quantity", PVC + "spec: {resources: {requests: {storage: 1Qi}}}\n",
     'document 1 (PersistentVolumeClaim ml/data): spec.resources.requests.storage: malformed quantity "1Qi"'),
    ("claim-negative", PVC + "spec: {resources: {requests: {storage: '-1'}}}\n",
     'document 1 (PersistentVolumeClaim ml/data): spec.resources.requests.storage: negative quantity "-1"'),
    ("claim-access-mode", PVC + "spec: {accessModes: [ReadWriteSometimes]}\n",
     "document 1 (PersistentVolumeClaim ml/data): spec.accessModes[0]: must be one of ReadWriteOnce, "
     'ReadOnlyMany, ReadWriteMany, ReadWriteOncePod, got "ReadWriteSometimes"'),
    ("claim-volume-mode", PVC + "spec: {volumeMode: Raw}\n",
     'document 1 (PersistentVolumeClaim ml/data): spec.volumeMode: must be one of Filesystem, Block, got "Raw"'),
    ("claim-selector-operator", PVC + "spec: {selector: {matchExpressions: [{key: a, operator: Gt, values: ['1']}]}}\n",
     "document 1 (PersistentVolumeClaim ml/data): spec.selector.matchExpressions[0].operator: must be one of "
     'In, NotIn, Exists, DoesNotExist, got "Gt"'),
    ("claim-deletion", PVC.replace("namespace: ml}", "namespace: ml, deletionTimestamp: soon}"),
     'document 1 (PersistentVolumeClaim ml/data): metadata.deletionTimestamp: must be an RFC 3339 timestamp, got "soon"'),
    ("claim-duplicate", PVC + "---\n" + PVC,
     "document 2 (PersistentVolumeClaim ml/data): metadata.name: duplicate PersistentVolumeClaim ml/data "
     "(first in document 1)"),
    ("pv-capacity", PV + "spec: {capacity: {storage: lots}}\n",
     'document 1 (PersistentVolume pv-1): spec.capacity.storage: malformed quantity "lots"'),
    ("pv-affinity-operator", PV + "spec: {nodeAffinity: {required: {nodeSelectorTerms: "
     "[{matchExpressions: [{key: a, operator: Near, values: [x]}]}]}}}\n",
     "document 1 (PersistentVolume pv-1): spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0]"
     '.operator: must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt, got "Near"'),
    ("pv-claim-ref", PV + "spec: {claimRef: {namespace: ml}}\n",
     "document 1 (PersistentVolume pv-1): spec.claimRef.name: required field missing"),
    ("pv-duplicate", PV + "---\n" + PV,
     "document 2 (PersistentVolume pv-1): metadata.name: duplicate PersistentVolume pv-1 (first in document 1)"),
    ("sc-binding-mode", SC + "volumeBindingMode: Lazy\n",
     'document 1 (StorageClass local): volumeBindingMode: must be one of Immediate, WaitForFirstConsumer, got "Lazy"'),
    ("sc-topology-values", SC + "allowedTopologies: [{matchLabelExpressions: [{key: zone}]}]\n",
     "document 1 (StorageClass local): allowedTopologies[0].matchLabelExpressions[0].values: "
     "must list at least one value"),
    ("sc-duplicate", SC + "---\n" + SC,
     "document 2 (StorageClass local): metadata.name: duplicate StorageClass local (first in document 1)"),
    ("pod-claim-name", POD + "  volumes: [{name: d, persistentVolumeClaim: {}}]\n",
     "document 1 (Pod ml/p): spec.volumes[0].persistentVolumeClaim.claimName: required field missing"),
    ("pod-ephemeral-name", POD + "  volumes: [{ephemeral: {}}]\n",
     "document 1 (Pod ml/p): spec.volumes[0].name: required field missing"),
]


@pytest.mark.parametrize(("text", "expected"), [pytest.param(t, e, id=i) for i, t, e in BAD])
def test_bad_volume_input_names_document_object_and_field(text: str, expected: str) -> None:
    with pytest.raises(InputError) as err:
        load_snapshot_text(text, "snap.yaml")
    assert str(err.value) == f"snap.yaml: {expected}"


def test_output_lists_volumes_only_when_a_binding_has_some() -> None:
    from gpufleet.adapters import decisions_to_dict, render_table
    from gpufleet.domain import Binding, Decisions, NodeName, VolumeBinding

    plain = Decisions(bindings=(Binding("ml/a", NodeName("n1")),))
    assert decisions_to_dict(plain)["bindings"] == [{"pod": "ml/a", "node": "n1", "gpus": []}]
    assert "VOLUMES" not in render_table(plain)
    chosen = Decisions(bindings=(
        Binding("ml/a", NodeName("n1")),
        Binding("ml/b", NodeName("n2"), volumes=(VolumeBinding("data", "pv-3"), VolumeBinding("scratch"))),
    ))
    assert decisions_to_dict(chosen)["bindings"][1] == {
        "pod": "ml/b", "node": "n2", "gpus": [],
        "volumes": [{"claim": "data", "volume": "pv-3"}, {"claim": "scratch", "provisionOn": "n2"}],
    }
    table = render_table(chosen)
    assert "VOLUMES" in table
    assert "data=pv-3 scratch=new" in table
