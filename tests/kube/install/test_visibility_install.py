"""The gpu-visibility admission in the install (chart: webhook.gpuVisibility, `gpufleet manifests
--webhook`): the ValidatingWebhookConfiguration ``gpufleet-webhook-gpu-visibility``, the same from both,
valid Kubernetes, and matchConditions (evaluated with cel-python) that send the webhook every pod it
would refuse and leave out the ordinary ones."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.kube.install.manifests import InstallOptions, install_objects
from gpufleet.kube.install.visibility import NVIDIA_NAMESPACES, VISIBILITY_MATCH, visibility_chart_file
from gpufleet.kube.webhook.visibility import VISIBILITY_ENV_VARS

from ..webhook.test_webhook_visibility import ALLOWED, REFUSED, a_pod, request
from .test_chart import CHART, NAMESPACE, _normalised, render
from .test_crds import KUBE_VERSIONS

celpy = pytest.importorskip("celpy", reason="cel-python (the dev extra) evaluates the matchConditions")

NAME = "gpufleet-webhook-gpu-visibility"
CERT_MANAGER = {"enabled": True, "certificates": {"mode": "certManager"}}


def _config(docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    found = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration" and d["metadata"]["name"] == NAME]
    return found[0] if found else None


def _entry(docs: list[dict[str, Any]]) -> dict[str, Any]:
    config = _config(docs)
    assert config is not None
    [entry] = config["webhooks"]
    return entry


def test_the_entry_in_the_manifests_and_the_chart() -> None:
    manifests = install_objects(InstallOptions(examples=False, webhook=True))
    chart = render({"webhook": CERT_MANAGER})
    assert _normalised(_config(chart) or {}) == _normalised(_config(manifests) or {})
    entry = _entry(manifests)
    assert entry["name"] == "gpu-visibility.gpufleet.dev"
    assert (entry["failurePolicy"], entry["sideEffects"], entry["timeoutSeconds"]) == ("Fail", "None", 5)
    assert entry["clientConfig"]["service"] == {"name": "gpufleet-webhook", "namespace": NAMESPACE,
                                                "path": "/validate", "port": 443}  # fmt: skip
    assert entry["rules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"],
         "scope": "Namespaced"},
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods/ephemeralcontainers"],
         "scope": "Namespaced"}]  # fmt: skip
    assert entry["namespaceSelector"] == {"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn",
        "values": ["kube-system", NAMESPACE, "gpu-operator", "nvidia-gpu-operator", "nvidia-device-plugin",
                   "nvidia-dra-driver-gpu"]}]}  # fmt: skip
    assert entry["matchConditions"] == [{"name": "gpu-visibility-fields", "expression": VISIBILITY_MATCH}]
    assert list(NVIDIA_NAMESPACES) == yaml.safe_load((CHART / "values.yaml").read_text())[
        "webhook"]["gpuVisibility"]["excludeNamespaces"]
    # its own caBundle in helm mode: the same CA as the other configurations
    helm_docs = render({"webhook": {"enabled": True}})
    [mutating] = [d for d in helm_docs if d["kind"] == "MutatingWebhookConfiguration"]
    assert _entry(helm_docs)["clientConfig"]["caBundle"] == mutating["webhooks"][0]["clientConfig"]["caBundle"]
    for version in KUBE_VERSIONS:
        for doc in (_config(manifests), _config(helm_docs)):
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_chart_reads_the_generated_file() -> None:
    stored = yaml.safe_load((CHART / "files" / "webhook" / "gpu-visibility.yaml").read_text(encoding="utf-8"))
    assert stored == visibility_chart_file()


def test_chart_values() -> None:
    docs = render({"webhook": {"enabled": True, "excludeNamespaces": ["batch"], "gpuVisibility": {
        "excludeNamespaces": ["gpu-stack"], "failurePolicy": "Ignore"}}})
    entry = _entry(docs)
    assert entry["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", NAMESPACE, "batch",
                                                                            "gpu-stack"]  # fmt: skip
    assert entry["failurePolicy"] == "Ignore"
    assert _config(render({"webhook": {"enabled": True, "gpuVisibility": {"enabled": False}}})) is None
    assert _config(install_objects(InstallOptions(webhook=True, webhook_gpu_visibility=False))) is None
    assert _config(render(None)) is None and _config(install_objects(InstallOptions())) is None


def test_fail_without_match_conditions_is_refused() -> None:
    helm = pytest.importorskip("helm_python")
    message = ("webhook.gpuVisibility.failurePolicy=Fail needs matchConditions (Kubernetes >= 1.28): without them the "
               "gpu-visibility webhook sees every pod created and updated and would block all of them while it is "
               "down. Use webhook.gpuVisibility.failurePolicy=Ignore on older clusters.")
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render({"webhook": {"enabled": True, "matchConditions": False, "failurePolicy": "Ignore",
                            "gpuVisibility": {"failurePolicy": "Fail"}}})
    entry = _entry(render({"webhook": {"enabled": True, "matchConditions": False, "failurePolicy": "Ignore"}}))
    assert entry["failurePolicy"] == "Ignore" and "matchConditions" not in entry


def _sent(review: dict[str, Any]) -> bool:
    req = review["request"]
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(req["object"]),
                  "request": celpy.json_to_cel({**req, "subResource": req.get("subResource", "")})}
    return bool(env.program(env.compile(VISIBILITY_MATCH)).evaluate(activation))


@pytest.mark.parametrize(("case", "review"), [(c, r) for c, r, _ in REFUSED], ids=[c for c, _, _ in REFUSED])
def test_every_pod_the_webhook_refuses_is_sent_to_it(case: str, review: dict[str, Any]) -> None:
    assert _sent(copy.deepcopy(review)), case


def test_ordinary_pods_and_updates_are_not_sent() -> None:
    not_sent = {"a plain pod", "a whole-GPU pod", "an update of labels", "a debug container",
                "a GPU index added by an update (the admission policy's to judge)", "DRA claims of a pod of gpufleet's"}
    for case, review in ALLOWED:
        assert _sent(copy.deepcopy(review)) is (case not in not_sent), case


@settings(max_examples=100, deadline=None)
@given(section=st.sampled_from(["initContainers", "containers"]), variable=st.sampled_from(VISIBILITY_ENV_VARS),
       before=st.integers(0, 3), others=st.integers(0, 2))
def test_a_visibility_variable_in_any_container_is_sent(section: str, variable: str, before: int, others: int) -> None:
    obj = a_pod()
    containers = [{"name": f"c{i}", "image": "x", "env": [{"name": "A", "value": "1"}] * before} for i in range(others)]
    containers.append({"name": "last", "image": "x", "env": [{"name": "B", "value": "2"}] * before
                       + [{"name": variable, "value": "all"}]})
    obj["spec"][section] = containers
    assert _sent(request(obj))


def test_the_generated_chart_file_is_what_update_chart_writes(tmp_path: Path) -> None:
    from gpufleet.kube.install.manifests import write_chart_files

    written = write_chart_files(tmp_path)
    target = tmp_path / "files" / "webhook" / "gpu-visibility.yaml"
    assert target in written
    assert target.read_text(encoding="utf-8") == (CHART / "files" / "webhook" / "gpu-visibility.yaml").read_text(
        encoding="utf-8")


def test_gpufleet_manifests_flag() -> None:
    from .test_manifests import _docs, _run

    for args, present in (((), False), (("--webhook",), True), (("--webhook", "--no-webhook-gpu-visibility"), False)):
        code, out, err = _run("--no-examples", *args)
        assert code == 0, err
        assert (_config(_docs(out)) is not None) is present, args
