"""A TrainJob read with its runtime (a TrainingRuntime or ClusterTrainingRuntime): the trainer's node
count and pod template, and the virtual pods admission by suspension shows the engine."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from gpufleet.adapters import read_owner, reader_for
from gpufleet.adapters.owners import RuntimeRef, runtime_of, virtual_pods
from gpufleet.domain import GPU, LABEL_POD_GROUP, Pod, Project, QueueName
from gpufleet.policy import ProjectIndex
from gpufleet.policy.grouping import GroupFacts, GroupProblem, Owner, group_for

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
FACTS = GroupFacts(projects=ProjectIndex.build([], {}))

RUNTIME: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed"},
    "spec": {"mlPolicy": {"numNodes": 3, "torch": {}}, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {"template": {
            "metadata": {"labels": {"app": "torch"}},
            "spec": {"schedulerName": "gpufleet", "priorityClassName": "train", "containers": [
                {"name": "node", "image": "pytorch/pytorch:2.7",
                 "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "4"}, "limits": {"nvidia.com/gpu": "1"}}},
            ]}}}}},
    ]}}},
}


def trainjob(trainer: Mapping[str, Any] | None = None, ref: Mapping[str, Any] | None = None,
             suspend: bool = True) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "ft", "namespace": "ml", "uid": "u-ft"},
            "spec": {"runtimeRef": dict(ref or {"name": "torch-distributed"}), "suspend": suspend,
                     "trainer": dict(trainer or {})}}


def lookup(found: Mapping[str, Any] | None = RUNTIME) -> Any:
    asked: list[RuntimeRef] = []

    def find(ref: RuntimeRef) -> Mapping[str, Any] | None:
        asked.append(ref)
        return found

    find.asked = asked  # type: ignore[attr-defined]
    return find


def owner(doc: Mapping[str, Any], runtimes: Any) -> Owner:
    read = read_owner(doc, runtimes)
    assert isinstance(read, Owner), read
    return read


def test_num_nodes_from_the_trainjob_else_the_runtimes_ml_policy_else_its_parallelism() -> None:
    assert owner(trainjob({"numNodes": 5}), lookup()).roles[0].replicas == 5
    assert owner(trainjob(), lookup()).roles[0].replicas == 3
    no_policy = copy.deepcopy(RUNTIME)
    del no_policy["spec"]["mlPolicy"]
    no_policy["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 2
    assert owner(trainjob(), lookup(no_policy)).roles[0].replicas == 2
    role = owner(trainjob(), lookup()).roles[0]
    assert role.name == "node" and role.template.priority_class == "train"  # the runtime's template


def test_the_runtime_reference_defaults_as_upstream() -> None:
    find = lookup()
    owner(trainjob(), find)
    owner(trainjob(ref={"name": "mine", "kind": "TrainingRuntime"}), find)
    assert find.asked == [RuntimeRef("ClusterTrainingRuntime", "", "torch-distributed"),
                          RuntimeRef("TrainingRuntime", "ml", "mine")]
    assert str(find.asked[1]) == "TrainingRuntime ml/mine"
    assert runtime_of(trainjob(ref={"name": "x", "apiGroup": "example.com"})) is None


@pytest.mark.parametrize("doc, found, line", [
    (trainjob(), None, "TrainJob ml/ft: spec.runtimeRef: ClusterTrainingRuntime torch-distributed not found"),
    (trainjob(ref={"name": "r", "apiGroup": "example.com"}), RUNTIME,
     "TrainJob ml/ft: spec.runtimeRef.apiGroup: example.com is not trainer.kubeflow.org"),
    (trainjob(ref={"name": "r", "kind": "Runtime"}), RUNTIME, "TrainJob ml/ft: spec.runtimeRef.kind:"),
    (trainjob(), {"spec": {"template": {"spec": {"replicatedJobs": [{"name": "launcher"}]}}}},
     'TrainJob ml/ft: spec.runtimeRef (ClusterTrainingRuntime torch-distributed): no replicated job "node"'),
    (trainjob(), {"spec": {"template": {}}},
     "TrainJob ml/ft: spec.runtimeRef (ClusterTrainingRuntime torch-distributed): spec.template.spec: required"),
])
def test_a_bad_or_missing_runtime_is_one_line(doc: dict[str, Any], found: Any, line: str) -> None:
    read = read_owner(doc, lookup(found))
    assert isinstance(read, GroupProblem) and read.reason.startswith(line), read
    assert "\n" not in read.reason and read.names  # its pods, if any, wait in its group


def test_a_running_trainjob_with_num_nodes_needs_no_runtime() -> None:
    """Its JobSet is made: the runtime deleted since changes nothing."""
    assert owner(trainjob({"numNodes": 2}, suspend=False), lookup(None)).roles[0].replicas == 2


def test_virtual_pods_are_the_runtimes_node_template_with_resources_per_node() -> None:
    doc = trainjob({"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}})
    read = owner(doc, lookup())
    (plan,) = group_for(read, FACTS)  # type: ignore[misc]
    pods = virtual_pods(doc, read, plan, lookup())
    assert len(pods) == 2 == plan.min_member
    reader = reader_for("v1", "Pod")
    assert reader is not None
    for obj in pods:
        pod = reader(obj)
        assert isinstance(pod, Pod)
        assert pod.requests.get(GPU) == 8_000  # the limit given alone: the runtime's request of 1 not kept
        assert pod.requests.get("cpu") == 4_000 and pod.group_label == plan.name
        assert obj["metadata"]["labels"] == {"app": "torch", LABEL_POD_GROUP: plan.name}
    # The runtime is untouched.
    assert RUNTIME["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert virtual_pods(doc, read, plan, lookup(None)) == ()  # runtime gone: none (never admitted)


def test_a_runtimes_queue_grant_gains_no_queue() -> None:
    """A TrainingRuntime is written in the tenant's namespace: a queue grant on its template is not
    the webhook's (TrainJobs' templates are not stamped), so the Project's rules still hold."""
    project = Project("ml-team", namespace_names=("ml",), queues=(QueueName("mine"),), default_queue=QueueName("mine"))
    other = Project("other", namespace_names=("other",), queues=(QueueName("theirs"),))
    facts = GroupFacts(projects=ProjectIndex.build([project, other], {}))
    granted = copy.deepcopy(RUNTIME)
    template = granted["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template["metadata"]["annotations"] = {"gpufleet.dev/queue-grant": "theirs"}
    del template["spec"]["priorityClassName"]
    doc = trainjob({"numNodes": 1})
    doc["metadata"]["labels"] = {"gpufleet.dev/queue": "theirs"}
    result = group_for(owner(doc, lookup(granted)), facts)
    assert isinstance(result, GroupProblem) and "does not allow queue theirs" in result.reason
