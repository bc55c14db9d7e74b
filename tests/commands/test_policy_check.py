"""`gpufleet policy check POD.yaml --snapshot S.yaml [--as USER --as-group G]`: the tenancy admission's
decision offline. Exit 0 allowed, 1 denied, 2 bad input (one line, no traceback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpufleet.cli import main

# Three teams (docs/tenancy.md): vision trains on its own queue, NLP has its own, inference may run
# non-preemptible work; team-open is nobody's.
SNAPSHOT: list[dict[str, Any]] = [
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "train"}, "value": 50},
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "inference"}, "value": 125},
    *({"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Queue", "metadata": {"name": q}}
      for q in ("vision-train", "vision-infer", "nlp", "serving", "team-open")),
    {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "ml-vision"},
     "spec": {"namespaces": {"names": ["vision"]}, "queues": ["vision-train", "vision-infer"],
              "defaultQueue": "vision-train", "priorityClasses": ["train"]}},
    {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "nlp"},
     "spec": {"namespaces": {"selector": {"matchLabels": {"team": "nlp"}}}, "queues": ["nlp"], "defaultQueue": "nlp"}},
    {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "inference"},
     "spec": {"namespaces": {"names": ["serving"]}, "queues": ["serving"], "allowNonPreemptible": True}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nlp-research", "labels": {"team": "nlp"}}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "use-nlp"},
     "rules": [{"apiGroups": ["gpufleet.dev"], "resources": ["queues"], "resourceNames": ["nlp"], "verbs": ["use"]}]},
    # alice may use the nlp queue for pods of namespace vision; the group borrowers anywhere
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
     "metadata": {"name": "alice-uses-nlp", "namespace": "vision"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "use-nlp"},
     "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "borrowers"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "use-nlp"},
     "subjects": [{"kind": "Group", "name": "borrowers", "apiGroup": "rbac.authorization.k8s.io"}]},
]  # fmt: skip


def pod(name: str = "train-0", namespace: str = "vision", queue: str | None = None, *,
        priority_class: str | None = None, preemptible: str | None = None,
        submitted_by: str | None = None) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if queue is not None:
        labels["gpufleet.dev/queue"] = queue
    if preemptible is not None:
        labels["gpufleet.dev/preemptible"] = preemptible
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if submitted_by is not None:
        meta["annotations"] = {"gpufleet.dev/submitted-by": submitted_by}
    spec: dict[str, Any] = {"schedulerName": "gpufleet",
                            "containers": [{"name": "main", "image": "ghcr.io/acme/train:1",
                                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}  # fmt: skip
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def run(tmp_path: Path, the_pod: dict[str, Any] | str, *args: str,
        snapshot: list[dict[str, Any]] | str = SNAPSHOT) -> tuple[int, str, str]:
    pod_file, snap_file = tmp_path / "pod.yaml", tmp_path / "snapshot.yaml"
    pod_file.write_text(the_pod if isinstance(the_pod, str) else yaml.safe_dump(the_pod))
    snap_file.write_text(snapshot if isinstance(snapshot, str) else yaml.safe_dump_all(snapshot))
    result = CliRunner().invoke(main, ["policy", "check", str(pod_file), "--snapshot", str(snap_file), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(("the_pod", "args", "line"), [
    (pod(queue="vision-train"), (), "allowed: pod vision/train-0 (project ml-vision) may use queue vision-train"),
    (pod(), (), "allowed: pod vision/train-0 (project ml-vision) may use queue vision-train"),  # defaultQueue
    (pod(namespace="nlp-research"), (), "allowed: pod nlp-research/train-0 (project nlp) may use queue nlp"),
    (pod(namespace="other", queue="team-open"), (), "allowed: pod other/train-0 (no project) may use queue team-open"),
    (pod(queue="nlp"), ("--as", "alice"),
     "allowed: pod vision/train-0 (project ml-vision) may use queue nlp, granted to alice by RBAC"),
    (pod(queue="nlp", submitted_by="alice"), (),
     "allowed: pod vision/train-0 (project ml-vision) may use queue nlp, granted to alice by RBAC"),
    (pod(namespace="other", queue="nlp"), ("--as", "bob", "--as-group", "borrowers"),
     "allowed: pod other/train-0 (no project) may use queue nlp, granted to bob by RBAC"),
    (pod(namespace="serving", queue="serving", priority_class="inference"), (),
     "allowed: pod serving/train-0 (project inference) may use queue serving"),
    (pod(queue="vision-train", priority_class="train"), (),
     "allowed: pod vision/train-0 (project ml-vision) may use queue vision-train"),
])  # fmt: skip
def test_allowed(tmp_path: Path, the_pod: dict[str, Any], args: tuple[str, ...], line: str) -> None:
    assert run(tmp_path, the_pod, *args) == (0, line + "\n", "")


@pytest.mark.parametrize(("the_pod", "args", "line"), [
    (pod(queue="nlp"), (), "denied: project ml-vision does not allow queue nlp (allowed: vision-train, vision-infer)"),
    (pod(queue="nlp"), ("--as", "mallory"),
     "denied: project ml-vision does not allow queue nlp (allowed: vision-train, vision-infer)"),
    (pod(queue="nlp", submitted_by="alice"), ("--as", "mallory"),  # --as wins over a (forgeable) annotation
     "denied: project ml-vision does not allow queue nlp (allowed: vision-train, vision-infer)"),
    # alice's RoleBinding is in vision: it does not reach pods of other namespaces
    (pod(namespace="other", queue="nlp"), ("--as", "alice"), "denied: queue nlp belongs to project nlp, not to namespace other's"),
    (pod(namespace="other", queue="serving"), ("--as", "bob", "--as-group", "borrowers"),
     "denied: queue serving belongs to project inference, not to namespace other's"),
    (pod(queue="vision-train", priority_class="inference"), (),
     "denied: project ml-vision does not allow priority class inference (allowed: train)"),
    (pod(queue="vision-train", preemptible="false"), (), "denied: project ml-vision does not allow non-preemptible work"),
    (pod(namespace="nlp-research", priority_class="inference"), (), "denied: project nlp does not allow non-preemptible work"),
])  # fmt: skip
def test_denied(tmp_path: Path, the_pod: dict[str, Any], args: tuple[str, ...], line: str) -> None:
    assert run(tmp_path, the_pod, *args) == (1, line + "\n", "")


def test_a_namespace_claimed_twice_is_bad_input(tmp_path: Path) -> None:
    """As in replay (docs/semantics-notes.md, "Projects"): the snapshot itself is refused."""
    claim = {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "squatter"},
             "spec": {"namespaces": {"names": ["vision"]}}}  # fmt: skip
    code, out, err = run(tmp_path, pod(queue="vision-train"), snapshot=[*SNAPSHOT, claim])
    assert (code, out) == (2, "")
    assert err.endswith("(Project squatter): spec.namespaces: namespace vision is claimed by projects ml-vision, squatter\n")


def test_without_projects_every_queue_is_open(tmp_path: Path) -> None:
    plain = [doc for doc in SNAPSHOT if doc["kind"] in ("Queue", "PriorityClass")]
    assert run(tmp_path, pod(queue="nlp", preemptible="false"), snapshot=plain) == (
        0, "allowed: pod vision/train-0 (no project) may use queue nlp\n", "")


BAD_INPUT = {
    "no pod file": (None, SNAPSHOT, "{pod}: cannot read: No such file or directory"),
    "malformed pod yaml": ("apiVersion: v1\nkind: Pod\nmetadata: {name: [x\n", SNAPSHOT, "{pod}: line 4: malformed YAML: did not find expected ',' or ']'"),
    "two pods": (yaml.safe_dump_all([pod(), pod("b")]), SNAPSHOT, "{pod}: expected one Pod document, found 2 documents"),
    "not a pod": (yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}), SNAPSHOT,
                  '{pod}: document 1: expected apiVersion v1, kind Pod, got "v1" "Node"'),
    "bad pod field": (yaml.safe_dump({**pod(), "metadata": {"name": "x", "namespace": "vision",
                                                            "annotations": {"gpufleet.dev/gpu-blocks": "150"}}}),
                      SNAPSHOT, "{pod}: document 1 (Pod vision/x): metadata.annotations.gpufleet.dev/gpu-blocks: "
                                'must be an integer 1..100, got "150"'),
    "bad project": (yaml.safe_dump(pod()), [*SNAPSHOT, {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project",
                                                        "metadata": {"name": "p"}, "spec": {"defaultQueue": "x"}}],
                    "{snapshot}: document 15 (Project p): spec: defaultQueue must be one of queues"),
    "bad project selector": (yaml.safe_dump(pod()), [*SNAPSHOT, {
        "apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "p"},
        "spec": {"namespaces": {"selector": {"matchExpressions": [{"key": "team", "operator": "Equals"}]}}}}],
        "{snapshot}: document 15 (Project p): spec.namespaces.selector.matchExpressions[0].operator: must be one of "
        "'In', 'NotIn', 'Exists' or 'DoesNotExist', got \"Equals\""),
    "bad image glob": (yaml.safe_dump(pod()), [*SNAPSHOT, {
        "apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "p"},
        "spec": {"images": {"allowed": ["ghcr.io/ acme"]}}}],
        "{snapshot}: document 15 (Project p): spec.images.allowed[0]: must match ^\\S+$, got \"ghcr.io/ acme\""),
    "two projects of one name": (yaml.safe_dump(pod()), [*SNAPSHOT, SNAPSHOT[7]],
                                 "{snapshot}: document 15 (Project ml-vision): metadata.name: duplicate Project "
                                 "ml-vision (first in document 8)"),
    "bad binding": (yaml.safe_dump(pod()), [*SNAPSHOT, {"apiVersion": "rbac.authorization.k8s.io/v1",
                                                        "kind": "ClusterRoleBinding", "metadata": {"name": "x"}}],
                    "{snapshot}: document 15 (ClusterRoleBinding x): roleRef: required field missing"),
    "queue cycle (the replay loader's check)": (yaml.safe_dump(pod()), [*SNAPSHOT, *(
        {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Queue", "metadata": {"name": a}, "spec": {"parent": b}}
        for a, b in (("x", "y"), ("y", "x")))],
        "{snapshot}: document 15 (Queue x): spec.parent: cycle in the queue tree: x -> y -> x"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_exits_2_with_one_line(tmp_path: Path, case: str) -> None:
    the_pod, snapshot, message = BAD_INPUT[case]
    code, out, err = run(tmp_path, the_pod or "", snapshot=snapshot)
    if the_pod is None:
        (tmp_path / "pod.yaml").unlink()
        result = CliRunner().invoke(main, ["policy", "check", str(tmp_path / "pod.yaml"),
                                           "--snapshot", str(tmp_path / "snapshot.yaml")])  # fmt: skip
        code, out, err = result.exit_code, result.stdout, result.stderr
    assert (code, out) == (2, "")
    assert err == "gpufleet policy check: " + message.format(pod=tmp_path / "pod.yaml", snapshot=tmp_path / "snapshot.yaml") + "\n"


@pytest.mark.parametrize(("args", "message"), [
    (("--as", " "), "gpufleet policy check: --as: must not be empty"),
    (("--as-group", ""), "gpufleet policy check: --as-group: must not be empty"),
    ((), "gpufleet policy check: Missing option '--snapshot'."),
])  # fmt: skip
def test_bad_options_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod()))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump_all(SNAPSHOT))
    snapshot = () if not args else ("--snapshot", str(tmp_path / "s.yaml"))
    result = CliRunner().invoke(main, ["policy", "check", str(tmp_path / "pod.yaml"), *snapshot, *args])
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", message + "\n")


def test_the_command_is_in_the_registry() -> None:
    from gpufleet.commands import COMMANDS, subcommands

    assert COMMANDS["policy check"] == "gpufleet.commands.policy_check:check"
    assert subcommands("policy") == {"check": "gpufleet.commands.policy_check:check"}
