"""``gpufleet manifests``: a complete, valid, least-privilege install without Helm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from gpufleet.adapters._k8s_models import queue_from_dict
from gpufleet.cli import main
from gpufleet.kube.client.port import Kind
from gpufleet.kube.install.crds import CRD_KINDS, crd_yaml
from gpufleet.kube.install.manifests import InstallOptions, controller_rbac_rules, install_objects, write_chart_files
from gpufleet.kube.install.rbac import RULES

from .test_chart import _served
from .test_crds import KUBE_VERSIONS, api_server_errors

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "gpufleet"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["manifests", *args])
    return result.exit_code, result.stdout, result.stderr


def _docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


@pytest.fixture(scope="module")
def default_output() -> str:
    code, out, _ = _run()
    assert code == 0
    return out


def test_everything_is_there_crds_first(default_output: str) -> None:
    docs = _docs(default_output)
    kinds = [doc["kind"] for doc in docs]
    assert kinds[:len(CRD_KINDS)] == ["CustomResourceDefinition"] * len(CRD_KINDS)
    assert kinds.index("Namespace") == len(CRD_KINDS)
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment",
                 "Service", "PriorityClass", "Queue"):  # fmt: skip
        assert kind in kinds
    assert {(d["metadata"]["name"], d["value"]) for d in docs if d["kind"] == "PriorityClass"} == {
        ("train", 50), ("build", 100), ("inference", 125)}  # fmt: skip


def test_the_crds_are_printed_byte_for_byte_as_the_chart_stores_them(default_output: str) -> None:
    for kind in CRD_KINDS:
        assert f"---\n{crd_yaml(kind)}---\n" in default_output
    code, crds_only, _ = _run("--crds-only")
    assert code == 0
    assert crds_only == "".join(f"---\n{crd_yaml(kind)}" for kind in CRD_KINDS)
    assert default_output.startswith(crds_only)


@pytest.mark.parametrize("version", (*KUBE_VERSIONS, "1.30.0"))
def test_every_builtin_object_is_valid_kubernetes(default_output: str, version: str) -> None:
    for doc in _docs(default_output):
        if doc["apiVersion"].startswith("gpufleet.dev/") or not _served(doc, version):
            continue
        kubernetes_validate.validate(doc, version, strict=True)


def test_older_clusters_can_leave_the_admission_policy_out() -> None:
    code, out, _ = _run("--no-admission-policy")
    assert code == 0
    kinds = {doc["kind"] for doc in _docs(out)}
    assert "ValidatingAdmissionPolicy" not in kinds and "ValidatingAdmissionPolicyBinding" not in kinds
    for doc in _docs(out):
        if not doc["apiVersion"].startswith("gpufleet.dev/"):
            kubernetes_validate.validate(doc, KUBE_VERSIONS[0], strict=True)


def test_the_example_queues_are_valid_for_the_crd_and_the_loader(default_output: str) -> None:
    queues = [doc for doc in _docs(default_output) if doc["kind"] == "Queue"]
    assert len(queues) >= 3
    for queue in queues:
        assert api_server_errors(queue) == []
        queue_from_dict(queue)
    parents = {q["metadata"]["name"]: q["spec"].get("parent") for q in queues}
    assert all(parent is None or parent in parents for parent in parents.values())


def test_the_controller_deployment(default_output: str) -> None:
    [deploy] = [d for d in _docs(default_output) if d["kind"] == "Deployment" and "controller" in d["metadata"]["name"]]
    spec = deploy["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    [container] = pod["containers"]
    assert "--leader-elect" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"].keys() == {"cpu", "memory"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert {p["name"] for p in container["ports"]} >= {"metrics", "health"}
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= spec["template"]["metadata"]["labels"].items()
    [service] = [d for d in _docs(default_output) if d["kind"] == "Service" and "metrics" in d["metadata"]["name"]]
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_rbac_is_least_privilege(default_output: str) -> None:
    docs = _docs(default_output)
    rules = controller_rbac_rules()
    [cluster_role] = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpufleet-controller"]
    [role] = [d for d in docs if d["kind"] == "Role"]
    assert cluster_role["rules"] == list(rules.cluster)
    assert role["rules"] == list(rules.leader_election)
    for rule in cluster_role["rules"] + role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        assert "secrets" not in rule["resources"]
    assert all(rule["resources"] == ["leases"] for rule in role["rules"])
    assert not any("leases" in rule["resources"] for rule in cluster_role["rules"])
    [namespace] = [d for d in docs if d["kind"] == "Namespace"]
    assert role["metadata"]["namespace"] == namespace["metadata"]["name"]


def test_namespace_and_image_options_reach_every_object() -> None:
    code, out, _ = _run("--namespace", "sched", "--image", "registry.local/gpufleet@sha256:abc", "--no-examples")
    assert code == 0
    docs = _docs(out)
    assert not any(d["kind"] in ("Queue", "PriorityClass") for d in docs)
    cluster_scoped = {"CustomResourceDefinition", "Namespace", "ClusterRole", "ClusterRoleBinding",
                      "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for doc in docs:
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"]["namespace"] == "sched", doc["kind"]
        for subject in doc.get("subjects", []):
            assert subject["namespace"] == "sched"
    images = [c["image"] for d in docs if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]]
    assert images and set(images) == {"registry.local/gpufleet@sha256:abc"}


@pytest.mark.parametrize(
    ("args", "field"),
    [(["--namespace", "Bad_NS"], "--namespace"), (["--namespace", ""], "--namespace"),
     (["--image", "img with space"], "--image"), (["--image", "x\ny"], "--image"),
     (["--database", "ledger.db"], "--database"), (["--database", "mysql://db/ledger"], "--database"),
     (["--database", "postgresql+psycopg://u:secret@db/ledger"], "--database"),
     (["--cost-centre-labels", "team"], "--cost-centre-labels"),
     (["--telemetry-prometheus", "http://p:9090"], "--telemetry-prometheus"),
     (["--database", "/var/lib/gpufleet/l.db", "--telemetry-exporters", "x:9400"], "--telemetry-exporters"),
     (["--database", "/var/lib/gpufleet/l.db", "--telemetry-exporters", "http://x/metrics",
       "--telemetry-prometheus", "http://p"], "--telemetry-exporters"),
     (["--database", "/var/lib/gpufleet/l.db", "--ledger-volume-size", "lots"], "--ledger-volume-size"),
     (["--database", "postgresql+psycopg://u@db/l", "--database-password-secret", "Bad_Name"],
      "--database-password-secret")],
)
def test_bad_options_give_one_line_and_exit_2(args: list[str], field: str) -> None:
    code, out, err = _run(*args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and field in err and "Traceback" not in err


def test_update_chart_writes_the_generated_files_and_is_idempotent(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: x\nversion: 0.1.0\n")
    code, _, err = _run("--update-chart", str(chart))
    assert code == 0, err
    files = sorted(p.relative_to(chart).as_posix() for p in chart.rglob("*.yaml") if p.name != "Chart.yaml")
    assert files == ["files/admission/pod-annotations-policy.yaml",
                     "files/crds/gpufleet.dev_podgroups.yaml", "files/crds/gpufleet.dev_projects.yaml",
                     "files/crds/gpufleet.dev_queues.yaml", "files/crds/gpufleet.dev_resourceflavors.yaml",
                     "files/crds/gpufleet.dev_schedulerconfigs.yaml", "files/prometheus/rules.yaml",
                     "files/rbac/agent-rules.yaml", "files/rbac/cluster-rules.yaml",
                     "files/rbac/leader-election-rules.yaml", "files/rbac/tenancy-roles.yaml",
                     "files/rbac/webhook-rules.yaml", "files/webhook/gpu-visibility.yaml"]  # fmt: skip
    before = {p: p.read_bytes() for p in chart.rglob("*.yaml")}
    assert _run("--update-chart", str(chart))[0] == 0
    assert {p: p.read_bytes() for p in chart.rglob("*.yaml")} == before
    assert _run("--update-chart", str(tmp_path / "nothing"))[0] == 2


def test_the_chart_in_the_repository_is_up_to_date(tmp_path: Path) -> None:
    """The chart's generated files are what `gpufleet manifests --update-chart` writes today."""
    fresh = {path.relative_to(tmp_path): path.read_bytes() for path in write_chart_files(tmp_path)}
    committed = {path.relative_to(CHART): path.read_bytes() for path in (CHART / "files").rglob("*") if path.is_file()}
    stale = sorted(str(path) for path in fresh.keys() | committed.keys() if fresh.get(path) != committed.get(path))
    assert stale == [], f"stale chart files {stale}: run `gpufleet manifests --update-chart deploy/helm/gpufleet`"


def test_lease_rules_are_split_into_the_namespaced_role() -> None:
    rules = controller_rbac_rules()
    assert rules.leader_election, "gpufleet.kube.install.rbac.RULES has no Lease rule"
    assert len(rules.cluster) + len(rules.leader_election) == len(RULES)
    objects = install_objects(InstallOptions(namespace="ns", examples=False))
    [role] = [o for o in objects if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "ns"
    assert role["rules"] == [rule for rule in map(dict, RULES) if rule["resources"] == ["leases"]]
    [cluster_role] = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "gpufleet-controller"]
    assert cluster_role["rules"] == [rule for rule in map(dict, RULES) if rule["resources"] != ["leases"]]


def test_the_webhook_is_opt_in_and_valid(default_output: str) -> None:
    assert "MutatingWebhookConfiguration" not in {d["kind"] for d in _docs(default_output)}
    code, out, _ = _run("--webhook", "--namespace", "sched")
    assert code == 0
    docs = _docs(out)
    [config] = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    [hook, tenancy] = config["webhooks"]  # the fractional entry, and the tenancy entry (--webhook-tenancy)
    assert hook["clientConfig"]["service"] == {"name": "gpufleet-webhook", "namespace": "sched", "path": "/mutate",
                                               "port": 443}
    assert tenancy["clientConfig"]["service"] == hook["clientConfig"]["service"]
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "sched/gpufleet-webhook"}
    [certificate] = [d for d in docs if d["kind"] == "Certificate"]
    [deploy] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpufleet-webhook"]
    secret = deploy["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"]
    assert certificate["spec"]["secretName"] == secret
    assert "gpufleet-webhook.sched.svc" in certificate["spec"]["dnsNames"]
    for doc in docs:
        if doc["apiVersion"].startswith(("gpufleet.dev/", "cert-manager.io/")):
            continue  # ours are checked against the CRDs; cert-manager's schemas are not bundled
        for version in ("1.30.0", "1.37.0"):  # matchConditions: Kubernetes >= 1.28
            kubernetes_validate.validate(doc, version, strict=True)


def test_volume_rules_are_least_privilege() -> None:
    """The controller reads claims, PVs and classes through informers only (list, watch: no get),
    and writes claims and PVs by merge patch only (a claim's selected-node, a PV's claimRef)."""
    storage = {(kind.group, kind.plural) for kind in (Kind.PERSISTENT_VOLUME_CLAIM, Kind.PERSISTENT_VOLUME,
                                                      Kind.STORAGE_CLASS)}
    granted = {(group, resource, verb) for rule in RULES for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"] if (group, resource) in storage}
    assert granted == {
        ("", "persistentvolumeclaims", "list"), ("", "persistentvolumeclaims", "watch"),
        ("", "persistentvolumeclaims", "patch"),
        ("", "persistentvolumes", "list"), ("", "persistentvolumes", "watch"), ("", "persistentvolumes", "patch"),
        ("storage.k8s.io", "storageclasses", "list"), ("storage.k8s.io", "storageclasses", "watch"),
    }
    for resource in ("persistentvolumeclaims/status", "persistentvolumes/status"):
        assert not any(resource in rule["resources"] for rule in RULES)


# --- the usage ledger (as the chart's controller.ledger and controller.telemetry values) ----------


def _controller_parts(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    [deploy] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpufleet-controller"]
    return deploy, deploy["spec"]["template"]["spec"]["containers"][0]


def _parsed_by_the_controller(args: list[str]) -> dict[str, Any]:
    """The rendered arguments read by ``gpufleet controller``'s own parser (its options, not its body)."""
    from gpufleet.commands.controller import controller

    assert args[0] == "controller"
    with controller.make_context("controller", list(args[1:])) as ctx:
        return dict(ctx.params)


def test_an_sqlite_ledger_on_a_claim_with_telemetry() -> None:
    code, out, err = _run("--database", "/var/lib/gpufleet/ledger.db", "--cost-centre-labels", "team, cost-center",
                          "--ledger-buffer", "5000", "--telemetry-exporters", "http://a:9400/metrics,http://b:9400/m",
                          "--telemetry-interval", "15", "--ledger-volume-size", "20Gi")
    assert code == 0, err
    docs = _docs(out)
    deploy, container = _controller_parts(docs)
    params = _parsed_by_the_controller(container["args"])
    assert (params["database"], params["cost_centre_labels"], params["ledger_buffer"]) == (
        "/var/lib/gpufleet/ledger.db", "team,cost-center", 5000)
    assert (params["telemetry_exporters"], params["telemetry_prometheus"], params["telemetry_interval"]) == (
        "http://a:9400/metrics,http://b:9400/m", None, 15.0)
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"] == {"type": "Recreate"}
    assert deploy["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 65532
    [claim] = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    assert volumes["ledger"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert {"name": "ledger", "mountPath": "/var/lib/gpufleet"} in container["volumeMounts"]
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]  # one replica: nothing to keep up
    for version in KUBE_VERSIONS:
        for doc in docs:
            if doc["kind"] in ("Deployment", "PersistentVolumeClaim"):
                kubernetes_validate.validate(doc, version, strict=True)


def test_a_postgres_ledger_keeps_two_replicas_and_takes_its_password_from_a_secret() -> None:
    url = "postgresql+psycopg://gpufleet@db.example:5432/ledger"
    code, out, err = _run("--database", url, "--database-password-secret", "ledger-db",
                          "--telemetry-prometheus", "http://prometheus:9090")
    assert code == 0, err
    docs = _docs(out)
    deploy, container = _controller_parts(docs)
    params = _parsed_by_the_controller(container["args"])
    assert (params["database"], params["telemetry_prometheus"], params["cost_centre_labels"]) == (
        url, "http://prometheus:9090", "")
    assert deploy["spec"]["replicas"] == 2 and "strategy" not in deploy["spec"]
    assert {"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "ledger-db", "key": "password"}}} in (
        container["env"])
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert [d for d in docs if d["kind"] == "PodDisruptionBudget"]


def test_without_a_database_the_controller_gets_no_ledger_flag(default_output: str) -> None:
    _, container = _controller_parts(_docs(default_output))
    assert not any(a.startswith(("--database", "--ledger", "--telemetry", "--cost-centre")) for a in container["args"])
    assert _parsed_by_the_controller(container["args"])["database"] is None


def test_every_rendered_controller_argument_is_one_the_controller_accepts() -> None:
    """Whatever ledger `gpufleet manifests` renders, the controller's parser takes every argument as
    rendered (no unknown flag, no bad value) and reads back the values given."""
    from gpufleet.kube.install.manifests import LedgerInstall, controller_args

    for ledger in (None, LedgerInstall("/data/l.db", ("a", "b.c/d"), 1, ("http://x/m",), telemetry_interval=1),
                   LedgerInstall("postgresql+psycopg://u@h/d", telemetry_prometheus="https://p", password_secret="s")):
        params = _parsed_by_the_controller(controller_args(ledger))
        assert params["leader_elect"] is True
        if ledger is not None:
            assert params["database"] == ledger.database
            assert params["ledger_buffer"] == ledger.buffer_events
            assert params["cost_centre_labels"] == ",".join(ledger.cost_centre_labels)
            assert (params["telemetry_prometheus"] or "") == ledger.telemetry_prometheus
