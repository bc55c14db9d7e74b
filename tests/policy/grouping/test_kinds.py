"""Each owner kind's plan, from a real manifest (tests/policy/grouping/data)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.adapters import owner_from_dict
from gpufleet.domain import QueueName
from gpufleet.policy.grouping import GroupFacts, GroupPlan, GroupProblem, group_for, group_name

from .helpers import FACTS, manifest, owner


@pytest.fixture
def facts() -> GroupFacts:
    return FACTS


def plans(name: str, facts: GroupFacts, pod_name: str | None = None) -> tuple[GroupPlan, ...]:
    result = group_for(owner(name), facts, pod_name)
    assert not isinstance(result, GroupProblem), result
    return result


def test_job_min_member_is_parallelism_and_trusts_the_stamped_grant(facts: GroupFacts) -> None:
    (plan,) = plans("job.yaml", facts)
    assert (plan.min_member, plan.max_member) == (4, 4)
    assert plan.queue == QueueName("vision-train")
    assert plan.priority_class == "batch"
    assert plan.name.startswith("job-indexed-train-") and len(plan.name) <= 63


def test_job_never_more_than_its_completions(facts: GroupFacts) -> None:
    doc = manifest("job.yaml")
    doc["spec"]["completions"] = 2
    (plan,) = group_for(owner_from_dict(doc), facts)  # type: ignore[misc]
    assert plan.min_member == 2


def test_jobset_one_gang_of_all_replicated_jobs(facts: GroupFacts) -> None:
    (plan,) = plans("jobset.yaml", facts)
    assert plan.min_member == 1 + 2 * 4
    assert plan.queue == QueueName("vision-batch")  # no label: the Project's default


def test_jobset_a_gang_per_replicated_job_when_annotated(facts: GroupFacts) -> None:
    doc = manifest("jobset.yaml")
    doc["metadata"]["annotations"] = {"gpufleet.dev/group-per": "replicated-job"}
    result = group_for(owner_from_dict(doc), facts)
    assert not isinstance(result, GroupProblem)
    assert [(p.unit, p.min_member) for p in result] == [("driver", 1), ("workers", 8)]
    assert len({p.name for p in result}) == 2


def test_pytorchjob_elastic_workers_above_min_replicas(facts: GroupFacts) -> None:
    (plan,) = plans("pytorchjob.yaml", facts)
    assert (plan.min_member, plan.max_member) == (1 + 2, 1 + 6)
    assert plan.elastic_above == 3
    assert plan.priority_class == "train"


def test_mpijob_counts_its_launcher_unless_it_waits_for_workers(facts: GroupFacts) -> None:
    (plan,) = plans("mpijob.yaml", facts)
    assert (plan.min_member, plan.max_member) == (3, 3)
    doc = manifest("mpijob.yaml")
    doc["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    (waiting,) = group_for(owner_from_dict(doc), facts)  # type: ignore[misc]
    assert (waiting.min_member, waiting.max_member) == (2, 3)


def test_trainjob_num_nodes_of_its_node_pods(facts: GroupFacts) -> None:
    (plan,) = plans("trainjob.yaml", facts)
    assert plan.min_member == 4
    assert plan.member_roles == ("node",)


def test_raycluster_autoscaled_workers_are_elastic(facts: GroupFacts) -> None:
    (plan,) = plans("raycluster.yaml", facts)
    assert (plan.min_member, plan.max_member) == (1 + 2, 1 + 10)


def test_rayjob_counts_replicas_without_autoscaling(facts: GroupFacts) -> None:
    (plan,) = plans("rayjob.yaml", facts)
    assert (plan.min_member, plan.max_member) == (1 + 3, 1 + 3)
    assert plan.member_roles == ("head", "worker")


def test_leaderworkerset_one_gang_per_group(facts: GroupFacts) -> None:
    result = plans("leaderworkerset.yaml", facts)
    assert [(p.unit, p.min_member) for p in result] == [("0", 4), ("1", 4)]


def test_deployment_a_gang_per_pod_with_inference_defaults(facts: GroupFacts) -> None:
    assert plans("deployment.yaml", facts) == ()  # no pod named: no gang yet
    (plan,) = plans("deployment.yaml", facts, pod_name="llama-serve-7d9c-abcde")
    assert (plan.min_member, plan.queue, plan.placement) == (1, QueueName("serving"), "spread")
    # the Project allows non-preemptible work: its first class at or above nonPreemptiblePriority
    assert plan.priority_class == "inference-critical"
    (other,) = plans("deployment.yaml", facts, pod_name="llama-serve-7d9c-fghij")
    assert other.name != plan.name


def test_inference_default_class_only_where_the_project_allows_it(facts: GroupFacts) -> None:
    doc = manifest("deployment.yaml")
    doc["metadata"]["namespace"] = "ml"
    del doc["metadata"]["labels"]
    (plan,) = group_for(owner_from_dict(doc), facts, "p")  # type: ignore[misc]
    assert plan.priority_class is None


def test_statefulset_keeps_its_template_class(facts: GroupFacts) -> None:
    (plan,) = plans("statefulset.yaml", facts, pod_name="triton-0")
    assert plan.priority_class == "inference-critical"


def test_names_follow_the_uid(facts: GroupFacts) -> None:
    doc = manifest("pytorchjob.yaml")
    first = owner_from_dict(doc)
    doc["metadata"]["uid"] = "recreated"
    second = owner_from_dict(doc)
    assert group_name("pytorchjob", first.ref) != group_name("pytorchjob", second.ref)
    assert group_name("pytorchjob", first.ref) == group_name("pytorchjob", owner_from_dict(manifest("pytorchjob.yaml")).ref)


@pytest.mark.parametrize("annotations, words", [
    ({"gpufleet.dev/min-member": "x"}, 'annotation gpufleet.dev/min-member: "x" is not a whole number'),
    ({"gpufleet.dev/min-member": "0"}, "annotation gpufleet.dev/min-member: 0 is less than 1"),
    ({"gpufleet.dev/min-member": "9"},
     "annotation gpufleet.dev/min-member: 9 is more than the 7 pods PyTorchJob ml/elastic-imagenet asks for"),
    ({"gpufleet.dev/topology-required": "zone"},
     "annotation gpufleet.dev/topology-required: zone is not one of the topology levels"),
    ({"gpufleet.dev/topology-preferred": " "}, "is not a node label key"),
])
def test_bad_annotations_are_problems_that_still_name_the_group(
        annotations: dict[str, str], words: str, facts: GroupFacts) -> None:
    doc = manifest("pytorchjob.yaml")
    doc["metadata"]["annotations"] = annotations
    result = group_for(owner_from_dict(doc), facts)
    assert isinstance(result, GroupProblem)
    assert result.reason.startswith("PyTorchJob ml/elastic-imagenet: ")
    assert words in result.reason
    assert len(result.names) == 1 and result.names[0].startswith("pytorchjob-elastic-imagenet-")


@pytest.mark.parametrize("name, value, words", [
    ("jobset.yaml", "job", 'annotation gpufleet.dev/group-per: "job" is not replicated-job'),
    ("pytorchjob.yaml", "replicated-job", "annotation gpufleet.dev/group-per: only a JobSet may be grouped per part"),
])
def test_group_per_only_on_jobsets(name: str, value: str, words: str, facts: GroupFacts) -> None:
    doc = manifest(name)
    doc["metadata"]["annotations"] = {"gpufleet.dev/group-per": value}
    result = group_for(owner_from_dict(doc), facts)
    assert isinstance(result, GroupProblem) and result.reason.endswith(words)


def test_min_member_annotation_within_members(facts: GroupFacts) -> None:
    doc = manifest("pytorchjob.yaml")
    doc["metadata"]["annotations"] = {"gpufleet.dev/min-member": "5",
                                      "gpufleet.dev/topology-required": "topology.gpufleet.dev/rack"}
    (plan,) = group_for(owner_from_dict(doc), facts)  # type: ignore[misc]
    assert (plan.min_member, plan.topology_required) == (5, "topology.gpufleet.dev/rack")


def _with(name: str, **meta: Any) -> dict[str, Any]:
    doc = manifest(name)
    doc["metadata"].update(meta)
    return doc


def test_a_tenant_naming_another_projects_queue_gains_nothing(facts: GroupFacts) -> None:
    doc = _with("pytorchjob.yaml", labels={"gpufleet.dev/queue": "nlp"})
    result = group_for(owner_from_dict(doc), facts)
    assert isinstance(result, GroupProblem)
    assert result.reason == ("PyTorchJob ml/elastic-imagenet: label gpufleet.dev/queue: project ml-team "
                             "does not allow queue nlp (allowed: vision-train, vision-batch)")


def test_an_unknown_queue_is_a_problem_not_another_queue(facts: GroupFacts) -> None:
    from dataclasses import replace

    known = replace(facts, leaf_queues=frozenset({QueueName("vision-train"), QueueName("vision-batch")}))
    doc = _with("pytorchjob.yaml", labels={"gpufleet.dev/queue": "vision-trian"})
    result = group_for(owner_from_dict(doc), known)
    assert isinstance(result, GroupProblem)
    assert result.reason.endswith("label gpufleet.dev/queue: queue vision-trian does not exist or is not a leaf queue")
    (plan,) = group_for(owner("pytorchjob.yaml"), known)  # type: ignore[misc]
    assert plan.queue == QueueName("vision-batch")


def test_a_grant_on_an_operator_template_is_not_trusted(facts: GroupFacts) -> None:
    doc = _with("pytorchjob.yaml", labels={"gpufleet.dev/queue": "nlp"})
    for spec in doc["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["metadata"] = {"annotations": {"gpufleet.dev/queue-grant": "nlp"}}
    assert isinstance(group_for(owner_from_dict(doc), facts), GroupProblem)


def test_a_grant_on_a_job_template_is_the_webhooks_and_trusted(facts: GroupFacts) -> None:
    doc = _with("job.yaml", labels={"gpufleet.dev/queue": "nlp"})
    doc["spec"]["template"]["metadata"]["annotations"] = {"gpufleet.dev/queue-grant": "nlp"}
    (plan,) = group_for(owner_from_dict(doc), facts)  # type: ignore[misc]
    assert plan.queue == QueueName("nlp")


def test_a_priority_class_the_project_does_not_list(facts: GroupFacts) -> None:
    doc = manifest("job.yaml")
    doc["spec"]["template"]["spec"]["priorityClassName"] = "inference-critical"
    result = group_for(owner_from_dict(doc), facts)
    assert isinstance(result, GroupProblem)
    assert "priorityClassName: project ml-team does not allow priority class inference-critical" in result.reason


def test_a_namespace_claimed_twice(facts: GroupFacts) -> None:
    from gpufleet.domain import Project
    from gpufleet.policy import ProjectIndex

    twice = GroupFacts(projects=ProjectIndex.build([Project("a", namespace_names=("ml",)),
                                                    Project("b", namespace_names=("ml",))], {}))
    result = group_for(owner("job.yaml"), twice)
    assert isinstance(result, GroupProblem)
    assert result.reason.endswith("namespace ml is claimed by projects a, b")


def test_roles_that_name_different_classes_leave_it_to_the_pods(facts: GroupFacts) -> None:
    doc = manifest("pytorchjob.yaml")
    doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["priorityClassName"] = "batch"
    (plan,) = group_for(owner_from_dict(doc), facts)  # type: ignore[misc]
    assert plan.priority_class is None
