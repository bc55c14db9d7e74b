"""A PersistentVolumeClaim made apart from any pod is held to its Project's volume policy at creation
(docs/semantics-notes.md, "Admission"): else a tenant could mount storage of a class it was not given."""

from __future__ import annotations

from typing import Any

from gpufleet.domain import Project, VolumePolicy
from gpufleet.policy import ProjectIndex
from gpufleet.policy.admission import Admission, AdmissionContext, Denial, admit_claim

VISION = Project(name="ml-vision", namespace_names=("vision",),
                 volumes=VolumePolicy(storage_classes=("fast",), claim_names=("vision-*",)))
OPEN = Project(name="open", namespace_names=("open",))
CONTEXT = AdmissionContext(index=ProjectIndex.build([VISION, OPEN], {}))


def claim(name: str, storage_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


def test_an_allowed_class_and_name() -> None:
    assert admit_claim(claim("vision-data", "fast"), "vision", CONTEXT) == Admission()


def test_a_class_the_project_does_not_list() -> None:
    assert admit_claim(claim("vision-data", "premium"), "vision", CONTEXT) == Denial(
        "volume", "project ml-vision does not allow storage class premium in persistentvolumeclaim vision-data "
                  "(allowed: fast)")


def test_no_class_is_the_cluster_default_and_refused_when_classes_are_listed() -> None:
    assert admit_claim(claim("vision-data"), "vision", CONTEXT) == Denial(
        "volume", "project ml-vision does not allow storage class (cluster default) in persistentvolumeclaim "
                  "vision-data (allowed: fast)")


def test_a_name_outside_the_globs() -> None:
    assert admit_claim(claim("nlp-corpus", "fast"), "vision", CONTEXT) == Denial(
        "volume", "project ml-vision does not allow claim nlp-corpus in persistentvolumeclaim nlp-corpus "
                  "(allowed: vision-*)")


def test_projects_without_volume_rules_and_namespaces_without_a_project() -> None:
    assert admit_claim(claim("anything", "premium"), "open", CONTEXT) == Admission()
    assert admit_claim(claim("anything", "premium"), "loose", CONTEXT) == Admission(checked=False)


def test_a_namespace_claimed_twice_refuses_claims_too() -> None:
    twice = AdmissionContext(index=ProjectIndex.build([VISION, Project(name="b", namespace_names=("vision",))], {}))
    assert admit_claim(claim("vision-data", "fast"), "vision", twice) == Denial(
        "namespace", "namespace vision is claimed by projects b, ml-vision")
