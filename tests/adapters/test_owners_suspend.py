"""The virtual pods of a suspended owner: built from its own templates, read as real pods would be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpufleet.adapters import owner_from_dict, reader_for
from gpufleet.adapters.owners import virtual_pods
from gpufleet.domain import GPU, LABEL_POD_GROUP, Pod
from gpufleet.policy import ProjectIndex
from gpufleet.policy.grouping import GroupFacts, GroupPlan, group_for, virtual_gang

DATA = Path(__file__).parents[1] / "policy" / "grouping" / "data"
FACTS = GroupFacts(projects=ProjectIndex.build([], {}))  # namespaces in no Project: any queue


def manifest(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((DATA / name).read_text())
    assert isinstance(doc, dict)
    return doc


def _plans(doc: dict[str, Any]) -> tuple[GroupPlan, ...]:
    plans = group_for(owner_from_dict(doc), FACTS)
    assert isinstance(plans, tuple)
    return plans


def _read(obj: dict[str, Any]) -> Pod:
    reader = reader_for("v1", "Pod")
    assert reader is not None
    pod = reader(obj)
    assert isinstance(pod, Pod)
    return pod


def test_a_suspended_job_gives_parallelism_pods_of_its_template() -> None:
    doc = manifest("job.yaml")
    (plan,) = _plans(doc)
    pods = virtual_pods(doc, owner_from_dict(doc), plan)
    assert [p["metadata"]["name"] for p in pods] == list(virtual_gang(plan).pods)
    assert len(pods) == 4 == plan.min_member
    for obj in pods:
        pod = _read(obj)
        assert pod.requests.get(GPU) == 1_000  # one GPU, in milli-units
        assert pod.group_label == plan.name
        assert obj["metadata"]["labels"][LABEL_POD_GROUP] == plan.name
        assert obj["spec"]["schedulerName"] == "gpufleet"
    pods[0]["spec"]["containers"].clear()  # a copy: the owner's template is untouched
    assert doc["spec"]["template"]["spec"]["containers"]


def test_a_jobset_per_replicated_job_gives_each_gang_its_own_jobs_pods() -> None:
    doc = manifest("jobset.yaml")
    doc["metadata"].setdefault("annotations", {})["gpufleet.dev/group-per"] = "replicated-job"
    owner = owner_from_dict(doc)
    for plan in _plans(doc):
        pods = virtual_pods(doc, owner, plan)
        role = next(r for r in owner.roles if r.name == plan.unit)
        assert len(pods) == role.max_pods == plan.max_member


def test_a_rayjob_gives_head_and_workers_and_a_trainjob_none() -> None:
    doc = manifest("rayjob.yaml")
    (plan,) = _plans(doc)
    pods = virtual_pods(doc, owner_from_dict(doc), plan)
    assert len(pods) == plan.max_member
    assert pods[0]["metadata"]["labels"][LABEL_POD_GROUP] == plan.name
    train = manifest("trainjob.yaml")
    (train_plan,) = _plans(train)
    assert virtual_pods(train, owner_from_dict(train), train_plan) == ()
