"""The Project resource read into the domain: every field, and one precise line per bad field."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.adapters import FieldError, project_from_dict, project_namespace_names
from gpufleet.domain import (
    DEFAULT_VOLUME_KINDS,
    ImagePolicy,
    LabelSelector,
    NodePool,
    Project,
    SelectorRequirement,
    VolumePolicy,
)


def _doc(spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "ml-vision"}, "spec": spec}


def test_every_field() -> None:
    project = project_from_dict(_doc({
        "namespaces": {"names": ["vision"], "selector": {"matchLabels": {"team": "vision"}}},
        "queues": ["vision-train", "vision-infer"], "defaultQueue": "vision-train",
        "nodePools": [{"name": "a100", "nodeSelector": {"matchExpressions": [
            {"key": "gpu", "operator": "In", "values": ["a100"]}]}}],
        "priorityClasses": ["batch"], "allowNonPreemptible": True, "maxGPUsPerUser": 16, "maxPendingGangsPerUser": 3,
        "images": {"allowed": ["ghcr.io/acme/*"], "denied": ["ghcr.io/acme/bad*"], "requireDigest": True},
        "volumes": {"kinds": ["persistentVolumeClaim"], "storageClasses": ["fast"], "claimNames": ["vision-*"]},
    }))
    assert project == Project(
        name="ml-vision", namespace_names=("vision",),
        namespace_selector=LabelSelector(match_labels=(("team", "vision"),)),
        queues=("vision-train", "vision-infer"), default_queue="vision-train",  # type: ignore[arg-type]
        node_pools=(NodePool("a100", LabelSelector(match_expressions=(SelectorRequirement("gpu", "In", ("a100",)),))),),
        priority_classes=("batch",), allow_non_preemptible=True, max_gpus_per_user=16, max_pending_gangs_per_user=3,
        images=ImagePolicy(("ghcr.io/acme/*",), ("ghcr.io/acme/bad*",), True),
        volumes=VolumePolicy(("persistentVolumeClaim",), ("fast",), ("vision-*",)),
    )


def test_an_empty_spec_is_a_project_without_rules() -> None:
    project = project_from_dict(_doc(None))
    assert project == Project(name="ml-vision")
    assert project.volumes.kinds == DEFAULT_VOLUME_KINDS


@pytest.mark.parametrize(("spec", "path", "message"), [
    ({"queuez": []}, "spec.queuez", "unknown field"),
    ({"queues": ["a"], "defaultQueue": "b"}, "spec", "defaultQueue must be one of queues"),
    ({"images": {"allowed": "ghcr.io/*"}}, "spec.images.allowed", "must be a list, got \"ghcr.io/*\""),
    ({"images": {"denied": ["ghcr.io/***"]}}, "spec.images.denied[0]",
     "'***' is not a glob ('*': within one path segment, '**': across segments), got 'ghcr.io/***'"),
    ({"volumes": {"claimNames": [""]}}, "spec.volumes.claimNames[0]", "must not be empty"),
    ({"maxPendingGangsPerUser": -1}, "spec.maxPendingGangsPerUser", "must be >= 0, got -1"),
    ({"allowNonPreemptible": "yes"}, "spec.allowNonPreemptible", "must be true or false, got \"yes\""),
    ({"namespaces": {"selector": {"matchExpressions": [{"key": "k", "operator": "Near"}]}}},
     "spec.namespaces.selector.matchExpressions[0].operator",
     "must be one of 'In', 'NotIn', 'Exists' or 'DoesNotExist', got \"Near\""),
])
def test_bad_fields_name_the_field(spec: Any, path: str, message: str) -> None:
    with pytest.raises(FieldError) as caught:
        project_from_dict(_doc(spec))
    assert (caught.value.path, caught.value.message) == (path, message)


def test_namespace_names_of_an_unreadable_project() -> None:
    assert project_namespace_names(_doc({"namespaces": {"names": ["a", 3, "b"]}, "images": 1})) == ("a", "b")
    assert project_namespace_names({"spec": "x"}) == ()
