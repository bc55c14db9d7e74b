"""Tenancy at admission, end to end: real AdmissionReview v1 JSON over HTTPS to the webhook, whose
cluster cache and SubjectAccessReviews go through the lightkube adapter to the HTTP API server
emulator. Every denial message is asserted exactly."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest

from gpufleet.kube import Kind, connect
from gpufleet.kube.webhook.mutation import MutationSettings
from gpufleet.kube.webhook.server import build_app, tls_context
from gpufleet.kube.webhook.service import TenancyService
from gpufleet.testing import FakeCluster, VirtualClock
from gpufleet.testing.emulator import ApiServerEmulator

from .test_webhook_server import _client_context, _serving, make_pair

DIGEST = "sha256:" + "d" * 64
Json = dict[str, Any]


def _project(name: str, spec: Json) -> Json:
    return {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": name}, "spec": spec}


def cluster() -> tuple[FakeCluster, VirtualClock]:
    clock = VirtualClock()
    store = FakeCluster(clock)
    store.put(Kind.PROJECT, _project("ml-vision", {
        "namespaces": {"names": ["vision"]}, "queues": ["vision-train", "vision-infer"],
        "defaultQueue": "vision-train", "priorityClasses": ["batch"], "maxPendingGangsPerUser": 2,
        "images": {"allowed": ["ghcr.io/acme/*"], "denied": ["ghcr.io/acme/bad*"]},
        "volumes": {"storageClasses": ["fast"], "claimNames": ["vision-*"]},
    }))
    store.put(Kind.PROJECT, _project("ml-infer", {
        "namespaces": {"selector": {"matchLabels": {"team": "infer"}}}, "queues": ["infer"],
        "allowNonPreemptible": True, "images": {"requireDigest": True},
    }))
    store.put(Kind.PROJECT, _project("nlp", {"namespaces": {"names": ["nlp"]}, "queues": ["team-b"]}))
    store.put(Kind.PROJECT, _project("broken", {"namespaces": {"names": ["broken"]}, "images": {"allowed": "x"}}))
    store.put(Kind.NAMESPACE, {"metadata": {"name": "serving", "labels": {"team": "infer"}}})
    for name, value in (("batch", 10), ("inference-critical", 1000)):
        store.put(Kind.PRIORITY_CLASS, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                        "metadata": {"name": name}, "value": value})
    for gang in ("g1", "g2"):  # carol already has two pending gangs in ml-vision
        store.put(Kind.POD, {"metadata": {"name": f"{gang}-0", "namespace": "vision",
                                          "labels": {"gpufleet.dev/pod-group": gang},
                                          "annotations": {"gpufleet.dev/submitted-by": "carol"}},
                             "spec": {"schedulerName": "gpufleet", "containers": [{"name": "c", "image": "x"}]},
                             "status": {"phase": "Pending"}})
    store.put(Kind.POD_GROUP, {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "PodGroup",
                               "metadata": {"name": "big", "namespace": "vision"},
                               "spec": {"minMember": 2, "queue": "team-b"}})
    store.grant_queue("team-b", user="alice")  # a ClusterRoleBinding: alice may use team-b
    return store, clock


def pod(*, labels: Json | None = None, annotations: Json | None = None, image: str = "ghcr.io/acme/train:1",
        **spec: Any) -> Json:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p1", "namespace": "vision", "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"schedulerName": "gpufleet", "containers": [{"name": "main", "image": image}], **spec}}


def request(obj: Json, *, user: str = "bob", namespace: str = "vision", groups: tuple[str, ...] = ("system:authenticated",),
            kind: tuple[str, str, str] = ("", "v1", "Pod"), uid: str = "u-1") -> Json:
    group, version, kind_name = kind
    plural = "pods" if kind_name == "Pod" else "podgroups"
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": {"group": group, "version": version, "kind": kind_name},
            "resource": {"group": group, "version": version, "resource": plural},
            "namespace": namespace, "operation": "CREATE", "object": obj,
            "userInfo": {"username": user, "uid": f"uid-{user}", "groups": list(groups),
                         "extra": {"scopes": ["a"]}},
        },
    }


Post = Callable[..., Awaitable[Json]]


def run(tmp_path: Path, store: FakeCluster, clock: VirtualClock,
        body: Callable[[Post, TenancyService], Awaitable[None]], settings: MutationSettings | None = None) -> None:
    _, cert_file, key_file = make_pair(tmp_path, "one")
    ca_file = tmp_path / "ca-one.crt"

    async def main() -> None:
        async with ApiServerEmulator(store=store) as emulator:
            service = TenancyService(connect(server=emulator.url_text), clock)
            app = build_app(settings or MutationSettings(), tenancy=service)

            async def client(url: str) -> None:
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:

                    async def post(review: Json, path: str = "/mutate") -> Json:
                        async with session.post(f"{url}{path}", json=review, ssl=_client_context(ca_file)) as reply:
                            assert reply.status == 200, await reply.text()
                            answer: Json = await reply.json()
                            assert answer["response"]["uid"] == review["request"]["uid"]
                            return answer["response"]  # type: ignore[no-any-return]

                    async with session.get(f"{url}/readyz", ssl=_client_context(ca_file)) as reply:
                        assert reply.status in (200, 503)
                    await body(post, service)

            await _serving(app, tls_context(str(cert_file), str(key_file)), client)

    asyncio.run(main())


def patched(obj: Json, response: Json) -> Json:
    assert response["allowed"] is True, response
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))  # type: ignore[no-any-return]


def denial(response: Json) -> tuple[int, str]:
    assert response["allowed"] is False, response
    assert "patch" not in response
    return response["status"]["code"], response["status"]["message"]


def reviews_sent(store: FakeCluster) -> int:
    return sum(1 for c in store.calls if c.kind is Kind.SUBJECT_ACCESS_REVIEW)


def test_allowed_pod_is_stamped_with_its_creator_and_readmission_is_idempotent(tmp_path: Path) -> None:
    store, clock = cluster()
    forged = pod(annotations={"gpufleet.dev/submitted-by": "alice", "gpufleet.dev/queue-grant": "team-b"})

    async def body(post: Post, _: TenancyService) -> None:
        first = await post(request(copy.deepcopy(forged)))
        after = patched(forged, first)
        assert after["metadata"]["annotations"] == {"gpufleet.dev/submitted-by": "bob"}  # forged: overwritten
        assert after["spec"] == forged["spec"]
        again = await post(request(copy.deepcopy(forged)))
        assert again == first  # the same object admitted twice: the same patch
        readmitted = await post(request(copy.deepcopy(after)))
        assert readmitted == {"uid": "u-1", "allowed": True}  # the patched pod needs nothing more
        no_annotations = pod()
        del no_annotations["metadata"]["annotations"]
        stamped = patched(no_annotations, await post(request(no_annotations, user="dave")))
        assert stamped["metadata"]["annotations"] == {"gpufleet.dev/submitted-by": "dave"}

    run(tmp_path, store, clock, body)
    assert reviews_sent(store) == 0  # its own Project's queue: no review asked


def test_queue_grant_only_after_a_positive_review_which_is_cached_for_its_ttl(tmp_path: Path) -> None:
    store, clock = cluster()
    team_b = pod(labels={"gpufleet.dev/queue": "team-b"})

    async def body(post: Post, _: TenancyService) -> None:
        assert denial(await post(request(copy.deepcopy(team_b), user="bob"))) == (
            403, "project ml-vision does not allow queue team-b (allowed: vision-train, vision-infer)")
        assert reviews_sent(store) == 1
        response = await post(request(copy.deepcopy(team_b), user="alice"))
        assert patched(team_b, response)["metadata"]["annotations"] == {
            "gpufleet.dev/submitted-by": "alice", "gpufleet.dev/queue-grant": "team-b"}
        assert reviews_sent(store) == 2
        for _ in range(5):  # within the TTL: answered from the cache
            assert await post(request(copy.deepcopy(team_b), user="alice")) == response
            assert denial(await post(request(copy.deepcopy(team_b), user="bob")))[0] == 403
        assert reviews_sent(store) == 2
        readmitted = patched(team_b, response)
        assert await post(request(copy.deepcopy(readmitted), user="alice")) == {"uid": "u-1", "allowed": True}
        await clock.advance(61)  # both answers expired
        assert await post(request(copy.deepcopy(team_b), user="alice")) == response
        assert denial(await post(request(copy.deepcopy(team_b), user="bob")))[0] == 403
        assert reviews_sent(store) == 4
        # a PodGroup naming team-b: its pods get the queue (and the grant) from it
        in_group = pod(labels={"gpufleet.dev/pod-group": "big"})
        assert patched(in_group, await post(request(copy.deepcopy(in_group), user="alice")))["metadata"][
            "annotations"] == {"gpufleet.dev/submitted-by": "alice", "gpufleet.dev/queue-grant": "team-b"}

    run(tmp_path, store, clock, body)
    sar = next(c for c in store.calls if c.kind is Kind.SUBJECT_ACCESS_REVIEW)
    assert sar.op == "create" and sar.status == 201


def test_the_review_carries_the_request_user_and_the_namespace(tmp_path: Path) -> None:
    store, clock = cluster()
    seen: list[Json] = []

    def answer(spec: Json) -> bool:
        seen.append(spec)
        return True

    store.access_answer = answer

    async def body(post: Post, _: TenancyService) -> None:
        await post(request(pod(labels={"gpufleet.dev/queue": "team-b"}), user="erin", groups=("ml", "dev")))

    run(tmp_path, store, clock, body)
    assert seen == [{"resourceAttributes": {"namespace": "vision", "verb": "use", "group": "gpufleet.dev",
                                            "resource": "queues", "name": "team-b"},
                     "user": "erin", "groups": ["dev", "ml"], "uid": "uid-erin", "extra": {"scopes": ["a"]}}]


def _volume(name: str, **kind: Any) -> list[Json]:
    return [{"name": name, **kind}]


DENIALS: list[tuple[str, Json, str, str]] = [
    ("queue", pod(labels={"gpufleet.dev/queue": "infer"}), "vision",
     "project ml-vision does not allow queue infer (allowed: vision-train, vision-infer)"),
    ("image allowed", pod(image="foo/x:1"), "vision",
     "project ml-vision does not allow image docker.io/foo/x:1: allowed ghcr.io/acme/*"),
    ("image denied", pod(image="ghcr.io/acme/bad-miner"), "vision",
     "project ml-vision does not allow image ghcr.io/acme/bad-miner:latest: denied ghcr.io/acme/bad*"),
    ("image digest", pod(image="ghcr.io/acme/serve:2"), "serving",
     "project ml-infer does not allow image ghcr.io/acme/serve:2: not pinned by digest (requireDigest)"),
    ("volume kind", pod(volumes=_volume("root", hostPath={"path": "/data"})), "vision",
     "project ml-vision does not allow volume kind hostPath in volume root (allowed: persistentVolumeClaim, "
     "configMap, secret, emptyDir, projected, downwardAPI, ephemeral)"),
    ("storage class", pod(volumes=_volume("scratch", ephemeral={"volumeClaimTemplate": {"spec": {
        "storageClassName": "slow", "accessModes": ["ReadWriteOnce"]}}})), "vision",
     "project ml-vision does not allow storage class slow in volume scratch (allowed: fast)"),
    ("claim name", pod(volumes=_volume("data", persistentVolumeClaim={"claimName": "nlp-corpus"})), "vision",
     "project ml-vision does not allow claim nlp-corpus in volume data (allowed: vision-*)"),
    ("priority class", pod(priorityClassName="inference-critical", priority=1000), "vision",
     "project ml-vision does not allow priority class inference-critical (allowed: batch)"),
    ("non-preemptible", pod(labels={"gpufleet.dev/preemptible": "false"}), "vision",
     "project ml-vision does not allow non-preemptible work"),
    ("forged gpu-index", pod(annotations={"gpufleet.dev/gpu-blocks": "1", "gpufleet.dev/gpu-index": "0,1,2,3"}),
     "vision", "annotation gpufleet.dev/gpu-index is written by the scheduler at binding; a new pod may not set it"),
    ("forged mps limit", pod(annotations={"gpufleet.dev/mps-mem-limit": "0=81920M"}), "vision",
     "annotation gpufleet.dev/mps-mem-limit is written by the scheduler at binding; a new pod may not set it"),
    ("nodeName preset", pod(nodeName="n0", annotations={"gpufleet.dev/gpu-blocks": "1"}), "vision",
     "spec.nodeName is set (n0): pods of schedulerName gpufleet are placed by the scheduler, leave it empty"),
    ("bad project", pod(), "broken",
     'project broken cannot be read (spec.images.allowed: must be a list, got "x"); pods of namespace broken '
     "are refused until it is fixed"),
    ("owned queue, no project", pod(labels={"gpufleet.dev/queue": "vision-train"}), "scratch",
     "queue vision-train belongs to project ml-vision, not to namespace scratch's"),
]


def test_each_rule_denies_with_its_message(tmp_path: Path) -> None:
    store, clock = cluster()
    got: dict[str, tuple[int, str]] = {}

    async def body(post: Post, _: TenancyService) -> None:
        for name, obj, namespace, _message in DENIALS:
            got[name] = denial(await post(request(copy.deepcopy(obj), namespace=namespace)))
        # the pending-gang cap: carol has two pending gangs in ml-vision
        got["pending gangs"] = denial(await post(request(pod(), user="carol")))
        assert patched(pod(labels={"gpufleet.dev/pod-group": "g1"}),  # joining one of them adds no gang
                       await post(request(pod(labels={"gpufleet.dev/pod-group": "g1"}), user="carol")))

    run(tmp_path, store, clock, body)
    expected = {name: (403, message) for name, _, _, message in DENIALS}
    expected["pending gangs"] = (403, "user carol has 2 pending gangs in project ml-vision, its maxPendingGangsPerUser")
    assert got == expected


def test_fractional_pods_are_wired_and_stamped_in_one_patch(tmp_path: Path) -> None:
    store, clock = cluster()
    fractional = pod(annotations={"gpufleet.dev/gpu-blocks": "25"})

    async def body(post: Post, _: TenancyService) -> None:
        after = patched(fractional, await post(request(copy.deepcopy(fractional))))
        assert after["metadata"]["annotations"] == {"gpufleet.dev/gpu-blocks": "25", "gpufleet.dev/submitted-by": "bob"}
        share = {"gpufleet.dev/mps-share": "1"}
        assert after["spec"]["containers"][0]["resources"] == {"limits": share, "requests": share}
        assert "volumes" not in after["spec"]  # the device plugin mounts the GPU's MPS pipe, not the pod spec
        # re-admitted after its wiring: nothing more to do
        assert await post(request(copy.deepcopy(after))) == {"uid": "u-1", "allowed": True}
        forged = copy.deepcopy(fractional)
        forged["spec"]["volumes"] = [{"name": "gpufleet-mps", "hostPath": {"path": "/data", "type": "Directory"}}]
        assert denial(await post(request(forged))) == (
            403, "project ml-vision does not allow volume kind hostPath in volume gpufleet-mps (allowed: "
                 "persistentVolumeClaim, configMap, secret, emptyDir, projected, downwardAPI, ephemeral)")

    run(tmp_path, store, clock, body)


def test_pod_groups_are_checked_at_creation(tmp_path: Path) -> None:
    store, clock = cluster()
    group = {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g9"},
             "spec": {"minMember": 4, "queue": "team-b"}}
    kind = ("gpufleet.dev", "v1alpha1", "PodGroup")

    async def body(post: Post, _: TenancyService) -> None:
        assert denial(await post(request(copy.deepcopy(group), kind=kind, user="bob"))) == (
            403, "project ml-vision does not allow queue team-b (allowed: vision-train, vision-infer)")
        assert await post(request(copy.deepcopy(group), kind=kind, user="alice")) == {"uid": "u-1", "allowed": True}
        critical = {**group, "spec": {"minMember": 4, "priorityClassName": "inference-critical"}}
        assert denial(await post(request(critical, kind=kind))) == (
            403, "project ml-vision does not allow priority class inference-critical (allowed: batch)")
        assert await post(request(critical, kind=kind, namespace="serving")) == {"uid": "u-1", "allowed": True}

    run(tmp_path, store, clock, body)


def test_projects_changed_after_start_are_seen(tmp_path: Path) -> None:
    store, clock = cluster()

    async def body(post: Post, _: TenancyService) -> None:
        assert (await post(request(pod(), namespace="fresh")))["allowed"] is True
        store.put(Kind.PROJECT, _project("fresh", {"namespaces": {"names": ["fresh"]}, "queues": ["f"],
                                                    "defaultQueue": "f", "images": {"denied": ["**"]}}))
        for _ in range(1000):  # the watch delivers it within milliseconds; a loaded machine may take longer
            response = await post(request(pod(), namespace="fresh"))
            if not response["allowed"]:
                break
            await asyncio.sleep(0.01)
        assert denial(response) == (403, "project fresh does not allow image ghcr.io/acme/train:1: denied **")

    run(tmp_path, store, clock, body)


def test_a_failed_review_refuses_with_the_reason(tmp_path: Path) -> None:
    store, clock = cluster()
    store.fail("create", 503, kind=Kind.SUBJECT_ACCESS_REVIEW, message="etcd is away")

    async def body(post: Post, _: TenancyService) -> None:
        response = await post(request(pod(labels={"gpufleet.dev/queue": "team-b"}), user="alice"))
        assert denial(response) == (500, "cannot ask the API server whether user alice may use queue team-b: "
                                         "503 ServiceUnavailable: etcd is away")
        # not cached: the next try asks again and is granted
        assert (await post(request(pod(labels={"gpufleet.dev/queue": "team-b"}), user="alice")))["allowed"] is True

    run(tmp_path, store, clock, body)


def test_without_the_project_crd_pods_are_only_stamped(tmp_path: Path) -> None:
    clock = VirtualClock()
    store = FakeCluster(clock, not_served=[Kind.PROJECT])

    async def body(post: Post, service: TenancyService) -> None:
        assert service.ready
        obj = pod(image="anything:1", labels={"gpufleet.dev/queue": "whatever"})
        after = patched(obj, await post(request(copy.deepcopy(obj))))
        assert after["metadata"]["annotations"] == {"gpufleet.dev/submitted-by": "bob"}

    run(tmp_path, store, clock, body)


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE"])
def test_only_creation_is_checked(tmp_path: Path, operation: str) -> None:
    store, clock = cluster()

    async def body(post: Post, _: TenancyService) -> None:
        review = request(pod(image="evil.io/x", nodeName="n0"))
        review["request"]["operation"] = operation
        assert await post(review) == {"uid": "u-1", "allowed": True}

    run(tmp_path, store, clock, body)


def test_the_validating_pass_checks_the_final_object_without_patching(tmp_path: Path) -> None:
    store, clock = cluster()
    team_b = pod(labels={"gpufleet.dev/queue": "team-b"})

    async def body(post: Post, _: TenancyService) -> None:
        mutated = patched(team_b, await post(request(copy.deepcopy(team_b), user="alice")))
        assert await post(request(copy.deepcopy(mutated), user="alice"), "/validate") == {"uid": "u-1", "allowed": True}
        assert denial(await post(request(copy.deepcopy(team_b), user="alice"), "/validate")) == (
            403, 'annotation gpufleet.dev/submitted-by must be "alice" (gpufleet\'s mutating webhook writes it), '
                 "got absent")
        forged = copy.deepcopy(mutated)
        forged["metadata"]["annotations"]["gpufleet.dev/queue-grant"] = "infer"
        assert denial(await post(request(forged, user="alice"), "/validate")) == (
            403, 'annotation gpufleet.dev/queue-grant must be "team-b" (gpufleet\'s mutating webhook writes it), '
                 'got "infer"')
        by_bob = pod(annotations={"gpufleet.dev/submitted-by": "bob", "gpufleet.dev/queue-grant": "vision-train"})
        assert denial(await post(request(by_bob, user="bob"), "/validate")) == (
            403, "annotation gpufleet.dev/queue-grant must be absent (gpufleet's mutating webhook writes it), "
                 'got "vision-train"')
        bad = pod(image="foo/x:1", annotations={"gpufleet.dev/submitted-by": "bob"})
        assert denial(await post(request(bad), "/validate")) == (
            403, "project ml-vision does not allow image docker.io/foo/x:1: allowed ghcr.io/acme/*")

    run(tmp_path, store, clock, body)


def test_debug_containers_added_later_are_held_to_the_image_rules(tmp_path: Path) -> None:
    store, clock = cluster()

    def debug(image: str) -> Json:
        obj = pod(annotations={"gpufleet.dev/submitted-by": "bob"}, nodeName="n0")
        obj["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": image}]
        review = request(obj)
        review["request"].update(operation="UPDATE", subResource="ephemeralcontainers")
        return review

    async def body(post: Post, _: TenancyService) -> None:
        assert denial(await post(debug("evil.io/shell"))) == (
            403, "project ml-vision does not allow image evil.io/shell:latest: allowed ghcr.io/acme/*")
        assert await post(debug("ghcr.io/acme/debug:1")) == {"uid": "u-1", "allowed": True}

    run(tmp_path, store, clock, body)


def test_the_command_serves_tenancy_against_an_api_server(tmp_path: Path) -> None:
    """``gpufleet webhook --tenancy --server URL`` as a process: ready once it has read the cluster,
    then it refuses by the Projects it read."""
    import http.client
    import signal
    import subprocess
    import sys
    import threading
    import time

    from .test_webhook_server import _free_port

    store, _ = cluster()
    loop = asyncio.new_event_loop()
    emulator = ApiServerEmulator(store=store)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(emulator.__aenter__(), loop).result(30)
    ca_file, cert_file, key_file = make_pair(tmp_path, "one")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "webhook", "--tenancy", "--server", emulator.url_text, "--host", "127.0.0.1",
         "--port", str(port), "--cert-file", str(cert_file), "--key-file", str(key_file), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def call(method: str, path: str, body: Json | None = None) -> tuple[int, str]:
        connection = http.client.HTTPSConnection("localhost", port, timeout=10, context=_client_context(ca_file))
        try:
            connection.request(method, path, body=json.dumps(body) if body else None,
                                headers={"Content-Type": "application/json"})
            reply = connection.getresponse()
            return reply.status, reply.read().decode()
        finally:
            connection.close()

    try:
        deadline = time.monotonic() + 30
        ready = None
        while time.monotonic() < deadline and ready != 200:
            try:
                ready = call("GET", "/readyz")[0]
            except (ConnectionRefusedError, ConnectionResetError):
                assert proc.poll() is None, proc.communicate()[1]
            if ready != 200:
                time.sleep(0.1)
        assert ready == 200
        status, text = call("POST", "/mutate", request(pod(image="foo/x:1")))
        assert status == 200
        assert denial(json.loads(text)["response"]) == (
            403, "project ml-vision does not allow image docker.io/foo/x:1: allowed ghcr.io/acme/*")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        asyncio.run_coroutine_threadsafe(emulator.__aexit__(None, None, None), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr


def test_claims_made_apart_from_pods_are_held_to_the_volume_policy(tmp_path: Path) -> None:
    """A PersistentVolumeClaim of a Project's namespace: its StorageClass and name must be allowed, or
    a pod could mount, through a claim made apart, storage its Project was not given."""
    store, clock = cluster()
    kind = ("", "v1", "PersistentVolumeClaim")

    def claim(name: str, storage_class: str | None) -> Json:
        spec: Json = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        if storage_class is not None:
            spec["storageClassName"] = storage_class
        return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}

    async def body(post: Post, _: TenancyService) -> None:
        assert await post(request(claim("vision-data", "fast"), kind=kind), "/validate") == {
            "uid": "u-1", "allowed": True}
        assert denial(await post(request(claim("vision-data", "premium"), kind=kind), "/validate")) == (
            403, "project ml-vision does not allow storage class premium in persistentvolumeclaim vision-data "
                 "(allowed: fast)")
        assert denial(await post(request(claim("corpus", "fast"), kind=kind), "/validate")) == (
            403, "project ml-vision does not allow claim corpus in persistentvolumeclaim corpus (allowed: vision-*)")
        # a namespace whose Project has no volume rules, and one in no Project: not refused
        assert (await post(request(claim("any", "premium"), kind=kind, namespace="nlp"), "/validate"))["allowed"]
        assert (await post(request(claim("any", "premium"), kind=kind, namespace="loose"), "/validate"))["allowed"]

    run(tmp_path, store, clock, body)
