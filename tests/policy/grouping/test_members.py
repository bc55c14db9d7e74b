"""Which pods belong: owner-reference chains by uid within the namespace; labels only pick the unit."""

from __future__ import annotations

from gpufleet.adapters import link_from_dict, owner_from_dict
from gpufleet.policy.grouping import ObjectLink, Owner, OwnerIndex, group_for, member_of, pods_of

from .helpers import FACTS, manifest


def _link(kind: str, name: str, uid: str, controller: str | None, namespace: str = "ml",
          labels: dict[str, str] | None = None, api_version: str = "v1") -> ObjectLink:
    refs = [{"uid": controller, "controller": True, "kind": "X", "name": "x", "apiVersion": "v1"}] if controller else []
    return link_from_dict({"apiVersion": api_version, "kind": kind,
                           "metadata": {"name": name, "namespace": namespace, "uid": uid,
                                        "ownerReferences": refs, "labels": labels or {}}})


def _owner(name: str) -> Owner:
    return owner_from_dict(manifest(name))


def _plan_names(owner: Owner) -> list[str]:
    result = group_for(owner, FACTS)
    assert isinstance(result, tuple)
    return [plan.name for plan in result]


def test_jobset_pods_through_their_jobs() -> None:
    jobset = _owner("jobset.yaml")
    job = _link("Job", "pytorch-workers-0", "job-1", jobset.ref.uid, api_version="batch/v1")
    pod = _link("Pod", "pytorch-workers-0-0", "pod-1", "job-1",
                labels={"jobset.sigs.k8s.io/replicatedjob-name": "workers"})
    index = OwnerIndex.build([job, pod], [jobset])
    membership = member_of(pod, index)
    assert membership is not None and membership.owner == jobset.ref
    assert [membership.group] == _plan_names(jobset)


def test_a_job_of_a_jobset_is_not_an_owner_of_its_own() -> None:
    jobset = _owner("jobset.yaml")
    job_doc = manifest("job.yaml")
    job_doc["metadata"].update(uid="job-1", ownerReferences=[{"uid": jobset.ref.uid, "controller": True}])
    job_owner = owner_from_dict(job_doc)
    job_link = link_from_dict(job_doc)
    pod = _link("Pod", "p", "pod-1", "job-1")
    membership = member_of(pod, OwnerIndex.build([job_link, pod], [jobset, job_owner]))
    assert membership is not None and membership.owner == jobset.ref


def test_jobset_per_replicated_job_by_label() -> None:
    doc = manifest("jobset.yaml")
    doc["metadata"]["annotations"] = {"gpufleet.dev/group-per": "replicated-job"}
    jobset = owner_from_dict(doc)
    job = _link("Job", "j", "job-1", jobset.ref.uid)
    driver = _link("Pod", "d", "pod-d", "job-1", labels={"jobset.sigs.k8s.io/replicatedjob-name": "driver"})
    worker = _link("Pod", "w", "pod-w", "job-1", labels={"jobset.sigs.k8s.io/replicatedjob-name": "workers"})
    unknown = _link("Pod", "u", "pod-u", "job-1", labels={"jobset.sigs.k8s.io/replicatedjob-name": "other"})
    index = OwnerIndex.build([job, driver, worker, unknown], [jobset])
    groups = pods_of(jobset, [driver, worker, unknown], index)
    assert sorted(groups) == sorted(_plan_names(jobset))
    assert sorted(len(v) for v in groups.values()) == [1, 1]


def test_lws_workers_through_their_leader_pod() -> None:
    lws = _owner("leaderworkerset.yaml")
    leader_sts = _link("StatefulSet", "vllm", "sts-l", lws.ref.uid, api_version="apps/v1")
    leader = _link("Pod", "vllm-1", "pod-l", "sts-l", labels={"leaderworkerset.sigs.k8s.io/group-index": "1"})
    worker_sts = _link("StatefulSet", "vllm-1", "sts-w", "pod-l", api_version="apps/v1")
    worker = _link("Pod", "vllm-1-2", "pod-w", "sts-w", labels={"leaderworkerset.sigs.k8s.io/group-index": "1"})
    index = OwnerIndex.build([leader_sts, leader, worker_sts, worker], [lws])
    a, b = member_of(leader, index), member_of(worker, index)
    assert a is not None and b is not None and a.group == b.group == _plan_names(lws)[1]


def test_rayjob_submitter_is_no_member() -> None:
    rayjob = _owner("rayjob.yaml")
    cluster = _link("RayCluster", "rayjob-sample-abc", "rc-1", rayjob.ref.uid, api_version="ray.io/v1")
    head = _link("Pod", "head", "pod-h", "rc-1", labels={"ray.io/node-type": "head"})
    submitter_job = _link("Job", "rayjob-sample", "job-s", rayjob.ref.uid, api_version="batch/v1")
    submitter = _link("Pod", "rayjob-sample-xyz", "pod-s", "job-s")
    index = OwnerIndex.build([cluster, head, submitter_job, submitter], [rayjob])
    assert member_of(head, index) is not None
    assert member_of(submitter, index) is None


def test_deployment_pods_through_their_replicaset_each_its_own_gang() -> None:
    deploy = _owner("deployment.yaml")
    rs = _link("ReplicaSet", "llama-serve-7d9c", "rs-1", deploy.ref.uid, namespace="infer", api_version="apps/v1")
    pods = [_link("Pod", f"llama-serve-7d9c-{i}", f"pod-{i}", "rs-1", namespace="infer") for i in range(3)]
    index = OwnerIndex.build([rs, *pods], [deploy])
    groups = [member_of(pod, index) for pod in pods]
    assert all(g is not None for g in groups)
    assert len({g.group for g in groups if g is not None}) == 3
    (plan,) = group_for(deploy, FACTS, pods[0].name)  # type: ignore[misc]
    assert groups[0] is not None and plan.name == groups[0].group


def test_labels_alone_make_no_member() -> None:
    jobset = _owner("jobset.yaml")
    forged = _link("Pod", "forged", "pod-f", None, labels={"jobset.sigs.k8s.io/jobset-name": "pytorch",
                                                          "jobset.sigs.k8s.io/replicatedjob-name": "workers"})
    assert member_of(forged, OwnerIndex.build([forged], [jobset])) is None


def test_a_reference_into_another_namespace_joins_nothing() -> None:
    pytorchjob = _owner("pytorchjob.yaml")  # namespace ml
    hostile = _link("Pod", "hostile", "pod-x", pytorchjob.ref.uid, namespace="nlp")
    assert member_of(hostile, OwnerIndex.build([hostile], [pytorchjob])) is None
    # nor through an object of the victim's namespace that it claims as its controller
    job = _link("Job", "j", "job-ml", pytorchjob.ref.uid, namespace="ml")
    via = _link("Pod", "via", "pod-y", "job-ml", namespace="nlp")
    assert member_of(via, OwnerIndex.build([job, via], [pytorchjob])) is None


def test_a_cycle_of_references_ends() -> None:
    a = _link("Job", "a", "uid-a", "uid-b")
    b = _link("Job", "b", "uid-b", "uid-a")
    pod = _link("Pod", "p", "pod", "uid-a")
    assert member_of(pod, OwnerIndex.build([a, b, pod], [])) is None
