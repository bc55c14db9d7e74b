"""Everything needed to install gpufleet without Helm, as Kubernetes objects.

``gpufleet manifests | kubectl apply -f -`` installs what the Helm chart in ``deploy/helm/gpufleet``
installs with its default values (a test renders the chart and compares the two object by object),
so the two ways cannot drift apart:

- the CRDs (:mod:`gpufleet.kube.install.crds`), printed byte for byte as the chart stores them;
- a Namespace, the controller's ServiceAccount, a least-privilege ClusterRole (the API rules the
  controller uses, from :mod:`gpufleet.kube.install.rbac`) and its binding, a Role for the leader-election
  Lease in the install namespace;
- the controller Deployment (two replicas, one leader), its PodDisruptionBudget and a Service for its
  ``/metrics``;
- with ``webhook=True``, the fractional-GPU admission webhook of :mod:`gpufleet.kube.webhook.review`
  (Deployment, Service, PodDisruptionBudget, MutatingWebhookConfiguration) with its certificate
  from cert-manager, as the chart makes them with ``webhook.enabled=true`` and
  ``webhook.certificates.mode=certManager`` (a plain install cannot generate certificates the way
  Helm templates do);
- example PriorityClasses (train 50, build 100, inference 125) and example Queues;
- tenancy (:mod:`gpufleet.kube.install.tenancy`): the ClusterRoles gpufleet-platform-admin,
  -project-admin, -member and -viewer, the ValidatingAdmissionPolicy (and its binding) that guards
  gpufleet's pod annotations, and with ``webhook=True`` the tenancy webhook's
  ValidatingWebhookConfiguration (``/validate``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpufleet import __version__
from gpufleet.domain import ANNOTATION_GPU_BLOCKS, ANNOTATION_GPU_MEMORY
from gpufleet.kube.install import observability
from gpufleet.kube.install.crds import CRD_KINDS, GROUP, VERSION, crd_file_name, crd_yaml
from gpufleet.kube.install.rbac import AGENT_RULES, RULES
from gpufleet.kube.install.tenancy import (
    POLICY_SUFFIX,
    TENANCY_ROLES,
    WEBHOOK_RULES,
    claims_webhook,
    controller_username,
    policy_spec,
    policy_spec_template,
    tenancy_mutating_webhook,
    tenancy_webhook,
)
from gpufleet.kube.install.visibility import (
    NVIDIA_NAMESPACES,
    VISIBILITY_CONFIGURATION_SUFFIX,
    visibility_chart_file,
    visibility_webhook,
)
from gpufleet.kube.webhook.mutation import DEFAULT_MPS_HOST_DIR
from gpufleet.policy.admission import DEFAULT_TRUSTED_CONTROLLERS

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_NAMESPACE",
    "LEDGER_VOLUMES",
    "InstallOptions",
    "LedgerInstall",
    "RbacRules",
    "controller_rbac_rules",
    "install_objects",
    "render_crds",
    "render_manifests",
    "write_chart_files",
]

DEFAULT_NAMESPACE = "gpufleet-system"
DEFAULT_IMAGE = f"ghcr.io/gpufleet/gpufleet:{__version__}"

NAME = "gpufleet"  # app.kubernetes.io/name, and the release name the chart comparison uses
CONTROLLER = f"{NAME}-controller"
WEBHOOK = f"{NAME}-webhook"
LEADER_ELECTION_LEASE = CONTROLLER
_LEADER_ELECTION_ROLE = f"{CONTROLLER}-leader-election"
METRICS_PORT = 8080
HEALTH_PORT = 8081
WEBHOOK_PORT = 8443
WEBHOOK_TLS_DIR = "/etc/gpufleet/webhook-tls"
# Only fractional pods of gpufleet's reach the webhook (Kubernetes >= 1.28), so its failurePolicy
# Fail holds back only them while it is down.
WEBHOOK_MATCH = (
    "has(object.spec.schedulerName) && object.spec.schedulerName == 'gpufleet'"
    " && has(object.metadata.annotations)"
    f" && ('{ANNOTATION_GPU_BLOCKS}' in object.metadata.annotations"
    f" || '{ANNOTATION_GPU_MEMORY}' in object.metadata.annotations)"
)

# The priorities of the examples in the docs: train is preemptible; build and inference are at or
# above the default nonPreemptiblePriority (100), so not preemptible unless labelled.
PRIORITY_CLASSES: tuple[tuple[str, int, str], ...] = (
    ("train", 50, "Preemptible training jobs."),
    ("build", 100, "Builds and CI jobs; at the default nonPreemptiblePriority, not preemptible."),
    ("inference", 125, "Serving; not preemptible."),
)

# Example quota tree: two research teams under one parent, serving apart, and the default queue.
EXAMPLE_QUEUES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    ("research", {"resources": {"nvidia.com/gpu": {"quota": "16"}}}),
    ("team-a", {"parent": "research", "resources": {"nvidia.com/gpu": {"quota": "8", "limit": "16"}}}),
    ("team-b", {"parent": "research", "resources": {"nvidia.com/gpu": {"quota": "8", "lendingLimit": "4"}}}),
    ("inference", {"resources": {"nvidia.com/gpu": {"quota": "4", "lendingLimit": "0"}},
                   "preemption": {"withinQueue": "Never"}}),
)  # fmt: skip


LEDGER_VOLUMES = ("pvc", "emptyDir")
LEDGER_PASSWORD_KEY = "password"
_FS_GROUP = 65532  # the controller's user and group (its image's nonroot user)


@dataclass(frozen=True)
class LedgerInstall:
    """The controller's usage ledger, as the chart's ``controller.ledger`` and ``controller.telemetry``
    values set it: ``database`` is a PostgreSQL URL (the chart's ``databaseUrl``) or the absolute path
    of an SQLite file inside the controller's container (``sqlite.path``), kept on a volume (``pvc``, a
    ReadWriteOnce claim of ``volume_size``, or ``emptyDir``) with one replica and the Recreate strategy
    (one writer of one file)."""

    database: str
    cost_centre_labels: tuple[str, ...] = ()
    buffer_events: int = 200_000
    telemetry_exporters: tuple[str, ...] = ()
    telemetry_prometheus: str = ""
    telemetry_interval: int = 30  # seconds
    volume: str = "pvc"  # SQLite: pvc | emptyDir
    volume_size: str = "5Gi"
    password_secret: str = ""  # PostgreSQL: a Secret whose key "password" becomes PGPASSWORD

    @property
    def sqlite_file(self) -> str | None:
        """The SQLite file's path in the container (None: PostgreSQL)."""
        if self.database.startswith("sqlite:"):
            return self.database.partition(":///")[2]
        return None if "://" in self.database else self.database

    def controller_args(self) -> list[str]:
        """The controller's ledger flags, in the chart's order."""
        args = [f"--database={self.database}", f"--ledger-buffer={self.buffer_events}"]
        if self.cost_centre_labels:
            args.append(f"--cost-centre-labels={','.join(self.cost_centre_labels)}")
        if self.telemetry_exporters:
            args.append(f"--telemetry-exporters={','.join(self.telemetry_exporters)}")
        if self.telemetry_prometheus:
            args.append(f"--telemetry-prometheus={self.telemetry_prometheus}")
        if self.telemetry_exporters or self.telemetry_prometheus:
            args.append(f"--telemetry-interval={self.telemetry_interval}")
        return args


@dataclass(frozen=True)
class InstallOptions:
    namespace: str = DEFAULT_NAMESPACE
    image: str = DEFAULT_IMAGE
    examples: bool = True  # example PriorityClasses and Queues
    webhook: bool = False  # the fractional-GPU webhook (needs cert-manager for its certificate)
    admission_policy: bool = True  # the ValidatingAdmissionPolicy on gpufleet's pod annotations (Kubernetes >= 1.30)
    # With webhook: its tenancy admission (chart: webhook.tenancy.enabled): `--tenancy`, /readyz, the
    # tenancy entries of both webhook configurations, and its ServiceAccount and ClusterRole.
    webhook_tenancy: bool = True
    # With webhook: the gpu-visibility ValidatingWebhookConfiguration (chart: webhook.gpuVisibility.enabled).
    webhook_gpu_visibility: bool = True
    ledger: LedgerInstall | None = None  # the usage ledger (chart: controller.ledger, controller.telemetry)

    @property
    def controller_replicas(self) -> int:
        """Two (a leader and a standby), or one with an SQLite ledger (one writer of one file)."""
        return 1 if self.ledger is not None and self.ledger.sqlite_file is not None else 2


@dataclass(frozen=True)
class RbacRules:
    cluster: tuple[dict[str, Any], ...]  # ClusterRole rules
    leader_election: tuple[dict[str, Any], ...]  # Role rules in the install namespace (Leases)


def controller_rbac_rules() -> RbacRules:
    """The controller's RBAC rules, :data:`gpufleet.kube.install.rbac.RULES` (kept next to the calls).

    Rules on Leases (leader election) go into a Role in the install namespace instead of the
    ClusterRole: the controller needs them only there.
    """
    keys: tuple[str, ...] = ("apiGroups", "resources", "resourceNames", "verbs")
    rules: list[dict[str, Any]] = [{key: list(rule[key]) for key in keys if key in rule} for rule in RULES]
    return RbacRules(
        cluster=tuple(rule for rule in rules if rule["resources"] != ["leases"]),
        leader_election=tuple(rule for rule in rules if rule["resources"] == ["leases"]),
    )


# --- objects ------------------------------------------------------------------------------------


def _labels(component: str | None = None) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/instance": NAME}
    if component:
        labels["app.kubernetes.io/component"] = component
    return labels


def _meta(name: str, namespace: str | None, component: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = _labels(component)
    return meta


def _restricted_container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}


def _spread(component: str) -> dict[str, Any]:
    """Prefer replicas on different nodes: losing one node must not take both."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": _labels(component)},
                    },
                }
            ]
        }
    }


def controller_args(ledger: LedgerInstall | None = None) -> list[str]:
    return [
        "controller",
        "--leader-elect",
        "--leader-election-namespace=$(POD_NAMESPACE)",
        f"--leader-election-id={LEADER_ELECTION_LEASE}",
        f"--metrics-port={METRICS_PORT}",
        f"--health-port={HEALTH_PORT}",
        "--log-level=info",
        *(ledger.controller_args() if ledger is not None else ()),
    ]


def _ledger_claim(options: InstallOptions) -> dict[str, Any] | None:
    """The SQLite ledger's PersistentVolumeClaim (None: no claim wanted), as the chart's
    controller-ledger-pvc.yaml makes it (less its keep-on-uninstall annotation, which only Helm reads)."""
    ledger = options.ledger
    if ledger is None or ledger.sqlite_file is None or ledger.volume != "pvc":
        return None
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": _meta(f"{CONTROLLER}-ledger", options.namespace, "controller"),
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": ledger.volume_size}}}}


def _controller_deployment(options: InstallOptions) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "controller",
        "image": options.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["gpufleet"],
        "args": controller_args(options.ledger),
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "ports": [
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
            {"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
        ],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "health"}, "initialDelaySeconds": 10,
                          "periodSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 5,
                           "failureThreshold": 3},
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "securityContext": _restricted_container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }  # fmt: skip
    pod_security = _pod_security()
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    spec: dict[str, Any] = {"replicas": options.controller_replicas}
    ledger = options.ledger
    if ledger is not None and ledger.password_secret and ledger.sqlite_file is None:
        container["env"].append({"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {
            "name": ledger.password_secret, "key": LEDGER_PASSWORD_KEY}}})
    if ledger is not None and (path := ledger.sqlite_file) is not None:
        spec["strategy"] = {"type": "Recreate"}  # one writer of one file: the old pod goes first
        pod_security["fsGroup"] = _FS_GROUP  # the ledger's volume writable by the controller's user
        container["volumeMounts"].append({"name": "ledger", "mountPath": posixpath.dirname(path)})
        claim = _ledger_claim(options)
        volumes.append({"name": "ledger", **({"persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
                                             if claim is not None else {"emptyDir": {}})})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(CONTROLLER, options.namespace, "controller"),
        "spec": {
            **spec,
            "selector": {"matchLabels": _labels("controller")},
            "template": {
                "metadata": {"labels": _labels("controller")},
                "spec": {
                    "serviceAccountName": CONTROLLER,
                    "securityContext": pod_security,
                    "affinity": _spread("controller"),
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def _controller_objects(options: InstallOptions, rules: RbacRules) -> list[dict[str, Any]]:
    ns = options.namespace
    subject = [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": ns}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(CONTROLLER, ns, "controller")},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(CONTROLLER, None, "controller"),
            "rules": [dict(rule) for rule in rules.cluster],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(CONTROLLER, None, "controller"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CONTROLLER},
            "subjects": subject,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(_LEADER_ELECTION_ROLE, ns, "controller"),
            "rules": [dict(rule) for rule in rules.leader_election],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(_LEADER_ELECTION_ROLE, ns, "controller"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": _LEADER_ELECTION_ROLE},
            "subjects": subject,
        },
        _controller_deployment(options),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(f"{CONTROLLER}-metrics", ns, "controller"),
            "spec": {
                "type": "ClusterIP",
                "selector": _labels("controller"),
                "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}],
            },
        },
    ]


def _webhook_deployment(options: InstallOptions) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"}}
    # With tenancy, /readyz answers 503 until the webhook's cache of the cluster is synced.
    ready = {"httpGet": {**probe["httpGet"], "path": "/readyz"}} if options.webhook_tenancy else probe
    tenancy = ["--tenancy", *(f"--trusted-controller={user}" for user in DEFAULT_TRUSTED_CONTROLLERS)] \
        if options.webhook_tenancy else []
    # The tenancy admission asks SubjectAccessReviews and reads the cluster: the webhook's own account;
    # without it the webhook never calls the API server: no token in its pods.
    account: dict[str, Any] = (
        {"serviceAccountName": WEBHOOK} if options.webhook_tenancy else {"automountServiceAccountToken": False})
    container: dict[str, Any] = {
        "name": "webhook",
        "image": options.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["gpufleet"],
        "args": ["webhook", f"--port={WEBHOOK_PORT}", f"--cert-file={WEBHOOK_TLS_DIR}/tls.crt",
                 f"--key-file={WEBHOOK_TLS_DIR}/tls.key", f"--mps-host-dir={DEFAULT_MPS_HOST_DIR}", "--log-level=info",
                 *tenancy],
        "ports": [{"name": "https", "containerPort": WEBHOOK_PORT, "protocol": "TCP"}],
        "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {**ready, "periodSeconds": 5, "failureThreshold": 2},
        "resources": {"limits": {"memory": "256Mi"}, "requests": {"cpu": "50m", "memory": "128Mi"}},
        "securityContext": _restricted_container_security(),
        "volumeMounts": [{"name": "tls", "mountPath": WEBHOOK_TLS_DIR, "readOnly": True}],
    }  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(WEBHOOK, options.namespace, "webhook"),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": _labels("webhook")},
            "template": {
                "metadata": {"labels": _labels("webhook")},
                "spec": {
                    **account,
                    "securityContext": _pod_security(),
                    "affinity": _spread("webhook"),
                    "containers": [container],
                    "volumes": [{"name": "tls", "secret": {"secretName": f"{WEBHOOK}-tls"}}],
                },
            },
        },
    }


def _webhook_objects(options: InstallOptions) -> list[dict[str, Any]]:
    ns = options.namespace
    service = f"{WEBHOOK}.{ns}.svc"
    issuer = f"{WEBHOOK}-selfsigned"
    selector = _webhook_namespace_selector(ns)
    webhook = {
        "name": f"fractional-gpus.{GROUP}",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "reinvocationPolicy": "IfNeeded",
        "timeoutSeconds": 5,
        "clientConfig": {"service": {"name": WEBHOOK, "namespace": ns, "path": "/mutate", "port": 443}},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                   "scope": "Namespaced"}],
        "namespaceSelector": selector,
        "matchConditions": [{"name": "gpufleet-fractional-pod", "expression": WEBHOOK_MATCH}],
    }  # fmt: skip
    webhooks = [webhook]
    if options.webhook_tenancy:
        webhooks.append(tenancy_mutating_webhook({"name": WEBHOOK, "namespace": ns}, selector))
    return [
        {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": _meta(issuer, ns, "webhook"),
         "spec": {"selfSigned": {}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": _meta(WEBHOOK, ns, "webhook"),
         "spec": {"secretName": f"{WEBHOOK}-tls", "duration": "87600h", "commonName": service,
                  "dnsNames": [WEBHOOK, f"{WEBHOOK}.{ns}", service, f"{service}.cluster.local"],
                  "issuerRef": {"kind": "Issuer", "name": issuer}}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {**_meta(WEBHOOK, None, "webhook"),
                      "annotations": {"cert-manager.io/inject-ca-from": f"{ns}/{WEBHOOK}"}},
         "webhooks": webhooks},
        _webhook_deployment(options),
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(WEBHOOK, ns, "webhook"),
         "spec": {"type": "ClusterIP", "selector": _labels("webhook"),
                  "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(WEBHOOK, ns, "webhook"),
         "spec": {"minAvailable": 1, "selector": {"matchLabels": _labels("webhook")}}},
    ]  # fmt: skip


def _example_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": _meta(name, None, "examples"),
            "value": value,
            "globalDefault": False,
            "description": description,
        }
        for name, value, description in PRIORITY_CLASSES
    ]
    objects += [
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Queue", "metadata": _meta(name, None, "examples"), "spec": spec}
        for name, spec in EXAMPLE_QUEUES
    ]
    return objects


def _tenancy_roles() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name, "labels": {**_labels("tenancy"), **labels}}, "rules": [dict(r) for r in rules]}
        for name, labels, rules in TENANCY_ROLES
    ]  # fmt: skip


def _tenancy_objects(options: InstallOptions) -> list[dict[str, Any]]:
    """The tenancy roles, and the ValidatingAdmissionPolicy with its binding (chart: rbac.create,
    admissionPolicy.enabled)."""
    objects = _tenancy_roles()
    if options.admission_policy:
        name = f"{NAME}-{POLICY_SUFFIX}"
        objects += [
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
             "metadata": _meta(name, None, "admission"),
             "spec": policy_spec(controller_username(options.namespace, CONTROLLER))},
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": _meta(name, None, "admission"),
             "spec": {"policyName": name, "validationActions": ["Deny"]}},
        ]  # fmt: skip
    return objects


def _webhook_namespace_selector(namespace: str) -> dict[str, Any]:
    """Every namespace but kube-system and the install's own."""
    return {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", namespace]}]}


def _tenancy_webhook_object(options: InstallOptions) -> dict[str, Any]:
    ns = options.namespace
    selector = _webhook_namespace_selector(ns)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {**_meta(WEBHOOK, None, "webhook"),
                     "annotations": {"cert-manager.io/inject-ca-from": f"{ns}/{WEBHOOK}"}},
        "webhooks": [tenancy_webhook({"name": WEBHOOK, "namespace": ns}, selector),
                     claims_webhook({"name": WEBHOOK, "namespace": ns}, selector)],
    }  # fmt: skip


def _visibility_webhook_object(options: InstallOptions) -> dict[str, Any]:
    """Pods of every scheduler that set GPU visibility themselves, refused on /validate
    (:mod:`gpufleet.kube.install.visibility`)."""
    ns = options.namespace
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {**_meta(f"{WEBHOOK}-{VISIBILITY_CONFIGURATION_SUFFIX}", None, "webhook"),
                     "annotations": {"cert-manager.io/inject-ca-from": f"{ns}/{WEBHOOK}"}},
        "webhooks": [visibility_webhook({"name": WEBHOOK, "namespace": ns}, ("kube-system", ns, *NVIDIA_NAMESPACES))],
    }  # fmt: skip


def _webhook_identity(options: InstallOptions) -> list[dict[str, Any]]:
    """The webhook's ServiceAccount and its rules (:data:`~gpufleet.kube.install.tenancy.WEBHOOK_RULES`)."""
    subject = [{"kind": "ServiceAccount", "name": WEBHOOK, "namespace": options.namespace}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(WEBHOOK, options.namespace, "webhook")},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": _meta(WEBHOOK, None, "webhook"), "rules": [dict(rule) for rule in WEBHOOK_RULES]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": _meta(WEBHOOK, None, "webhook"),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WEBHOOK},
         "subjects": subject},
    ]  # fmt: skip


def _tenancy_chart_files(chart_dir: Path) -> dict[Path, str]:
    header = "# Generated by `gpufleet manifests --update-chart` from gpufleet.kube.install.tenancy: do not edit.\n"
    roles = [{"name": name, "labels": labels, "rules": [dict(r) for r in rules]}
             for name, labels, rules in TENANCY_ROLES]
    return {
        chart_dir / "files" / "rbac" / "tenancy-roles.yaml": header + _dump_list(roles),
        chart_dir / "files" / "rbac" / "webhook-rules.yaml": header + _dump_list(WEBHOOK_RULES),
        chart_dir / "files" / "admission" / "pod-annotations-policy.yaml": header + _dump(policy_spec_template()),
    }


def _controller_pdb(options: InstallOptions) -> dict[str, Any]:
    """The controller's PodDisruptionBudget (two replicas: a drain never takes leader and standby at
    once), as the chart's controller-pdb.yaml makes it."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": _meta(CONTROLLER, options.namespace, "controller"),
            "spec": {"minAvailable": 1, "selector": {"matchLabels": _labels("controller")}}}  # fmt: skip


def install_objects(options: InstallOptions, rules: RbacRules | None = None) -> list[dict[str, Any]]:
    """Every object to install, CRDs excluded (they are printed verbatim), in apply order."""
    rules = rules or controller_rbac_rules()
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": options.namespace, "labels": _labels()}}
    ]
    objects += _controller_objects(options, rules)
    if (claim := _ledger_claim(options)) is not None:
        objects.append(claim)
    if options.controller_replicas > 1:  # as the chart: a budget only with a standby to keep
        objects.append(_controller_pdb(options))
    objects += _tenancy_objects(options)
    if options.webhook:
        objects += _webhook_objects(options)
        if options.webhook_tenancy:
            objects.append(_tenancy_webhook_object(options))
            objects += _webhook_identity(options)
        if options.webhook_gpu_visibility:
            objects.append(_visibility_webhook_object(options))
    if options.examples:
        objects += _example_objects()
    return objects


# --- output ------------------------------------------------------------------------------------


def _dump(obj: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(obj), sort_keys=False, default_flow_style=False, width=100, allow_unicode=True)


def _documents(texts: Iterable[str]) -> str:
    return "".join(f"---\n{text}" for text in texts)


def render_crds() -> str:
    """The CRDs alone, as multi-document YAML (each document exactly the chart's file)."""
    return _documents(crd_yaml(kind) for kind in CRD_KINDS)


def render_manifests(options: InstallOptions, rules: RbacRules | None = None) -> str:
    """The whole install as multi-document YAML: CRDs first, so that the Queues after them apply."""
    return render_crds() + _documents(_dump(obj) for obj in install_objects(options, rules))


def write_chart_files(chart_dir: Path, rules: RbacRules | None = None) -> list[Path]:
    """(Re)write the chart's generated files (``files/crds/*.yaml``, ``files/rbac/*.yaml``).

    Returns every generated path; files already up to date are left untouched."""
    rules = rules or controller_rbac_rules()
    generated = {chart_dir / "files" / "crds" / crd_file_name(kind): crd_yaml(kind) for kind in CRD_KINDS}
    header = "# Generated by `gpufleet manifests --update-chart` from gpufleet.kube.install.rbac.RULES: do not edit.\n"
    generated[chart_dir / "files" / "rbac" / "cluster-rules.yaml"] = header + _dump_list(rules.cluster)
    generated[chart_dir / "files" / "rbac" / "leader-election-rules.yaml"] = header + _dump_list(rules.leader_election)
    agent_header = header.replace("rbac.RULES", "rbac.AGENT_RULES")
    generated[chart_dir / "files" / "rbac" / "agent-rules.yaml"] = agent_header + _dump_list(AGENT_RULES)
    generated.update(_tenancy_chart_files(chart_dir))
    generated.update(observability.chart_files(chart_dir))
    generated[chart_dir / "files" / "webhook" / "gpu-visibility.yaml"] = (
        "# Generated by `gpufleet manifests --update-chart` from gpufleet.kube.install.visibility: do not edit.\n"
        + _dump(visibility_chart_file()))
    written = []
    for path, text in generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _dump_list(rules: Iterable[Mapping[str, Any]]) -> str:
    return yaml.safe_dump([dict(rule) for rule in rules], sort_keys=False, default_flow_style=False, width=100)
