"""The ValidatingAdmissionPolicy and the tenancy webhook's match on workloads (docs/semantics-notes.md,
"Admission", "Workloads"), their CEL evaluated with cel-python; the trusted controllers from one chart
value into the policy and the webhook's flags."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube.install.manifests import InstallOptions, install_objects
from gpufleet.kube.install.tenancy import policy_spec

from .test_chart import NAMESPACE, render
from .test_tenancy_install import CONTROLLER, ONLY_CONTROLLER, celpy, decide, needs_cel

TENANCY_CONFIG = "gpufleet-webhook"  # the tenancy ValidatingWebhookConfiguration (not -gpu-visibility)

if celpy is not None:
    from celpy import celtypes

SUBMITTED, GRANT = "gpufleet.dev/submitted-by", "gpufleet.dev/queue-grant"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
Json = dict[str, Any]


def pod(annotations: Json | None) -> Json:
    meta: Json = {"name": "p", "namespace": "ml"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"schedulerName": "gpufleet"}}


def _template(annotations: Json | None) -> Json:
    meta: Json = {} if annotations is None else {"annotations": annotations}
    return {"metadata": meta, "spec": {"schedulerName": "gpufleet", "containers": []}}


def job(annotations: Json | None, replicas: int = 1) -> Json:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
            "spec": {"parallelism": replicas, "template": _template(annotations)}}


def cron_job(annotations: Json | None) -> Json:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "ml"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": _template(annotations)}}}}


def admit(operation: str, user: str, obj: Json, old: Json | None = None,
          spec: Json | None = None) -> str | None:
    """What the API server does with the policy: None (allowed or not matched) or the denial message."""
    spec = spec or policy_spec(CONTROLLER)
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel({"operation": operation, "namespace": "ml", "userInfo": {"username": user}}),
        "authorizer": celtypes.MapType({}),
    }
    return decide(spec, activation, user)


FORGED = "gpufleet.dev/submitted-by must be the creator mallory, not alice"


@needs_cel
@pytest.mark.parametrize(("operation", "user", "obj", "old", "denial"), [
    # pods: a user forging a submitter is refused; a trusted controller's copied stamps pass
    ("CREATE", "mallory", pod({SUBMITTED: "alice"}), None, FORGED),
    ("CREATE", JOB_CONTROLLER, pod({SUBMITTED: "alice", GRANT: "team-b"}), None, None),
    ("CREATE", "system:serviceaccount:kube-system:default", pod({GRANT: "team-b"}), None,
     "gpufleet.dev/queue-grant: user system:serviceaccount:kube-system:default may not use queue team-b"),
    ("UPDATE", JOB_CONTROLLER, pod({SUBMITTED: "bob"}), pod({SUBMITTED: "alice"}), ONLY_CONTROLLER),
    # workload templates: the creator's own stamps pass, a forged one is refused
    ("CREATE", "alice", job({SUBMITTED: "alice", GRANT: "team-b"}), None, None),
    ("CREATE", "mallory", job({SUBMITTED: "alice"}), None, FORGED),
    ("CREATE", "mallory", cron_job({SUBMITTED: "alice"}), None, FORGED),
    ("CREATE", "mallory", job({GRANT: "team-b"}), None, "gpufleet.dev/queue-grant: user mallory may not use queue team-b"),
    ("CREATE", "mallory", job(None), None, None),
    ("CREATE", "system:serviceaccount:kube-system:cronjob-controller", job({SUBMITTED: "alice", GRANT: "team-b"}),
     None, None),
    # updates of a workload: an unchanged stamp passes (scaling), a changed one must be the editor's
    ("UPDATE", "bob", job({SUBMITTED: "alice", GRANT: "team-b"}, 3), job({SUBMITTED: "alice", GRANT: "team-b"}), None),
    ("UPDATE", "mallory", job({SUBMITTED: "alice"}), job({SUBMITTED: "bob"}), FORGED),
    ("UPDATE", "mallory", job({SUBMITTED: "mallory"}), job({SUBMITTED: "alice"}), None),
    ("UPDATE", "mallory", job({SUBMITTED: "mallory", GRANT: "team-b"}), job({SUBMITTED: "alice", GRANT: "team-b"}),
     "gpufleet.dev/queue-grant: user mallory may not use queue team-b"),  # alice's grant is not the editor's
    ("UPDATE", "alice", job({SUBMITTED: "alice", GRANT: "team-b"}), job({SUBMITTED: "bob", GRANT: "team-b"}), None),
    ("UPDATE", "mallory", job({SUBMITTED: "mallory", GRANT: "team-b"}), job({SUBMITTED: "alice"}),
     "gpufleet.dev/queue-grant: user mallory may not use queue team-b"),
    ("UPDATE", "mallory", cron_job({SUBMITTED: "alice"}), cron_job({SUBMITTED: "bob"}), FORGED),
    ("UPDATE", "system:serviceaccount:kube-system:deployment-controller", job({SUBMITTED: "x"}),
     job({SUBMITTED: "y"}), None),
])  # fmt: skip
def test_the_policy_on_workloads_and_trusted_controllers(operation: str, user: str, obj: Json, old: Json | None,
                                                        denial: str | None) -> None:
    assert admit(operation, user, obj, old) == denial


@needs_cel
def test_only_the_listed_controllers_are_trusted() -> None:
    spec = policy_spec(CONTROLLER, ("system:serviceaccount:ops:trainer",))
    assert admit("CREATE", JOB_CONTROLLER, pod({SUBMITTED: "alice"}), spec=spec) == (
        f"gpufleet.dev/submitted-by must be the creator {JOB_CONTROLLER}, not alice")
    assert admit("CREATE", "system:serviceaccount:ops:trainer", pod({SUBMITTED: "alice"}), spec=spec) is None


def test_one_chart_value_feeds_the_policy_and_the_webhook() -> None:
    operator = "system:serviceaccount:ops:trainer"
    docs = render({"tenancy": {"trustedControllers": [operator, JOB_CONTROLLER]}, "webhook": {"enabled": True},
                   "admissionPolicy": {"enabled": True}})
    [policy] = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    controller = f"system:serviceaccount:{NAMESPACE}:gpufleet-controller"
    assert policy["spec"] == policy_spec(controller, (operator, JOB_CONTROLLER))
    [webhook] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-webhook")]
    args = webhook["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--trusted-controller")] == [
        f"--trusted-controller={operator}", f"--trusted-controller={JOB_CONTROLLER}"]
    manifests = install_objects(InstallOptions(namespace=NAMESPACE, webhook=True))
    [printed] = [d for d in manifests if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-webhook")]
    assert [a for a in printed["spec"]["template"]["spec"]["containers"][0]["args"]
            if a.startswith("--trusted-controller")] == [
        f"--trusted-controller=system:serviceaccount:kube-system:{name}" for name in
        ("job-controller", "cronjob-controller", "replicaset-controller", "deployment-controller",
         "statefulset-controller")]


@needs_cel
def test_the_tenancy_webhook_sees_workloads_whose_template_is_ours_only() -> None:
    [config] = [d for d in install_objects(InstallOptions(namespace=NAMESPACE, webhook=True))
                if d["kind"] == "ValidatingWebhookConfiguration" and d["metadata"]["name"] == TENANCY_CONFIG]
    [condition] = config["webhooks"][0]["matchConditions"]
    chart = render({"webhook": {"enabled": True}})
    [rendered] = [d for d in chart if d["kind"] == "ValidatingWebhookConfiguration" and d["metadata"]["name"] == TENANCY_CONFIG]
    [chart_condition] = rendered["webhooks"][0]["matchConditions"]
    assert chart_condition == condition
    assert rendered["webhooks"][0]["rules"] == config["webhooks"][0]["rules"]
    env = celpy.Environment()
    match = env.program(env.compile(condition["expression"]))

    def matches(resource: str, obj: Json) -> bool:
        return bool(match.evaluate({"request": celpy.json_to_cel({"resource": {"resource": resource}}),
                                    "object": celpy.json_to_cel(obj)}))  # fmt: skip

    other = job(None)
    other["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    assert matches("jobs", job(None)) and matches("deployments", job(None)) and matches("cronjobs", cron_job(None))
    assert not matches("jobs", other) and not matches("statefulsets", other)
    assert not matches("daemonsets", job(None))
    assert matches("pods", pod(None)) and matches("podgroups", {"spec": {"minMember": 2}})
