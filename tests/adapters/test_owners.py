"""Owner objects read at the edge: foreign fields ignored, a bad field read is one line naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.adapters import InputError, owner_from_dict, read_owner
from gpufleet.adapters.owners import UNSUSPEND_PATCH, is_suspended
from gpufleet.policy.grouping import GroupProblem

DATA = Path(__file__).parents[1] / "policy" / "grouping" / "data"


def _doc(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((DATA / name).read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.yaml")))
def test_every_manifest_reads(name: str) -> None:
    owner = owner_from_dict(_doc(name))
    assert owner.ref.uid and owner.roles


@pytest.mark.parametrize("name, path, value, line", [
    ("pytorchjob.yaml", ("spec", "pytorchReplicaSpecs", "Worker", "replicas"), "4",
     'PyTorchJob ml/elastic-imagenet: spec.pytorchReplicaSpecs.Worker.replicas: must be an integer, got "4"'),
    ("job.yaml", ("spec", "parallelism"), -1, "Job ml/indexed-train: spec.parallelism:"),
    ("trainjob.yaml", ("spec", "trainer"), {}, "TrainJob ml/torch-mnist: spec.trainer.numNodes: required field missing"),
    ("rayjob.yaml", ("spec", "rayClusterSpec"), None, "RayJob ml/rayjob-sample: spec.rayClusterSpec: required"),
    ("mpijob.yaml", ("spec", "launcherCreationPolicy"), "Later", "MPIJob ml/pi: spec.launcherCreationPolicy:"),
])
def test_a_bad_field_is_one_line(name: str, path: tuple[str, ...], value: object, line: str) -> None:
    doc = _doc(name)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    with pytest.raises(InputError) as err:
        owner_from_dict(doc)
    assert str(err.value).startswith(line)
    assert "\n" not in str(err.value)
    problem = read_owner(doc)  # the controller's form: a problem that still names the gang
    assert isinstance(problem, GroupProblem) and problem.reason == str(err.value) and len(problem.names) == 1


def test_not_an_owner_kind_or_version() -> None:
    doc = _doc("pytorchjob.yaml")
    doc["apiVersion"] = "kubeflow.org/v2"
    with pytest.raises(InputError, match=r"kubeflow\.org/v2 PyTorchJob is not an owner kind gpufleet groups"):
        read_owner(doc)


def test_unknown_fields_of_foreign_objects_are_ignored() -> None:
    doc = _doc("raycluster.yaml")
    doc["spec"]["someFutureField"] = {"x": 1}
    doc["spec"]["workerGroupSpecs"][0]["scaleStrategy"] = {"workersToDelete": []}
    assert owner_from_dict(doc).roles[1].name == "gpu-group"


@pytest.mark.parametrize(("api_version", "kind", "spec", "suspended"), [
    ("batch/v1", "Job", {"suspend": True}, True),
    ("jobset.x-k8s.io/v1alpha2", "JobSet", {"suspend": True}, True),
    ("ray.io/v1", "RayJob", {"suspend": True}, True),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob", {"suspend": True}, True),
    ("batch/v1", "Job", {"suspend": False}, False),
    ("batch/v1", "Job", {}, False),
    ("batch/v1", "Job", {"suspend": "true"}, False),  # not the boolean: not read as suspended
    ("kubeflow.org/v1", "PyTorchJob", {"suspend": True}, False),  # not a suspendable kind
    ("apps/v1", "Deployment", {"suspend": True}, False),
])
def test_is_suspended(api_version: str, kind: str, spec: dict[str, object], suspended: bool) -> None:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "ml"}, "spec": spec}
    assert is_suspended(obj) is suspended
    assert is_suspended({"kind": kind, "spec": spec}) is False
    assert UNSUSPEND_PATCH == {"spec": {"suspend": False}}
