"""The chart's webhook and MPS templates, rendered offline by Helm's Go code (helm-python-sdk)."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gpufleet.domain.wire import MPS_HOST_ROOT

from ..install.test_crds import KUBE_VERSIONS

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) renders the chart offline")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "gpufleet"
NAMESPACE = "gpufleet-system"
ON = {"webhook": {"enabled": True}, "mps": {"enabled": True}}


def _keys(tree: dict[str, Any], schema: dict[str, Any], path: str = "") -> list[str]:
    """Keys of ``tree`` (values.yaml) that ``schema`` does not describe."""
    missing = []
    for key, value in tree.items():
        entry = schema.get("properties", {}).get(key)
        if entry is None:
            missing.append(path + key)
        elif isinstance(value, dict) and value and "properties" in entry:
            missing += _keys(value, entry, f"{path}{key}.")
    return missing


def test_the_values_schema_describes_every_webhook_and_mps_key() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert _keys({"webhook": values["webhook"], "mps": values["mps"]}, schema) == []


def render(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    with helm.Chart.load(str(CHART)) as loaded:
        files: dict[str, str] = loaded.render(values, name="gpufleet", namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(files.items()):
        if path.endswith(".yaml"):
            docs += [doc for doc in yaml.safe_load_all(text) if doc]
    return docs


def one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    return doc


def ours(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") in ("webhook", "mps")]


def test_off_by_default() -> None:
    assert ours(render(None)) == []


@pytest.fixture(scope="module")
def enabled() -> list[dict[str, Any]]:
    return render(ON)


def test_enabled_objects_are_valid_kubernetes(enabled: list[dict[str, Any]]) -> None:
    kinds = sorted(d["kind"] for d in ours(enabled))
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "Deployment", "MutatingWebhookConfiguration",
                     "PodDisruptionBudget", "Secret", "Service", "ServiceAccount", "ValidatingWebhookConfiguration",
                     "ValidatingWebhookConfiguration"]
    for version in KUBE_VERSIONS:
        for doc in ours(enabled):
            kubernetes_validate.validate(doc, version, strict=True)


def test_helm_lint_is_clean_with_everything_on() -> None:
    for values in (ON, {**ON, "webhook": {"enabled": True, "certificates": {"mode": "certManager"}}}):
        report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE)
        assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []


def test_generated_certificate_serves_the_service_and_matches_the_ca_bundle(enabled: list[dict[str, Any]]) -> None:
    secret = one(enabled, "Secret", "-webhook-tls")
    config = one(enabled, "MutatingWebhookConfiguration")
    [hook, tenancy] = config["webhooks"]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert tenancy["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    key = serialization.load_pem_private_key(base64.b64decode(secret["data"]["tls.key"]), password=None)
    cert.verify_directly_issued_by(ca)
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()  # type: ignore[union-attr]
    service = hook["clientConfig"]["service"]
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"{service['name']}.{service['namespace']}.svc" in names
    assert one(enabled, "Service", "-webhook")["metadata"]["name"] == service["name"]


def test_webhook_configuration(enabled: list[dict[str, Any]]) -> None:
    hook = one(enabled, "MutatingWebhookConfiguration")["webhooks"][0]
    assert hook["name"] == "fractional-gpus.gpufleet.dev"
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", NAMESPACE]
    [condition] = hook["matchConditions"]
    for needle in ("object.spec.schedulerName == 'gpufleet'", "'gpufleet.dev/gpu-blocks' in object.metadata.annotations",
                   "'gpufleet.dev/gpu-memory' in object.metadata.annotations"):
        assert needle in condition["expression"]


def test_webhook_and_daemonset_agree_on_the_mps_layout(enabled: list[dict[str, Any]]) -> None:
    deploy = one(enabled, "Deployment", "-webhook")
    [container] = deploy["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "webhook"
    assert "--mps-host-dir=/run/gpufleet/mps" in args
    assert "--node-selector=nvidia.com/gpu.present=true" in args  # fractional pods go where the daemons run
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    daemonset = one(enabled, "DaemonSet", "-mps")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    [mps] = pod["containers"]
    # the host root only, Bidirectional: the per-GPU tmpfs mounts made inside reach the host
    assert mps["volumeMounts"] == [{"name": "mps-root", "mountPath": MPS_HOST_ROOT, "mountPropagation": "Bidirectional"}]
    assert pod["volumes"] == [{"name": "mps-root", "hostPath": {"path": MPS_HOST_ROOT, "type": "DirectoryOrCreate"}}]
    script = mps["args"][0]
    for needle in ('dir="$root/gpu-$index"', 'mkdir -p "$dir/pipe" "$dir/shm" "$dir/log"',
                   'mount -t tmpfs -o "size=1g,mode=1777,nosuid,nodev,noexec" "gpufleet-mps-gpu-$index" "$dir/shm"',
                   'mount --bind "$1/shm" /dev/shm', 'CUDA_MPS_PIPE_DIRECTORY="$1/pipe"', "exec nvidia-cuda-mps-control -d",
                   'nvidia-smi -i "$index" -c EXCLUSIVE_PROCESS'):  # exclusive-process mode by default
        assert needle in script, needle
    assert "set_default_" not in script  # no server-side ceiling unless asked
    assert mps["securityContext"] == {"runAsUser": 0, "privileged": True}


def test_cert_manager_mode() -> None:
    docs = render({"webhook": {"enabled": True, "certificates": {"mode": "certManager"}}})
    kinds = sorted(d["kind"] for d in ours(docs))
    assert kinds == ["Certificate", "ClusterRole", "ClusterRoleBinding", "Deployment", "Issuer",
                     "MutatingWebhookConfiguration", "PodDisruptionBudget", "Service", "ServiceAccount",
                     "ValidatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    certificate = one(docs, "Certificate")
    config = one(docs, "MutatingWebhookConfiguration")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{NAMESPACE}/{certificate['metadata']['name']}")
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    assert certificate["spec"]["issuerRef"] == {"name": one(docs, "Issuer")["metadata"]["name"], "kind": "Issuer"}
    docs = render({"webhook": {"enabled": True, "certificates": {
        "mode": "certManager", "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}}}}})
    assert [d for d in docs if d["kind"] == "Issuer"] == []
    assert one(docs, "Certificate")["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}


def test_fail_without_match_conditions_is_refused() -> None:
    with pytest.raises(helm.HelmError, match="needs matchConditions"):
        render({"webhook": {"enabled": True, "matchConditions": False}})
    docs = render({"webhook": {"enabled": True, "matchConditions": False, "failurePolicy": "Ignore"}})
    hooks = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert len(hooks) == 2  # the fractional entry and the tenancy entry
    for hook in hooks:
        assert hook["failurePolicy"] == "Ignore" and "matchConditions" not in hook


def test_options_reach_the_webhook_and_daemonset() -> None:
    values = copy.deepcopy(ON)
    values["webhook"].update({"replicas": 1, "staticGpuMemoryMiB": 81920, "runtimeClassName": "nvidia"})
    values["mps"].update({"exclusiveProcess": False, "hostDir": "/var/run/mps", "shmSize": "256m",
                          "maxClientPercent": 50})
    docs = render(values)
    args = one(docs, "Deployment", "-webhook")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--gpu-memory-mib=81920", "--runtime-class=nvidia", "--mps-host-dir=/var/run/mps"} <= set(args)
    assert [d for d in docs if d["kind"] == "PodDisruptionBudget" and "webhook" in d["metadata"]["name"]] == []
    pod = one(docs, "DaemonSet", "-mps")["spec"]["template"]["spec"]
    script = pod["containers"][0]["args"][0]
    assert "EXCLUSIVE_PROCESS" not in script
    assert '"size=256m,mode=1777,nosuid,nodev,noexec"' in script
    assert 'control "$dir" "set_default_active_thread_percentage 50"' in script
    assert 'control "$dir" "set_default_device_pinned_mem_limit 0 $(( memory * 50 / 100 ))M"' in script
    assert pod["volumes"][0]["hostPath"]["path"] == "/var/run/mps"


@pytest.mark.parametrize("values", [
    {"webhook": {"failurePolicy": "Sometimes"}}, {"webhook": {"certificates": {"mode": "vault"}}},
    {"mps": {"hostDir": "relative"}}, {"webhook": {"unknown": 1}}, {"mps": {"shmSize": "1 GiB"}},
    {"mps": {"maxClientPercent": 101}}, {"webhook": {"gpuVisibility": {"excludeNamespaces": ["Not A Label"]}}},
    {"webhook": {"gpuVisibility": {"failurePolicy": "Sometimes"}}},
])
def test_the_schema_rejects_bad_values(values: dict[str, Any]) -> None:
    with helm.Chart.load(str(CHART)) as loaded, pytest.raises(helm.HelmValuesError):
        loaded.validate_schema(values)


@pytest.mark.parametrize("mps", [{}, {"exclusiveProcess": False, "maxClientPercent": 30}])
def test_the_daemon_script_is_valid_bash(tmp_path: Path, mps: dict[str, Any]) -> None:
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    docs = render({"webhook": {"enabled": True}, "mps": {"enabled": True, **mps}})
    [container] = one(docs, "DaemonSet", "-mps")["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/bash", "-c"]
    script = tmp_path / "mps.sh"
    script.write_text(container["args"][0])
    checked = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    # the script handed to unshare is valid too
    inner = container["args"][0].split("/bin/bash -c '", 1)[1].split("' mps ", 1)[0]
    (tmp_path / "inner.sh").write_text(inner)
    checked = subprocess.run([bash, "-n", str(tmp_path / "inner.sh")], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    assert 'exec nvidia-cuda-mps-control -d' in inner and 'mount --bind "$1/shm" /dev/shm' in inner
