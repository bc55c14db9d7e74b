"""Workloads over HTTPS (docs/semantics-notes.md, "Admission", "Workloads"): a workload's pod
template is checked and stamped for its creator, and what the trusted controllers make from it
keeps the stamps. Real AdmissionReview v1 JSON, the cluster behind the API server emulator."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.domain import QueueName
from gpufleet.kube.webhook.mutation import MutationSettings
from gpufleet.kube.webhook.review import Tenancy
from gpufleet.kube.webhook.review import review as decide
from gpufleet.kube.webhook.service import TenancyService
from gpufleet.policy import AdmissionContext

from .test_webhook_tenancy import Post, cluster, denial, patched, pod, reviews_sent, run

Json = dict[str, Any]
SYSTEM = "system:serviceaccount:kube-system:"
SUBMITTED, GRANT = "gpufleet.dev/submitted-by", "gpufleet.dev/queue-grant"
PLURALS = {"Pod": "pods", "Job": "jobs", "CronJob": "cronjobs", "Deployment": "deployments",
           "ReplicaSet": "replicasets", "StatefulSet": "statefulsets"}
GROUPS = {"Pod": "", "Job": "batch", "CronJob": "batch"}


def review(obj: Json, user: str, *, operation: str = "CREATE", old: Json | None = None) -> Json:
    kind = obj["kind"]
    group = GROUPS.get(kind, "apps")
    version = "v1"
    request: Json = {
        "uid": "u-1", "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": PLURALS[kind]},
        "namespace": "vision", "operation": operation, "object": copy.deepcopy(obj),
        "userInfo": {"username": user, "uid": f"uid-{user}",
                     "groups": ["system:serviceaccounts"] if user.startswith(SYSTEM) else ["system:authenticated"]},
    }
    if old is not None:
        request["oldObject"] = copy.deepcopy(old)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def template(queue: str | None = "team-b", image: str = "ghcr.io/acme/train:1") -> Json:
    made = pod(labels={"gpufleet.dev/queue": queue} if queue else {}, image=image)
    return {"metadata": {"labels": made["metadata"]["labels"]}, "spec": made["spec"]}


def workload(kind: str, spec_template: Json, name: str = "train") -> Json:
    api = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    spec: Json = ({"schedule": "@daily", "jobTemplate": {"spec": {"template": spec_template}}} if kind == "CronJob"
                  else {"template": spec_template})
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "vision"}, "spec": spec}


def made_from(kind: str, parent_template: Json, name: str) -> Json:
    """What a controller creates from a template: the template's metadata and spec, copied."""
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {**copy.deepcopy(parent_template["metadata"]), "name": name, "namespace": "vision"},
                "spec": copy.deepcopy(parent_template["spec"])}
    return workload(kind, copy.deepcopy(parent_template), name)


def annotations(obj: Json) -> Json:
    return dict(obj["metadata"].get("annotations") or {})


def test_a_jobs_pods_keep_their_creators_stamps(tmp_path: Path) -> None:
    store, clock = cluster()

    async def body(post: Post, _: TenancyService) -> None:
        job = workload("Job", template())
        stamped = patched(job, await post(review(job, "alice")))
        assert annotations(stamped["spec"]["template"]) == {SUBMITTED: "alice", GRANT: "team-b"}
        assert stamped["metadata"] == job["metadata"]  # the Job itself is not stamped, its template is
        assert reviews_sent(store) == 1
        assert await post(review(stamped, "alice")) == {"uid": "u-1", "allowed": True}  # idempotent
        # the job-controller creates the pods: the copied stamps are kept, no review for it
        child = made_from("Pod", stamped["spec"]["template"], "train-x1")
        assert await post(review(child, SYSTEM + "job-controller")) == {"uid": "u-1", "allowed": True}
        assert await post(review(child, SYSTEM + "job-controller"), "/validate") == {"uid": "u-1", "allowed": True}
        assert reviews_sent(store) == 1
        # bob's Job asking the same queue: refused at apply, as a pod would be
        assert denial(await post(review(workload("Job", template()), "bob"))) == (
            403, "project ml-vision does not allow queue team-b (allowed: vision-train, vision-infer)")

    run(tmp_path, store, clock, body)


def test_pods_of_the_job_controller_without_stamps_are_stamped_with_its_name(tmp_path: Path) -> None:
    store, clock = cluster()

    async def body(post: Post, _: TenancyService) -> None:
        bare = made_from("Pod", template(queue=None), "old-job-x1")
        after = patched(bare, await post(review(bare, SYSTEM + "job-controller")))
        assert annotations(after) == {SUBMITTED: SYSTEM + "job-controller"}
        # nor does it get an owned queue on its own RBAC
        store.grant_queue("team-b", user=SYSTEM + "job-controller")
        stamped = made_from("Pod", {**template(), "metadata": {**template()["metadata"],
                                                                "annotations": {SUBMITTED: "bob"}}}, "x2")
        assert denial(await post(review(stamped, SYSTEM + "job-controller"))) == (
            403, "project ml-vision does not allow queue team-b (allowed: vision-train, vision-infer)")

    run(tmp_path, store, clock, body)
    assert reviews_sent(store) == 0


def test_an_untrusted_account_forging_the_stamps_is_overwritten_or_refused(tmp_path: Path) -> None:
    store, clock = cluster()
    forged_template = {**template(queue=None), "metadata": {"annotations": {SUBMITTED: "alice", GRANT: "team-b"}}}

    async def body(post: Post, _: TenancyService) -> None:
        forged = made_from("Pod", forged_template, "p1")
        after = patched(forged, await post(review(forged, SYSTEM + "default")))  # not a trusted account
        assert annotations(after) == {SUBMITTED: SYSTEM + "default"}
        assert denial(await post(review(forged, SYSTEM + "default"), "/validate")) == (
            403, 'annotation gpufleet.dev/submitted-by must be "system:serviceaccount:kube-system:default" '
                 "(gpufleet's mutating webhook writes it), got \"alice\"")
        job = workload("Job", forged_template)
        assert annotations(patched(job, await post(review(job, "mallory")))["spec"]["template"]) == {
            SUBMITTED: "mallory"}

    run(tmp_path, store, clock, body)


def test_a_cron_job_stamps_its_job_template_and_the_chain_keeps_it(tmp_path: Path) -> None:
    store, clock = cluster()

    async def body(post: Post, _: TenancyService) -> None:
        cron = workload("CronJob", template())
        stamped = patched(cron, await post(review(cron, "alice")))
        job_template = stamped["spec"]["jobTemplate"]["spec"]["template"]
        assert annotations(job_template) == {SUBMITTED: "alice", GRANT: "team-b"}
        job = made_from("Job", job_template, "nightly-1")
        assert await post(review(job, SYSTEM + "cronjob-controller")) == {"uid": "u-1", "allowed": True}
        child = made_from("Pod", job["spec"]["template"], "nightly-1-x")
        assert await post(review(child, SYSTEM + "job-controller")) == {"uid": "u-1", "allowed": True}
        bad = workload("CronJob", template(queue=None, image="ghcr.io/acme/bad:1"))
        assert denial(await post(review(bad, "alice"))) == (
            403, "project ml-vision does not allow image ghcr.io/acme/bad:1: denied ghcr.io/acme/bad*")

    run(tmp_path, store, clock, body)
    assert reviews_sent(store) == 1


def test_a_deployment_through_its_replica_set_and_an_edit_makes_the_editor_the_submitter(tmp_path: Path) -> None:
    store, clock = cluster()

    async def body(post: Post, _: TenancyService) -> None:
        deployment = workload("Deployment", template(queue=None))
        stamped = patched(deployment, await post(review(deployment, "alice")))
        assert annotations(stamped["spec"]["template"]) == {SUBMITTED: "alice"}
        replica_set = made_from("ReplicaSet", stamped["spec"]["template"], "train-5d9c")
        assert await post(review(replica_set, SYSTEM + "deployment-controller")) == {"uid": "u-1", "allowed": True}
        child = made_from("Pod", replica_set["spec"]["template"], "train-5d9c-x")
        assert await post(review(child, SYSTEM + "replicaset-controller")) == {"uid": "u-1", "allowed": True}
        # scaling (the template unchanged): no check, no patch
        scaled = copy.deepcopy(stamped)
        scaled["spec"]["replicas"] = 3
        assert await post(review(scaled, "bob", operation="UPDATE", old=stamped)) == {"uid": "u-1", "allowed": True}
        # forging the template's stamp changes the template: stamped again for the editor
        forged = copy.deepcopy(stamped)
        forged["spec"]["template"]["metadata"]["annotations"][SUBMITTED] = "carol"
        assert annotations(patched(forged, await post(review(forged, "bob", operation="UPDATE", old=stamped)))[
            "spec"]["template"]) == {SUBMITTED: "bob"}
        # a new image: bob becomes the submitter of the pods made from now on
        edited = copy.deepcopy(stamped)
        edited["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/acme/train:2"
        assert annotations(patched(edited, await post(review(edited, "bob", operation="UPDATE", old=stamped)))[
            "spec"]["template"]) == {SUBMITTED: "bob"}
        # the deployment-controller's own updates are not checked
        assert await post(review(edited, SYSTEM + "deployment-controller", operation="UPDATE", old=stamped)) == {
            "uid": "u-1", "allowed": True}
        stateful = workload("StatefulSet", template(queue=None))
        assert annotations(patched(stateful, await post(review(stateful, "dave")))["spec"]["template"]) == {
            SUBMITTED: "dave"}

    run(tmp_path, store, clock, body)
    assert reviews_sent(store) == 0


class Nobody:
    """No Project, so no queue needs a grant: never asked."""

    def can_use_queue(self, user: str, groups: Sequence[str], queue: QueueName, namespace: str) -> bool:
        raise AssertionError("not asked")


def test_the_trusted_list_is_configurable() -> None:
    stamped = made_from("Pod", {**template(queue=None), "metadata": {"annotations": {SUBMITTED: "alice"}}}, "p")
    operator = "system:serviceaccount:ops:trainer-operator"
    for trusted, wanted in ((frozenset({operator}), {"uid": "u-1", "allowed": True}),
                            (frozenset({SYSTEM + "job-controller"}), None)):
        tenancy = Tenancy(AdmissionContext(), lambda _info: Nobody(), trusted)
        response = decide(review(stamped, operator), MutationSettings(), tenancy)["response"]
        if wanted is not None:
            assert response == wanted
        else:
            assert annotations(patched(stamped, response)) == {SUBMITTED: operator}
    result = CliRunner().invoke(main, ["webhook", "--insecure-http", "--trusted-controller"])
    assert result.exit_code == 2, result.output
    assert "Option '--trusted-controller' requires an argument" in result.stderr
