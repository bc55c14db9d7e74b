"""The Helm chart, rendered and linted offline by Helm's own Go code (helm-python-sdk, a dev extra).

No helm binary is needed: ``helm_python`` binds Helm v4's Go SDK (libhelm_c) through ctypes, so
``render`` and ``lint`` below are what ``helm template`` and ``helm lint`` do.
"""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpufleet.adapters._k8s_models import queue_from_dict
from gpufleet.kube.install.crds import CRD_KINDS, crd, crd_file_name, crd_yaml
from gpufleet.kube.install.manifests import InstallOptions, LedgerInstall, controller_rbac_rules, install_objects

from .test_crds import KUBE_VERSIONS, api_server_errors

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) renders the chart offline")

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "gpufleet"
RELEASE = "gpufleet"
NAMESPACE = "gpufleet-system"
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/version", "app.kubernetes.io/managed-by")


def _render_files(values: dict[str, Any] | None = None, *, upgrade: bool = False) -> dict[str, str]:
    with helm.Chart.load(str(CHART)) as chart:
        rendered: dict[str, str] = chart.render(values, name=RELEASE, namespace=NAMESPACE,
                                                is_install=not upgrade, is_upgrade=upgrade)  # fmt: skip
    return rendered


def render(values: dict[str, Any] | None = None, *, upgrade: bool = False) -> list[dict[str, Any]]:
    """The objects the chart installs (what `helm template` prints, parsed)."""
    docs = []
    for path, text in sorted(_render_files(values, upgrade=upgrade).items()):
        if path.endswith(".yaml") or path.endswith(".yml"):
            docs += [doc for doc in yaml.safe_load_all(text) if doc]
    return docs


def _by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def _controller(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [deploy] = [d for d in _by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-controller")]
    return deploy


@pytest.fixture(scope="module")
def default_docs() -> list[dict[str, Any]]:
    return render()


# --- generated files ------------------------------------------------------------------------------


def test_the_chart_stores_the_crds_byte_for_byte_as_gpufleet_manifests_prints_them() -> None:
    for kind in CRD_KINDS:
        assert (CHART / "files" / "crds" / crd_file_name(kind)).read_text(encoding="utf-8") == crd_yaml(kind)


def test_the_chart_stores_the_controller_rules() -> None:
    rules = controller_rbac_rules()
    stored = yaml.safe_load((CHART / "files" / "rbac" / "cluster-rules.yaml").read_text(encoding="utf-8"))
    assert stored == list(rules.cluster)
    stored = yaml.safe_load((CHART / "files" / "rbac" / "leader-election-rules.yaml").read_text(encoding="utf-8"))
    assert stored == list(rules.leader_election)


# --- lint -----------------------------------------------------------------------------------------


def _lint_problems(chart: Path, values: dict[str, Any] | None = None) -> list[str]:
    report = helm.lint(str(chart), values, strict=True, namespace=NAMESPACE)
    problems = [str(error) for error in report["errors"]]
    problems += [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]
    return problems


@pytest.mark.parametrize(
    "values",
    [None, {"crds": {"install": False}, "priorityClasses": {"create": False}, "rbac": {"create": False},
            "metrics": {"service": {"enabled": False}}, "controller": {"replicas": 1, "leaderElection": {"enabled": False}}},
     {"crds": {"install": False}, "exampleQueues": {"create": True}}],
    ids=["defaults", "switches-off", "example-queues"],
)  # fmt: skip
def test_helm_lint_finds_nothing(values: dict[str, Any] | None) -> None:
    assert _lint_problems(CHART, values) == []


def test_helm_lint_does_find_a_broken_template(tmp_path: Path) -> None:
    """Negative control: the linter above is live, not a no-op."""
    broken = tmp_path / "gpufleet"
    shutil.copytree(CHART, broken)
    (broken / "templates" / "broken.yaml").write_text("kind: ConfigMap\n{{ if .Values.image }}\n", encoding="utf-8")
    assert _lint_problems(broken) != []


# --- render: defaults ------------------------------------------------------------------------------


def test_the_default_release(default_docs: list[dict[str, Any]]) -> None:
    kinds = {doc["kind"] for doc in default_docs}
    assert {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
            "RoleBinding", "Deployment", "Service", "PriorityClass"} <= kinds  # fmt: skip
    assert "Queue" not in kinds  # example queues need the CRDs before the release: off by default
    assert {(d["metadata"]["name"], d["value"]) for d in _by_kind(default_docs, "PriorityClass")} == {
        ("train", 50), ("build", 100), ("inference", 125)}  # fmt: skip
    for doc in default_docs:
        if doc["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                               "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
                               "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):  # fmt: skip
            assert doc["metadata"].get("namespace") == NAMESPACE, (doc["kind"], doc["metadata"]["name"])


# Kinds the chart renders only on clusters that serve them (admissionPolicy.enabled=auto): -> since.
SINCE = {"ValidatingAdmissionPolicy": "1.30.0", "ValidatingAdmissionPolicyBinding": "1.30.0"}


def _served(doc: dict[str, Any], version: str) -> bool:
    since = SINCE.get(doc["kind"])
    return since is None or tuple(map(int, version.split("."))) >= tuple(map(int, since.split(".")))


@pytest.mark.parametrize("version", (*KUBE_VERSIONS, "1.30.0"))
def test_every_rendered_builtin_object_is_valid_kubernetes(default_docs: list[dict[str, Any]], version: str) -> None:
    for doc in default_docs:
        if _served(doc, version):
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_rendered_crds_are_the_generated_ones_kept_on_uninstall(default_docs: list[dict[str, Any]]) -> None:
    rendered = {doc["metadata"]["name"]: doc for doc in _by_kind(default_docs, "CustomResourceDefinition")}
    assert set(rendered) == {kind.name for kind in CRD_KINDS}
    for kind in CRD_KINDS:
        doc = copy.deepcopy(rendered[kind.name])
        assert doc["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        for label in (*HELM_ONLY_LABELS, "app.kubernetes.io/name", "app.kubernetes.io/instance"):
            labels.pop(label)
        assert doc == crd(kind)


def test_the_controller_deployment(default_docs: list[dict[str, Any]]) -> None:
    deploy = _controller(default_docs)
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    [container] = pod["containers"]
    args = container["args"]
    assert "--leader-elect" in args
    assert any(arg.startswith("--leader-election-namespace=") for arg in args)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["runAsNonRoot"] is True
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert container["image"] == "ghcr.io/gpufleet/gpufleet:0.1.0"  # the chart's appVersion
    [service] = [s for s in _by_kind(default_docs, "Service") if s["metadata"]["name"].endswith("-metrics")]
    assert service["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]


def test_rbac_is_exactly_the_rules_of_the_code(default_docs: list[dict[str, Any]]) -> None:
    rules = controller_rbac_rules()
    [cluster_role] = [r for r in _by_kind(default_docs, "ClusterRole") if r["metadata"]["name"].endswith("-controller")]
    assert cluster_role["rules"] == list(rules.cluster)
    [role] = [r for r in _by_kind(default_docs, "Role") if r["metadata"]["name"].endswith("-leader-election")]
    assert role["rules"] == list(rules.leader_election)
    [binding] = [b for b in _by_kind(default_docs, "ClusterRoleBinding") if b["roleRef"]["name"] == cluster_role["metadata"]["name"]]
    [account] = binding["subjects"]
    assert account["name"] == _controller(default_docs)["spec"]["template"]["spec"]["serviceAccountName"]
    assert account["namespace"] == NAMESPACE


def test_notes_render() -> None:
    notes = _render_files()[f"{RELEASE}/templates/NOTES.txt"]
    assert NAMESPACE in notes and "gpufleet-controller" in notes


# --- render: switches ------------------------------------------------------------------------------


def test_crds_can_be_left_out_or_not_kept() -> None:
    assert _by_kind(render({"crds": {"install": False}}), "CustomResourceDefinition") == []
    for doc in _by_kind(render({"crds": {"keep": False}}), "CustomResourceDefinition"):
        assert "helm.sh/resource-policy" not in doc["metadata"].get("annotations", {})


def test_switches_turn_objects_off() -> None:
    docs = render({"priorityClasses": {"create": False}, "rbac": {"create": False},
                   "serviceAccount": {"create": False, "name": "existing"},
                   "metrics": {"service": {"enabled": False}}})  # fmt: skip
    kinds = {doc["kind"] for doc in docs}
    assert not kinds & {"PriorityClass", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert not [s for s in _by_kind(docs, "Service") if s["metadata"]["name"].endswith("-metrics")]
    assert not [a for a in _by_kind(docs, "ServiceAccount") if a["metadata"]["name"].endswith("-controller")]
    assert _controller(docs)["spec"]["template"]["spec"]["serviceAccountName"] == "existing"


def test_one_replica_without_leader_election() -> None:
    docs = render({"controller": {"replicas": 1, "leaderElection": {"enabled": False}}})
    deploy = _controller(docs)
    assert deploy["spec"]["replicas"] == 1
    assert not any(arg.startswith("--leader-elect") for arg in deploy["spec"]["template"]["spec"]["containers"][0]["args"])
    assert not [r for r in _by_kind(docs, "Role") if r["metadata"]["name"].endswith("-leader-election")]


def test_two_replicas_without_leader_election_are_refused() -> None:
    with pytest.raises(helm.HelmError, match="leaderElection"):
        render({"controller": {"leaderElection": {"enabled": False}}})


def test_example_queues_on_upgrade_are_valid_queues() -> None:
    queues = _by_kind(render({"exampleQueues": {"create": True}}, upgrade=True), "Queue")
    assert {q["metadata"]["name"] for q in queues} >= {"default", "team-a", "team-b"}
    for queue in queues:
        assert api_server_errors(queue) == []
        queue_from_dict(queue)


def test_example_queues_with_the_first_install_of_the_crds_are_refused_with_the_way_out() -> None:
    with pytest.raises(helm.HelmError, match=re.escape("helm upgrade --reuse-values --set exampleQueues.create=true")):
        render({"exampleQueues": {"create": True}})
    assert _by_kind(render({"exampleQueues": {"create": True}, "crds": {"install": False}}), "Queue")


def test_values_overrides_reach_the_deployment() -> None:
    docs = render({"image": {"repository": "registry.local/gpufleet", "tag": "1.2.3"},
                   "controller": {"extraArgs": ["--flag"], "nodeSelector": {"pool": "system"},
                                  "metricsPort": 9090, "logLevel": "debug"}})  # fmt: skip
    pod = _controller(docs)["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "registry.local/gpufleet:1.2.3"
    assert container["args"][-1] == "--flag" and "--metrics-port=9090" in container["args"]
    assert "--log-level=debug" in container["args"]
    assert pod["nodeSelector"] == {"pool": "system"}


# --- values schema --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [{"controller": {"replicas": "two"}}, {"crds": {"instal": True}}, {"unknownKey": 1},
     {"controller": {"metricsPort": 70000}}, {"controller": {"logLevel": "loud"}},
     {"image": {"pullPolicy": "Sometimes"}}, {"priorityClasses": {"items": [{"name": "Train", "value": 1}]}},
     {"exampleQueues": {"items": [{"spec": {}}]}}],
)  # fmt: skip
def test_the_values_schema_rejects_bad_values(values: dict[str, Any]) -> None:
    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema(None)
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(values)


# --- the chart and `gpufleet manifests` install the same thing -------------------------------------


def _normalised(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for meta in (doc["metadata"], doc.get("spec", {}).get("template", {}).get("metadata", {})):
        for label in HELM_ONLY_LABELS:
            meta.get("labels", {}).pop(label, None)
        if doc["kind"] == "PersistentVolumeClaim":  # Helm's keep-on-uninstall, which only Helm reads
            meta.get("annotations", {}).pop("helm.sh/resource-policy", None)
            if not meta.get("annotations"):
                meta.pop("annotations", None)
        if doc["kind"] == "CustomResourceDefinition":  # + the keep annotation and the release's labels
            meta.pop("annotations", None)
            meta.get("labels", {}).pop("app.kubernetes.io/name", None)
            meta.get("labels", {}).pop("app.kubernetes.io/instance", None)
    for webhook in doc.get("webhooks", []):  # CEL does not care how a template folds its lines
        for condition in webhook.get("matchConditions", []):
            condition["expression"] = " ".join(condition["expression"].split())
    return doc


_PG_URL = "postgresql+psycopg://gpufleet@db.example:5432/ledger"
# (chart values, the same ledger for `gpufleet manifests`): SQLite on a claim with telemetry and labels,
# SQLite on an emptyDir, PostgreSQL with its password from a Secret and a Prometheus server
LEDGERS: dict[str, tuple[dict[str, Any], LedgerInstall | None]] = {
    "no-ledger": ({}, None),
    "sqlite-pvc": ({"controller": {"replicas": 1, "ledger": {"enabled": True, "costCentreLabels": ["team", "cc"],
                                                           "bufferEvents": 5000, "sqlite": {"size": "20Gi"}},
                                   "telemetry": {"exporters": ["http://a:9400/metrics", "http://b:9400/metrics"],
                                                 "intervalSeconds": 15}}},
                   LedgerInstall("/var/lib/gpufleet/ledger.db", ("team", "cc"), 5000,
                                 ("http://a:9400/metrics", "http://b:9400/metrics"), telemetry_interval=15,
                                 volume_size="20Gi")),
    "sqlite-emptydir": ({"controller": {"replicas": 1, "ledger": {"enabled": True, "sqlite": {
                            "path": "/data/l.db", "volume": "emptyDir"}}}},
                        LedgerInstall("/data/l.db", volume="emptyDir")),
    "postgres": ({"controller": {"ledger": {"enabled": True, "databaseUrl": _PG_URL,
                                            "passwordSecret": {"name": "ledger-db"}},
                                 "telemetry": {"prometheusUrl": "http://prometheus:9090"}}},
                 LedgerInstall(_PG_URL, telemetry_prometheus="http://prometheus:9090", password_secret="ledger-db")),
}


def _merged(base: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in more.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.mark.parametrize(("webhook", "ledger"), [(False, "no-ledger"), (True, "no-ledger"), (False, "sqlite-pvc"),
                                                 (False, "sqlite-emptydir"), (False, "postgres")],
                         ids=["defaults", "webhook-with-cert-manager", "ledger-sqlite-pvc", "ledger-sqlite-emptydir",
                              "ledger-postgres"])
def test_the_chart_installs_what_gpufleet_manifests_prints(webhook: bool, ledger: str) -> None:
    image = "registry.local/gpufleet:1.2.3"
    values: dict[str, Any] = {"image": {"repository": "registry.local/gpufleet", "tag": "1.2.3"},
                              "exampleQueues": {"create": True}}  # fmt: skip
    if webhook:
        values["webhook"] = {"enabled": True, "certificates": {"mode": "certManager"}}
    ledger_values, ledger_install = LEDGERS[ledger]
    chart_docs = render(_merged(values, ledger_values), upgrade=True)
    options = InstallOptions(namespace=NAMESPACE, image=image, webhook=webhook, ledger=ledger_install)
    manifest_docs = [crd(kind) for kind in CRD_KINDS]
    manifest_docs += [d for d in install_objects(options) if d["kind"] != "Namespace"]

    def keyed(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        return {(d["kind"], d["metadata"]["name"]): _normalised(d) for d in docs}

    from_chart, from_manifests = keyed(chart_docs), keyed(manifest_docs)
    assert sorted(from_chart) == sorted(from_manifests)
    for key, doc in from_manifests.items():
        assert from_chart[key] == doc, key


@pytest.mark.parametrize("version", ["1.30.0", "1.37.0"])
def test_the_webhook_and_mps_objects_are_valid_kubernetes(version: str) -> None:
    """K3's templates render with the values of this chart (matchConditions: Kubernetes >= 1.28)."""
    docs = render({"webhook": {"enabled": True}, "mps": {"enabled": True}})
    assert {"MutatingWebhookConfiguration", "DaemonSet"} <= {doc["kind"] for doc in docs}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
