"""Project and Namespace objects in a snapshot: read by ``gpufleet replay`` (docs/semantics-notes.md,
"Projects (tenancy)"), and every bad one refused with exit 2 and one line naming the document and field."""

from __future__ import annotations

from pathlib import Path

import click.testing
import pytest

from gpufleet.adapters import load_snapshot_text, project_from_dict
from gpufleet.adapters.errors import InputError
from gpufleet.cli import main
from gpufleet.domain import LabelSelector, NodePool, Project, SelectorRequirement

NODE = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '8', nvidia.com/gpu: '8'}}\n"
QUEUES = (
    "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: research}\n---\n"
    "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec: {parent: research}\n---\n"
    "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-b}\nspec: {parent: research}\n"
)


def project(name: str, spec: str) -> str:
    return f"apiVersion: gpufleet.dev/v1alpha1\nkind: Project\nmetadata: {{name: {name}}}\nspec: {spec}\n"


def pod(name: str, namespace: str, labels: str = "{}", annotations: str = "{}") -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, labels: {labels}, "
            f"annotations: {annotations}}}\nspec: {{schedulerName: gpufleet, containers: [{{name: main, resources: "
            "{limits: {nvidia.com/gpu: '1'}}}]}\nstatus: {phase: Pending}\n")


def docs(*parts: str) -> str:
    return "---\n".join(parts)


BAD: list[tuple[str, str, str]] = [
    # (id, snapshot text, expected message after "snap.yaml: ")
    ("selector-not-mapping", docs(NODE, QUEUES, project("p", "{namespaces: {selector: [a]}}")),
     "document 5 (Project p): spec.namespaces.selector: must be a mapping, got a list"),
    ("selector-unknown-operator", docs(NODE, QUEUES, project(
        "p", "{namespaces: {selector: {matchExpressions: [{key: team, operator: Gt, values: ['1']}]}}}")),
     "document 5 (Project p): spec.namespaces.selector.matchExpressions[0].operator: must be one of "
     "'In', 'NotIn', 'Exists' or 'DoesNotExist', got \"Gt\""),
    ("selector-in-without-values", docs(NODE, QUEUES, project(
        "p", "{nodePools: [{name: a100, nodeSelector: {matchExpressions: [{key: pool, operator: In}]}}]}")),
     "document 5 (Project p): spec.nodePools[0].nodeSelector.matchExpressions[0]: "
     "values must be given for In and NotIn, and only for them"),
    ("selector-exists-with-values", docs(NODE, QUEUES, project(
        "p", "{nodePools: [{name: a, nodeSelector: {matchExpressions: [{key: pool, operator: Exists, values: [x]}]}}]}")),
     "document 5 (Project p): spec.nodePools[0].nodeSelector.matchExpressions[0]: "
     "values must be given for In and NotIn, and only for them"),
    ("selector-label-not-string", docs(NODE, QUEUES, project(
        "p", "{nodePools: [{name: a, nodeSelector: {matchLabels: {pool: 3}}}]}")),
     "document 5 (Project p): spec.nodePools[0].nodeSelector.matchLabels.pool: must be a string, got 3"),
    ("empty-pool-name", docs(NODE, QUEUES, project("p", "{nodePools: [{name: '', nodeSelector: {}}]}")),
     "document 5 (Project p): spec.nodePools[0].name: must not be empty"),
    ("pool-without-selector", docs(NODE, QUEUES, project("p", "{nodePools: [{name: a100}]}")),
     "document 5 (Project p): spec.nodePools[0].nodeSelector: required field missing"),
    ("default-queue-not-listed", docs(NODE, QUEUES, project("p", "{queues: [team-a], defaultQueue: team-b}")),
     'document 5 (Project p): spec: defaultQueue must be one of queues'),
    ("unknown-queue", docs(NODE, QUEUES, project("p", "{queues: [team-a, team-z]}")),
     'document 5 (Project p): spec.queues[1]: unknown queue "team-z"'),
    ("queue-not-a-leaf", docs(NODE, QUEUES, project("p", "{queues: [research]}")),
     'document 5 (Project p): spec.queues[0]: queue "research" is not a leaf (it is the parent of "team-a")'),
    ("max-gpus-zero", docs(NODE, QUEUES, project("p", "{maxGPUsPerUser: 0}")),
     "document 5 (Project p): spec.maxGPUsPerUser: must be >= 1, got 0"),
    ("max-pending-negative", docs(NODE, QUEUES, project("p", "{maxPendingGangsPerUser: -1}")),
     "document 5 (Project p): spec.maxPendingGangsPerUser: must be >= 0, got -1"),
    ("unknown-field", docs(NODE, QUEUES, project("p", "{queue: [team-a]}")),
     "document 5 (Project p): spec.queue: unknown field"),
    ("two-projects-one-namespace", docs(NODE, QUEUES, project("a", "{namespaces: {names: [ml]}}"),
                                        project("b", "{namespaces: {selector: {matchLabels: {env: dev}}}}"),
                                        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {env: dev}}\n"),
     "document 6 (Project b): spec.namespaces: namespace ml is claimed by projects a, b"),
    ("duplicate-project", docs(NODE, QUEUES, project("a", "{}"), project("a", "{}")),
     "document 6 (Project a): metadata.name: duplicate Project a (first in document 5)"),
    ("namespace-labels-not-strings", docs(NODE, "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {a: [x]}}\n"),
     "document 2 (Namespace ml): metadata.labels.a: must be a string, got a list"),
    ("require-project-not-bool", docs(NODE, "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\n"
                                            "metadata: {name: c}\nspec: {requireProject: 'yes'}\n"),
     'document 2 (SchedulerConfig c): spec.requireProject: must be true or false, got "yes"'),
    ("pod-names-a-parent-queue", docs(NODE, QUEUES, project("p", "{namespaces: {names: [ml]}, queues: [team-a]}"),
                                      pod("x", "ml", "{gpufleet.dev/queue: research}")),
     'document 6 (Pod ml/x): metadata.labels.gpufleet.dev/queue: queue "research" is not a leaf '
     '(it is the parent of "team-a")'),
]


@pytest.mark.parametrize(("text", "expected"), [pytest.param(t, e, id=i) for i, t, e in BAD])
def test_bad_project_input_is_one_line_and_exit_2(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "snap.yaml"
    path.write_text(text)
    result = click.testing.CliRunner().invoke(main, ["replay", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"gpufleet replay: {path}: {expected}\n"
    with pytest.raises(InputError) as err:
        load_snapshot_text(text, "snap.yaml")
    assert str(err.value) == f"snap.yaml: {expected}"


def test_a_pod_naming_a_queue_its_project_does_not_allow_is_not_an_input_error() -> None:
    text = docs(NODE, QUEUES, project("p", "{namespaces: {names: [ml]}, queues: [team-a]}"),
                pod("x", "ml", "{gpufleet.dev/queue: team-b}"))
    snapshot = load_snapshot_text(text, "snap.yaml")
    assert [p.name for p in snapshot.projects] == ["p"]


def test_project_and_namespace_fields_are_read() -> None:
    doc = {
        "apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "ml-vision"},
        "spec": {
            "namespaces": {"names": ["vision"], "selector": {"matchLabels": {"team": "vision"}, "matchExpressions": [
                {"key": "env", "operator": "NotIn", "values": ["prod"]}]}},
            "queues": ["vision-train", "vision-infer"], "defaultQueue": "vision-train",
            "nodePools": [{"name": "a100", "nodeSelector": {"matchLabels": {"gpufleet.dev/pool": "a100"}}}],
            "priorityClasses": ["batch"], "allowNonPreemptible": True, "maxGPUsPerUser": 16,
            "maxPendingGangsPerUser": 0,
            "images": {"allowed": ["ghcr.io/acme/*"], "denied": ["docker.io/**"], "requireDigest": True},
            "volumes": {"kinds": ["persistentVolumeClaim"], "storageClasses": ["fast"], "claimNames": ["data-*"]},
        },
    }
    got = project_from_dict(doc)
    assert got == Project(
        name="ml-vision", namespace_names=("vision",),
        namespace_selector=LabelSelector((("team", "vision"),), (SelectorRequirement("env", "NotIn", ("prod",)),)),
        queues=("vision-train", "vision-infer"), default_queue="vision-train",  # type: ignore[arg-type]
        node_pools=(NodePool("a100", LabelSelector((("gpufleet.dev/pool", "a100"),))),),
        priority_classes=("batch",), allow_non_preemptible=True, max_gpus_per_user=16, max_pending_gangs_per_user=0,
        images=got.images, volumes=got.volumes,
    )
    assert (got.images.allowed, got.images.denied, got.images.require_digest) == (
        ("ghcr.io/acme/*",), ("docker.io/**",), True)
    assert (got.volumes.kinds, got.volumes.storage_classes, got.volumes.claim_names) == (
        ("persistentVolumeClaim",), ("fast",), ("data-*",))
    bare = project_from_dict({"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "b"}})
    assert bare == Project(name="b")

    text = docs(NODE, QUEUES, "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {team: x}}\n",
                "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nmetadata: {name: c}\nspec: {requireProject: true}\n",
                pod("x", "ml", "{gpufleet.dev/queue: team-a}",
                    "{gpufleet.dev/submitted-by: alice, gpufleet.dev/queue-grant: team-a}"))
    snapshot = load_snapshot_text(text, "snap.yaml")
    assert [(ns.name, dict(ns.labels)) for ns in snapshot.namespaces] == [("ml", {"team": "x"})]
    assert snapshot.config.require_project is True
    assert (snapshot.pods[0].submitted_by, snapshot.pods[0].queue_grant) == ("alice", "team-a")
