"""`gpufleet snapshot` and the controller's converter with Dynamic Resource Allocation objects: the four
resource.k8s.io/v1 kinds are listed (none when the API server does not serve them), cut down to what the
loader reads, and read back by replay exactly as the controller reads them, over HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.convert import DRA_KINDS, convert_object
from gpufleet.kube.inspect.snapshot import read_cluster, strip_object
from gpufleet.testing.dra_objects import (
    DEVICE_CLASS,
    claim_template,
    dra_pod,
    objects,
    resource_claim,
    resource_slice,
)
from gpufleet.testing.fake_cluster import FakeCluster

from ..controller.controller_objects import node, queue
from .cluster_objects import seen_and_replayed

HELD = resource_claim("shared-gpu", uid="c-1", status="""\
status:
  allocation:
    devices:
      results: [{request: gpu, driver: gpu.nvidia.com, pool: n1, device: gpu-0}]
      config: [{source: FromClass, requests: [gpu], opaque: {driver: gpu.nvidia.com, parameters: {}}}]
    nodeSelector:
      nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n1]}]}]
  reservedFor: [{resource: pods, name: a, uid: uid-a}]
""")


def dra_cluster() -> dict[Kind, list[dict[str, Any]]]:
    (slice_, device_class, template, claim, a, b) = objects(
        resource_slice("n1", gpus=2), DEVICE_CLASS, claim_template(), HELD,
        dra_pod("a", node="n1", phase="Running", entries="  - {name: gpu, resourceClaimName: shared-gpu}\n"),
        dra_pod("b", statuses="  - {name: gpu, resourceClaimName: b-gpu-x7k2}\n"),
    )
    noise = {"resourceVersion": "4711", "managedFields": [{"manager": "kube-controller-manager"}]}
    claim["metadata"].update(noise)
    b["metadata"]["labels"] = {"gpufleet.dev/queue": "team-a"}
    a["metadata"]["labels"] = {"gpufleet.dev/queue": "team-a"}
    return {Kind.NODE: [node("n1", gpus=0)], Kind.QUEUE: [queue("team-a", 8)], Kind.RESOURCE_SLICE: [slice_],
            Kind.DEVICE_CLASS: [device_class], Kind.RESOURCE_CLAIM_TEMPLATE: [template],
            Kind.RESOURCE_CLAIM: [claim], Kind.POD: [a, b]}


def test_a_claim_keeps_its_allocation_and_reservations() -> None:
    raw = dra_cluster()[Kind.RESOURCE_CLAIM][0]
    stripped = strip_object(Kind.RESOURCE_CLAIM, raw)
    assert stripped["metadata"] == {"name": "shared-gpu", "namespace": "ml", "uid": "c-1"}
    assert set(stripped["status"]) == {"allocation", "reservedFor"}
    assert convert_object(Kind.RESOURCE_CLAIM, stripped) == convert_object(Kind.RESOURCE_CLAIM, raw)


def test_a_pod_keeps_its_resource_claims() -> None:
    raw = dra_cluster()[Kind.POD][1]
    stripped = strip_object(Kind.POD, raw)
    assert stripped["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    assert stripped["status"]["resourceClaimStatuses"] == [{"name": "gpu", "resourceClaimName": "b-gpu-x7k2"}]
    assert stripped["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}
    assert convert_object(Kind.POD, stripped).resource_claims == convert_object(Kind.POD, raw).resource_claims


def test_snapshot_then_replay_sees_what_the_controller_sees_over_http() -> None:
    seen, replayed = seen_and_replayed(dra_cluster())
    assert len(seen.resource_slices[0].devices) == 2
    assert seen.resource_slices == replayed.resource_slices
    assert seen.device_classes == replayed.device_classes
    assert seen.claim_templates == replayed.claim_templates
    assert seen.resource_claims == replayed.resource_claims
    assert seen.resource_claims[0].reserved_for == ("a",)
    assert {p.key: p.resource_claims for p in seen.pods} == {p.key: p.resource_claims for p in replayed.pods}


def test_a_cluster_without_the_dra_api_has_none() -> None:
    cluster = FakeCluster(not_served=DRA_KINDS)
    cluster.put(Kind.NODE, node("n1"))
    snap = asyncio.run(read_cluster(cluster.client("snapshot")))
    assert snap.warnings == ()
    assert [d["kind"] for d in snap.documents] == ["Node"]


def test_explain_names_the_claims_and_their_devices() -> None:
    from gpufleet.kube.inspect.explain import explain_in_cluster

    cluster = FakeCluster()
    for kind, items in dra_cluster().items():
        for item in items:
            cluster.put(kind, item)
    (c, d, claim_c) = objects(
        dra_pod("c", entries="  - {name: gpu, resourceClaimName: c-gpu}\n"),
        dra_pod("d"),
        resource_claim("c-gpu"),
    )
    for pod in (c, d):
        pod["metadata"]["labels"] = {"gpufleet.dev/queue": "team-a"}
        cluster.put(Kind.POD, pod)
    cluster.put(Kind.RESOURCE_CLAIM, claim_c)

    def explain(name: str) -> list[str]:
        return list(asyncio.run(explain_in_cluster(cluster.client("explain"), "ml", name)).lines)

    assert explain("a")[1] == 'claims: gpu -> resourceclaim "shared-gpu": gpu.nvidia.com/n1/gpu-0'
    assert explain("c")[1:3] == ['claims: gpu -> resourceclaim "c-gpu": gpu.nvidia.com/n1/gpu-1',
                                 "gpufleet would bind it to node n1 (GPU 1)."]
    assert explain("b")[1:] == ['claims: gpu -> resourceclaim "b-gpu-x7k2"',
                                'It would stay pending: resourceclaim "b-gpu-x7k2" not found.']
    assert explain("d")[1:] == [
        'claims: gpu -> template "single-gpu" (no resourceclaim made from it yet)',
        'It would stay pending: waiting for resourceclaim for entry "gpu" (template "single-gpu") to be created.']
