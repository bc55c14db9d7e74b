"""Workloads: the submitter follows the workload's creator (docs/semantics-notes.md, "Admission",
"Workloads"): the pod rules on a workload's template, the stamps on the template, and what a trusted
controller creates from it keeps the copied stamps."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.domain import QueueName
from gpufleet.policy import Admission, Denial, admit_pod, admit_workload
from gpufleet.policy.admission import DEFAULT_TRUSTED_CONTROLLERS, workload_template

from .test_admission import Table, _context, pod

Q = QueueName
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
SUBMITTED, GRANT = "gpufleet.dev/submitted-by", "gpufleet.dev/queue-grant"


def job(template: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "train"}, "spec": {"template": template}}


def cron_job(template: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "nightly"}, "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}}}


def test_the_five_controllers_of_kube_controller_manager_are_trusted_by_default() -> None:
    assert DEFAULT_TRUSTED_CONTROLLERS == (
        "system:serviceaccount:kube-system:job-controller", "system:serviceaccount:kube-system:cronjob-controller",
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:kube-system:deployment-controller",
        "system:serviceaccount:kube-system:statefulset-controller")


@pytest.mark.parametrize(("group", "kind", "make"), [
    ("batch", "Job", job), ("batch", "CronJob", cron_job), ("apps", "Deployment", job),
    ("apps", "ReplicaSet", job), ("apps", "StatefulSet", job)])
def test_a_workload_template_is_stamped_for_its_creator(group: str, kind: str, make: Any) -> None:
    table = Table(("alice", "team-b"))
    decision = admit_workload(make(pod(labels={"gpufleet.dev/queue": "team-b"})), group, kind, "vision", "alice", (),
                              _context(), table)
    assert decision == Admission(queue=Q("team-b"), queue_grant=Q("team-b"),
                                 annotations={SUBMITTED: "alice", GRANT: "team-b"})
    assert table.asked == [("alice", (), "team-b", "vision")]


def test_a_workload_template_breaking_a_pod_rule_is_refused_with_the_pod_message() -> None:
    decision = admit_workload(job(pod(image="ghcr.io/acme/bad:1")), "batch", "Job", "vision", "alice", (),
                              _context(), Table())
    assert decision == Denial("image", "project ml-vision does not allow image ghcr.io/acme/bad:1: denied "
                                       "ghcr.io/acme/bad*")
    decision = admit_workload(job(pod(nodeName="n0")), "batch", "Job", "vision", "alice", (), _context(), Table())
    assert decision == Denial("node-name", "spec.nodeName is set (n0): pods of schedulerName gpufleet are placed "
                                           "by the scheduler, leave it empty")


def test_other_kinds_and_other_schedulers_templates_are_not_checked() -> None:
    other = pod(image="nope nope")
    other["spec"]["schedulerName"] = "default-scheduler"
    assert admit_workload(job(other), "batch", "Job", "vision", "alice", (), _context(), Table()) == \
        Admission(checked=False)
    assert admit_workload(job(pod()), "apps", "DaemonSet", "vision", "alice", (), _context(), Table()) == \
        Admission(checked=False)
    assert workload_template({"spec": "x"}, "batch", "Job") is None


def test_a_template_is_not_held_to_the_pending_gang_cap() -> None:
    context = _context(pending_gangs={"alice": {"vision": {"vision/a", "vision/b"}}})
    assert isinstance(admit_workload(job(pod()), "batch", "Job", "vision", "alice", (), context, Table()), Admission)
    assert admit_pod(pod(name="new"), "vision", "alice", (), context, Table()) == Denial(
        "pending-gangs", "user alice has 2 pending gangs in project ml-vision, its maxPendingGangsPerUser")


def test_a_trusted_controller_keeps_the_copied_stamps_and_asks_nothing() -> None:
    table = Table()
    stamped = pod(labels={"gpufleet.dev/queue": "team-b"}, annotations={SUBMITTED: "alice", GRANT: "team-b"})
    decision = admit_pod(stamped, "vision", JOB_CONTROLLER, ("system:serviceaccounts",), _context(), table,
                         trusted=True)
    assert decision == Admission(queue=Q("team-b"), queue_grant=Q("team-b"), annotations={})
    assert table.asked == []


def test_a_trusted_controller_without_a_copied_grant_is_refused_the_owned_queue() -> None:
    table = Table((JOB_CONTROLLER, "team-b"))
    stamped = pod(labels={"gpufleet.dev/queue": "team-b"}, annotations={SUBMITTED: "alice"})
    decision = admit_pod(stamped, "vision", JOB_CONTROLLER, (), _context(), table, trusted=True)
    assert decision == Denial("queue", "project ml-vision does not allow queue team-b (allowed: vision-train, "
                                       "vision-infer)")
    assert table.asked == []  # the controller's own RBAC never grants a queue for a submitter


def test_the_kept_submitter_is_the_user_of_the_pending_gang_cap() -> None:
    context = _context(pending_gangs={"alice": {"vision": {"vision/a", "vision/b"}}})
    stamped = pod(name="new", annotations={SUBMITTED: "alice"})
    assert admit_pod(stamped, "vision", JOB_CONTROLLER, (), context, Table(), trusted=True) == Denial(
        "pending-gangs", "user alice has 2 pending gangs in project ml-vision, its maxPendingGangsPerUser")
    bob = pod(name="new", annotations={SUBMITTED: "bob"})
    assert isinstance(admit_pod(bob, "vision", JOB_CONTROLLER, (), context, Table(), trusted=True), Admission)


def test_a_trusted_controller_without_stamps_is_stamped_as_itself() -> None:
    decision = admit_pod(pod(), "vision", JOB_CONTROLLER, (), _context(), Table(), trusted=True)
    assert decision == Admission(queue=Q("vision-train"), annotations={SUBMITTED: JOB_CONTROLLER, GRANT: None})


def test_an_untrusted_creator_forging_the_stamps_is_overwritten() -> None:
    table = Table()
    forged = pod(labels={"gpufleet.dev/queue": "team-b"}, annotations={SUBMITTED: "alice", GRANT: "team-b"})
    decision = admit_pod(forged, "vision", "mallory", (), _context(), table)
    assert decision == Denial("queue", "project ml-vision does not allow queue team-b (allowed: vision-train, "
                                       "vision-infer)")
    assert table.asked == [("mallory", (), "team-b", "vision")]
    decision = admit_pod(pod(annotations={SUBMITTED: "alice"}), "vision", "mallory", (), _context(), Table())
    assert decision == Admission(queue=Q("vision-train"), annotations={SUBMITTED: "mallory", GRANT: None})
