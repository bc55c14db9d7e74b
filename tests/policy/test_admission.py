"""The admission rules of Projects, as pure functions: one test per rule, messages asserted exactly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import ImagePolicy, PodGroup, Project, QueueName, VolumePolicy
from gpufleet.policy import (
    AccessReviewer,
    Admission,
    AdmissionContext,
    Denial,
    ProjectIndex,
    admit_pod,
    admit_pod_group,
)

Q = QueueName
DIGEST = "sha256:" + "c" * 64

VISION = Project(
    name="ml-vision", namespace_names=("vision",), queues=(Q("vision-train"), Q("vision-infer")),
    default_queue=Q("vision-train"), priority_classes=("batch",), max_pending_gangs_per_user=2,
    images=ImagePolicy(allowed=("ghcr.io/acme/*", "docker.io/library/**"), denied=("ghcr.io/acme/bad*",)),
    volumes=VolumePolicy(storage_classes=("fast",), claim_names=("vision-*",)),
)
INFER = Project(name="ml-infer", namespace_names=("infer",), queues=(Q("infer"),), allow_non_preemptible=True,
                priority_classes=("batch", "inference-critical"), images=ImagePolicy(require_digest=True))
NLP = Project(name="nlp", namespace_names=("nlp",), queues=(Q("team-b"),))


class Table:
    """An offline AccessReviewer: (user or group, queue) pairs; records what it was asked."""

    def __init__(self, *grants: tuple[str, str]) -> None:
        self.grants = set(grants)
        self.asked: list[tuple[str, tuple[str, ...], str, str]] = []

    def can_use_queue(self, user: str, groups: Sequence[str], queue: QueueName, namespace: str) -> bool:
        self.asked.append((user, tuple(groups), queue, namespace))
        return any((who, queue) in self.grants for who in (user, *groups))


def _context(**kw: Any) -> AdmissionContext:
    return AdmissionContext(index=ProjectIndex.build([VISION, INFER, NLP], {}),
                            priority_classes={"batch": 10, "inference-critical": 1000}, **kw)


def pod(*, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        image: str = "ghcr.io/acme/train:1", volumes: list[dict[str, Any]] | None = None,
        name: str = "p1", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"schedulerName": "gpufleet", "containers": [{"name": "main", "image": image}], **spec}
    if volumes is not None:
        body["volumes"] = volumes
    return {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}}, "spec": body}


def admit(obj: dict[str, Any], namespace: str = "vision", user: str = "alice", reviewer: AccessReviewer | None = None,
          context: AdmissionContext | None = None, groups: Sequence[str] = ()) -> Denial | Admission:
    return admit_pod(obj, namespace, user, groups, context or _context(), reviewer or Table())


def test_an_allowed_pod_records_its_user_and_no_grant() -> None:
    table = Table()
    decision = admit(pod(), reviewer=table)
    assert decision == Admission(queue=Q("vision-train"), queue_grant=None, annotations={
        "gpufleet.dev/submitted-by": "alice", "gpufleet.dev/queue-grant": None})
    assert table.asked == []  # a queue of its own Project needs no review


def test_pods_of_other_schedulers_are_not_checked() -> None:
    obj = pod(image="nope nope", nodeName="n0")
    obj["spec"]["schedulerName"] = "default-scheduler"
    assert admit(obj) == Admission(checked=False)


def test_an_owned_queue_is_granted_by_rbac_only() -> None:
    obj = pod(labels={"gpufleet.dev/queue": "team-b"})
    assert admit(obj) == Denial("queue", "project ml-vision does not allow queue team-b "
                                         "(allowed: vision-train, vision-infer)")
    table = Table(("ml-admins", "team-b"))
    decision = admit(obj, reviewer=table, groups=("ml-admins",))
    assert isinstance(decision, Admission) and decision.queue_grant == "team-b"
    assert decision.annotations["gpufleet.dev/queue-grant"] == "team-b"
    assert table.asked == [("alice", ("ml-admins",), "team-b", "vision")]


def test_a_user_set_grant_is_never_trusted() -> None:
    obj = pod(labels={"gpufleet.dev/queue": "team-b"}, annotations={"gpufleet.dev/queue-grant": "team-b"})
    assert isinstance(admit(obj), Denial)


def test_queue_of_a_namespace_in_no_project() -> None:
    obj = pod(labels={"gpufleet.dev/queue": "team-b"})
    assert admit(obj, namespace="scratch") == Denial(
        "queue", "queue team-b belongs to project nlp, not to namespace scratch's")
    assert isinstance(admit(pod(labels={"gpufleet.dev/queue": "open-q"}), namespace="scratch"), Admission)


def test_the_pod_group_queue_and_priority_class_count() -> None:
    group = PodGroup(namespace="vision", name="g", min_member=2, queue=Q("team-b"),
                     priority_class_name="inference-critical")
    context = _context(pod_groups={"vision/g": group})
    obj = pod(labels={"gpufleet.dev/pod-group": "g"})
    assert admit(obj, context=context).message == (  # type: ignore[union-attr]
        "project ml-vision does not allow queue team-b (allowed: vision-train, vision-infer)")
    decision = admit(obj, context=context, reviewer=Table(("alice", "team-b")))
    assert decision == Denial("priority-class", "project ml-vision does not allow priority class "
                                                "inference-critical (allowed: batch)")


@pytest.mark.parametrize(("obj", "namespace", "rule", "message"), [
    (pod(annotations={"gpufleet.dev/gpu-index": "0,1,2,3"}), "vision", "scheduler-annotation",
     "annotation gpufleet.dev/gpu-index is written by the scheduler at binding; a new pod may not set it"),
    (pod(annotations={"gpufleet.dev/mps-mem-limit": "0=81920M"}), "vision", "scheduler-annotation",
     "annotation gpufleet.dev/mps-mem-limit is written by the scheduler at binding; a new pod may not set it"),
    (pod(nodeName="n0"), "vision", "node-name",
     "spec.nodeName is set (n0): pods of schedulerName gpufleet are placed by the scheduler, leave it empty"),
    (pod(priorityClassName="inference-critical"), "vision", "priority-class",
     "project ml-vision does not allow priority class inference-critical (allowed: batch)"),
    (pod(labels={"gpufleet.dev/preemptible": "false"}), "vision", "non-preemptible",
     "project ml-vision does not allow non-preemptible work"),
    (pod(priority=500), "vision", "non-preemptible", "project ml-vision does not allow non-preemptible work"),
    (pod(image="foo/x:1"), "vision", "image",
     "project ml-vision does not allow image docker.io/foo/x:1: allowed ghcr.io/acme/*, docker.io/library/**"),
    (pod(image="ghcr.io/acme/bad-miner:1"), "vision", "image",
     "project ml-vision does not allow image ghcr.io/acme/bad-miner:1: denied ghcr.io/acme/bad*"),
    (pod(image="ghcr.io/acme/UPPER"), "vision", "image",
     "project ml-vision does not allow image 'ghcr.io/acme/UPPER': not a valid image reference"),
    (pod(image="ghcr.io/acme/x:1"), "infer", "image",
     "project ml-infer does not allow image ghcr.io/acme/x:1: not pinned by digest (requireDigest)"),
    (pod(volumes=[{"name": "host", "hostPath": {"path": "/"}}]), "vision", "volume",
     "project ml-vision does not allow volume kind hostPath in volume host (allowed: persistentVolumeClaim, "
     "configMap, secret, emptyDir, projected, downwardAPI, ephemeral)"),
    (pod(volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "slow"}}}}]),
     "vision", "volume", "project ml-vision does not allow storage class slow in volume scratch (allowed: fast)"),
    (pod(volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]),
     "vision", "volume",
     "project ml-vision does not allow storage class (cluster default) in volume scratch (allowed: fast)"),
    (pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "nlp-corpus"}}]), "vision", "volume",
     "project ml-vision does not allow claim nlp-corpus in volume data (allowed: vision-*)"),
])
def test_each_rule_refuses_with_its_message(obj: dict[str, Any], namespace: str, rule: str, message: str) -> None:
    assert admit(obj, namespace=namespace) == Denial(rule, message)


def test_images_of_init_and_ephemeral_containers_are_checked() -> None:
    for section in ("initContainers", "ephemeralContainers"):
        obj = pod()
        obj["spec"][section] = [{"name": "side", "image": "evil.io/x"}]
        assert admit(obj) == Denial("image", "project ml-vision does not allow image evil.io/x:latest: "
                                             "allowed ghcr.io/acme/*, docker.io/library/**")


def test_allowed_volumes_and_images_pass() -> None:
    obj = pod(image=f"ubuntu@{DIGEST}", volumes=[
        {"name": "data", "persistentVolumeClaim": {"claimName": "vision-data"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}}},
        {"name": "cfg", "configMap": {"name": "c"}},
    ])
    assert isinstance(admit(obj), Admission)
    assert isinstance(admit(pod(image=f"ghcr.io/acme/x@{DIGEST}", priority=1000,
                                priorityClassName="inference-critical"), namespace="infer"), Admission)


def test_pending_gang_cap_counts_the_users_gangs_in_the_project() -> None:
    pending = {"alice": {"vision": {"vision/g1": 4, "vision/p0": 1}, "nlp": {"nlp/x": 1}}}
    context = _context(pending_gangs=pending)
    assert admit(pod(), context=context) == Denial(
        "pending-gangs", "user alice has 2 pending gangs in project ml-vision, its maxPendingGangsPerUser")
    assert isinstance(admit(pod(labels={"gpufleet.dev/pod-group": "g1"}), context=context), Admission)  # joins one
    assert isinstance(admit(pod(), context=context, user="bob"), Admission)
    one = _context(pending_gangs={"alice": {"vision": {"vision/g1": 4}}})
    assert isinstance(admit(pod(), context=one), Admission)


def test_namespace_conflicts_and_unreadable_projects() -> None:
    twice = Project(name="z-copy", namespace_names=("vision",))
    context = AdmissionContext(index=ProjectIndex.build([VISION, twice], {}))
    assert admit(pod(), context=context) == Denial("namespace", "namespace vision is claimed by projects "
                                                                "ml-vision, z-copy")
    broken = _context(unreadable={"vision": "project x cannot be read"})
    assert admit(pod(), context=broken) == Denial("project", "project x cannot be read")
    assert admit(pod(), namespace="free", context=_context(require_project=True)) == Denial(
        "namespace", "namespace free belongs to no Project")


def test_hostile_shapes_never_raise() -> None:
    for obj in ({"spec": {"schedulerName": "gpufleet", "containers": "x", "volumes": [1, None, {"name": 3}]},
                 "metadata": "nope"},
                {"spec": {"schedulerName": "gpufleet", "containers": [{"image": 7}]}}):
        decision = admit(obj)
        assert isinstance(decision, Denial | Admission)


def test_pod_groups_at_creation() -> None:
    table = Table(("alice", "team-b"))
    group = PodGroup(namespace="vision", name="g", min_member=2, queue=Q("team-b"))
    assert admit_pod_group(group, "bob", (), _context(), Table()) == Denial(
        "queue", "project ml-vision does not allow queue team-b (allowed: vision-train, vision-infer)")
    assert admit_pod_group(group, "alice", (), _context(), table) == Admission(queue=Q("team-b"), queue_grant=Q("team-b"))
    critical = PodGroup(namespace="vision", name="g", min_member=2, priority_class_name="inference-critical")
    assert admit_pod_group(critical, "alice", (), _context(), table) == Denial(
        "priority-class", "project ml-vision does not allow priority class inference-critical (allowed: batch)")


_WORDS = st.sampled_from(["vision-train", "vision-infer", "team-b", "infer", "open-q", "", "g1", "batch",
                          "inference-critical", "alice", "x"])
_KEYS = st.sampled_from(["gpufleet.dev/queue", "gpufleet.dev/pod-group", "gpufleet.dev/preemptible",
                         "gpufleet.dev/queue-grant", "gpufleet.dev/submitted-by", "gpufleet.dev/gpu-blocks", "other"])


@given(labels=st.dictionaries(_KEYS, _WORDS), annotations=st.dictionaries(_KEYS, _WORDS),
       namespace=st.sampled_from(["vision", "infer", "nlp", "scratch"]), user=st.sampled_from(["alice", "bob", ""]),
       priority_class=st.one_of(st.none(), _WORDS), granted=st.booleans())
@settings(max_examples=300, deadline=None)
def test_a_tenant_gains_no_queue_priority_or_identity_it_was_not_granted(
        labels: dict[str, str], annotations: dict[str, str], namespace: str, user: str,
        priority_class: str | None, granted: bool) -> None:
    spec: dict[str, Any] = {} if priority_class is None else {"priorityClassName": priority_class}
    obj = pod(labels=labels, annotations=annotations, image=f"ghcr.io/acme/x@{DIGEST}", **spec)
    table = Table(("alice", "team-b")) if granted else Table()
    decision = admit(obj, namespace=namespace, user=user, reviewer=table)
    if not isinstance(decision, Admission):
        return
    project = _context().index.project_of(namespace)
    queue = decision.queue
    assert decision.annotations["gpufleet.dev/submitted-by"] == (user or "unverified")  # never the pod's own
    owners = _context().index.owners.get(queue)  # type: ignore[arg-type]
    if decision.queue_grant is not None:  # a grant only from the reviewer, for the queue the pod goes to
        assert decision.queue_grant == queue and (user or "unverified", decision.queue_grant) in table.grants
    elif owners is not None:  # an owned queue without a grant: its own Project's
        assert project is not None and queue in project.queues
    if project is not None and project.priority_classes is not None and priority_class:
        assert priority_class in project.priority_classes
    if labels.get("gpufleet.dev/preemptible") == "false":
        assert project is None or project.allow_non_preemptible
