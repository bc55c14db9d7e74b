"""`gpufleet snapshot` of tenancy objects: Projects, the Namespaces their selectors read, and the RBAC
objects that concern gpufleet.dev; `gpufleet policy check` decides from such a snapshot."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.kube.client.port import Kind
from gpufleet.kube.inspect.snapshot import ClusterSnapshot, read_cluster
from gpufleet.testing.fake_cluster import FakeCluster

from .cluster_objects import NOISE_META, cluster_objects, fake_cluster

RBAC = "rbac.authorization.k8s.io/v1"


def _rule(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def _binding(kind: str, name: str, role_kind: str, role: str, user: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **NOISE_META}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": RBAC, "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]}  # fmt: skip


def tenancy_objects() -> dict[Kind, list[dict[str, Any]]]:
    objects = cluster_objects()
    objects[Kind.PROJECT] = [
        {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project",
         "metadata": {"name": "team-a", **NOISE_META, "annotations": {"kubectl.kubernetes.io/last-applied": "{}"}},
         "spec": {"namespaces": {"selector": {"matchLabels": {"team": "a"}}}, "queues": ["team-a"]},
         "status": {"namespaceCount": 1}},
        {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "team-b"},
         "spec": {"namespaces": {"names": ["team-b"]}, "queues": ["team-b"]}},
    ]  # fmt: skip
    objects[Kind.NAMESPACE] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, **NOISE_META, "labels": labels},
         "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        for ns, labels in (("team-a", {"kubernetes.io/metadata.name": "team-a", "team": "a"}),
                           ("team-b", {"kubernetes.io/metadata.name": "team-b"}))
    ]  # fmt: skip
    objects[Kind.CLUSTER_ROLE] = [
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "use-team-b", **NOISE_META},
         "rules": [_rule(["gpufleet.dev"], ["queues"], ["use"], ["team-b"])]},
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "cluster-admin"},
         "rules": [_rule(["*"], ["*"], ["*"])]},
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "pod-reader"},
         "rules": [_rule([""], ["pods"], ["get"])]},
    ]  # fmt: skip
    objects[Kind.ROLE] = [
        {"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "groups", "namespace": "team-a"},
         "rules": [_rule(["gpufleet.dev"], ["podgroups"], ["create"])]},
        {"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "groups", "namespace": "team-b"},
         "rules": [_rule([""], ["configmaps"], ["get"])]},
    ]  # fmt: skip
    objects[Kind.CLUSTER_ROLE_BINDING] = [
        _binding("ClusterRoleBinding", "admins", "ClusterRole", "cluster-admin", "root"),
        _binding("ClusterRoleBinding", "readers", "ClusterRole", "pod-reader", "alice"),
    ]
    objects[Kind.ROLE_BINDING] = [
        _binding("RoleBinding", "alice-uses-b", "ClusterRole", "use-team-b", "alice", "team-a"),
        _binding("RoleBinding", "groups", "Role", "groups", "alice", "team-a"),
        _binding("RoleBinding", "groups", "Role", "groups", "bob", "team-b"),  # a Role not about gpufleet
        _binding("RoleBinding", "readers", "ClusterRole", "pod-reader", "bob", "team-b"),
    ]
    return objects


def read(cluster: FakeCluster) -> ClusterSnapshot:
    return asyncio.run(read_cluster(cluster.client("snapshot")))


def _names(snap: ClusterSnapshot, kind: str) -> list[str]:
    out = []
    for doc in snap.documents:
        if doc["kind"] == kind:
            meta = doc["metadata"]
            out.append(f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"])
    return out


def test_projects_namespaces_and_the_rbac_objects_that_concern_gpufleet() -> None:
    snap = read(fake_cluster(tenancy_objects()))
    assert snap.warnings == ()
    assert _names(snap, "Project") == ["team-a", "team-b"]
    assert _names(snap, "Namespace") == ["team-a", "team-b"]
    assert _names(snap, "ClusterRole") == ["cluster-admin", "use-team-b"]
    assert _names(snap, "Role") == ["team-a/groups"]
    assert _names(snap, "ClusterRoleBinding") == ["admins"]
    assert _names(snap, "RoleBinding") == ["team-a/alice-uses-b", "team-a/groups"]
    kinds = [doc["kind"] for doc in snap.documents]
    assert kinds[kinds.index("Namespace"):] == [
        "Namespace", "Namespace", "Project", "Project", "ClusterRole", "ClusterRole", "Role",
        "ClusterRoleBinding", "RoleBinding", "RoleBinding"]  # fmt: skip
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in snap.documents}
    # stripped: no status, no managedFields, no foreign annotations; what RBAC and selectors read is kept
    assert by_name["Project", "team-a"] == {
        "apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "team-a"},
        "spec": {"namespaces": {"selector": {"matchLabels": {"team": "a"}}}, "queues": ["team-a"]}}
    assert by_name["Namespace", "team-a"] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a", "team": "a"}}}
    assert by_name["ClusterRole", "use-team-b"] == {
        "apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "use-team-b"},
        "rules": [{"apiGroups": ["gpufleet.dev"], "resourceNames": ["team-b"], "resources": ["queues"], "verbs": ["use"]}]}
    assert by_name["RoleBinding", "alice-uses-b"] == {
        "apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "alice-uses-b", "namespace": "team-a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "use-team-b"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}  # fmt: skip
    assert read(fake_cluster(tenancy_objects())).to_yaml() == snap.to_yaml()  # same state, same bytes


def test_without_projects_the_namespaces_are_still_written() -> None:
    """Namespaces are written whether or not there are Projects: namespaceSelectors of inter-pod
    terms match their labels too (docs/semantics-notes.md, "Inter-pod affinity")."""
    objects = tenancy_objects()
    del objects[Kind.PROJECT]
    snap = read(fake_cluster(objects))
    assert _names(snap, "Project") == [] and _names(snap, "Namespace") == ["team-a", "team-b"]
    assert _names(snap, "ClusterRole") == ["cluster-admin", "use-team-b"]


def test_a_reader_without_rbac_permissions_gets_the_rest_and_a_warning() -> None:
    cluster = fake_cluster(tenancy_objects())
    cluster.fail("list", 403, kind=Kind.CLUSTER_ROLE, message='clusterroles is forbidden: User "dev" cannot list')
    snap = read(cluster)
    assert snap.warnings == ('not allowed to list ClusterRole objects (clusterroles is forbidden: User "dev" cannot '
                             "list); the snapshot has none",)  # fmt: skip
    assert _names(snap, "ClusterRole") == []
    assert _names(snap, "Role") == ["team-a/groups"] and _names(snap, "Project") == ["team-a", "team-b"]


def test_policy_check_decides_from_the_snapshot(tmp_path: Path) -> None:
    (tmp_path / "snapshot.yaml").write_text(read(fake_cluster(tenancy_objects())).to_yaml())
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "borrow", "namespace": "team-a", "labels": {"gpufleet.dev/queue": "team-b"}},
           "spec": {"schedulerName": "gpufleet", "containers": [{"name": "main", "image": "x"}]}}  # fmt: skip
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))

    def check(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, ["policy", "check", str(tmp_path / "pod.yaml"),
                                           "--snapshot", str(tmp_path / "snapshot.yaml"), *args])  # fmt: skip
        return result.exit_code, result.stdout + result.stderr

    assert check() == (1, "denied: project team-a does not allow queue team-b (allowed: team-a)\n")
    assert check("--as", "alice") == (
        0, "allowed: pod team-a/borrow (project team-a) may use queue team-b, granted to alice by RBAC\n")
    assert check("--as", "bob") == (1, "denied: project team-a does not allow queue team-b (allowed: team-a)\n")
    assert check("--as", "root") == (
        0, "allowed: pod team-a/borrow (project team-a) may use queue team-b, granted to root by RBAC\n")


def test_over_http_the_snapshot_is_the_in_memory_one() -> None:
    """The lightkube adapter lists Namespaces and the (namespaced and cluster-wide) RBAC kinds at their
    real paths, served by the HTTP emulator."""
    from gpufleet.kube.client.lightkube_api import connect
    from gpufleet.testing.emulator import ApiServerEmulator

    async def over_http() -> ClusterSnapshot:
        async with ApiServerEmulator(store=fake_cluster(tenancy_objects())) as emulator:
            api = connect(server=emulator.url_text, timeout=10.0)
            try:
                return await read_cluster(api)
            finally:
                await api.close()

    assert asyncio.run(over_http()).to_yaml() == read(fake_cluster(tenancy_objects())).to_yaml()
