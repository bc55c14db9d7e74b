"""The tenancy admission as the chart wires it: the entries of the rendered Mutating- and
ValidatingWebhookConfiguration (their rules and matchConditions, the CEL evaluated with cel-python)
decide which requests reach ``/mutate`` and ``/validate``, in the API server's order (every mutating
entry, then every validating one); the requests go as AdmissionReview v1 JSON over HTTPS to the webhook,
whose cluster comes from the HTTP API server emulator (as in test_webhook_tenancy)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from .test_webhook_chart import render
from .test_webhook_tenancy import Json, Post, cluster, denial, patched, pod, request, run

celpy = pytest.importorskip("celpy", reason="cel-python (the dev extra) evaluates the matchConditions")

PODGROUP_KIND = ("gpufleet.dev", "v1alpha1", "PodGroup")


def _entries(values: Json) -> list[Json]:
    """The webhook entries of the rendered chart in the API server's order: mutating, then validating."""
    docs = render(values)
    entries: list[Json] = []
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for doc in docs:
            if doc["kind"] == kind:
                entries += doc["webhooks"]
    return entries


def _matches(entry: Json, review: Json) -> bool:
    req = review["request"]
    resource = req["resource"]["resource"] + (f"/{req['subResource']}" if req.get("subResource") else "")
    if not any(req["resource"]["group"] in rule["apiGroups"] and resource in rule["resources"]
               and req["operation"] in rule["operations"] for rule in entry["rules"]):  # fmt: skip
        return False
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(req["object"]),
                  "request": celpy.json_to_cel({**req, "subResource": req.get("subResource", "")})}
    return all(bool(env.program(env.compile(c["expression"])).evaluate(activation))
               for c in entry.get("matchConditions", []))


async def admit(post: Post, entries: list[Json], review: Json) -> tuple[list[str], Json]:
    """What the API server does with ``review``: the entries called and the last answer (the first
    refusal stops it). A mutating entry's patch is applied before the next entry sees the object."""
    called: list[str] = []
    answer: Json = {"uid": review["request"]["uid"], "allowed": True}
    for entry in entries:
        if not _matches(entry, review):
            continue
        path = entry["clientConfig"]["service"]["path"]
        called.append(f"{entry['name']} {path}")
        answer = await post(copy.deepcopy(review), path)
        if not answer["allowed"]:
            return called, answer
        if path == "/mutate":
            review = copy.deepcopy(review)
            review["request"]["object"] = patched(review["request"]["object"], answer)
    return called, {**answer, "object": review["request"]["object"]}


ON = {"webhook": {"enabled": True}}


def test_the_chart_sends_an_ordinary_gpufleet_pod_to_mutate_then_validate_and_admits_it(tmp_path: Any) -> None:
    store, clock = cluster()
    entries = _entries(ON)
    whole = pod()
    whole["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    fractional = pod(annotations={"gpufleet.dev/gpu-blocks": "25"})
    group = {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g9"},
             "spec": {"minMember": 4}}
    other = pod()
    other["spec"]["schedulerName"] = "default-scheduler"

    async def body(post: Post, _: Any) -> None:
        called, answer = await admit(post, entries, request(copy.deepcopy(whole)))
        assert called == ["tenancy.gpufleet.dev /mutate", "tenancy.gpufleet.dev /validate"]
        assert answer["allowed"] is True
        assert answer["object"]["metadata"]["annotations"] == {"gpufleet.dev/submitted-by": "bob"}
        # a fractional pod: /mutate once (its own entry wires it and stamps it), then /validate, where
        # the gpu-visibility entry also sees the mps-share it was given (and lets it pass)
        called, answer = await admit(post, entries, request(copy.deepcopy(fractional)))
        assert called == ["fractional-gpus.gpufleet.dev /mutate", "tenancy.gpufleet.dev /validate",
                          "gpu-visibility.gpufleet.dev /validate"]
        assert answer["allowed"] is True
        assert answer["object"]["metadata"]["annotations"] == {
            "gpufleet.dev/gpu-blocks": "25", "gpufleet.dev/submitted-by": "bob"}
        called, answer = await admit(post, entries, request(copy.deepcopy(group), kind=PODGROUP_KIND))
        assert called == ["tenancy.gpufleet.dev /mutate", "tenancy.gpufleet.dev /validate"]
        assert answer["allowed"] is True
        assert await admit(post, entries, request(copy.deepcopy(other))) == ([], {
            "uid": "u-1", "allowed": True, "object": other})
        # a tenant's debug container: through the tenancy entry, fractional pod or not
        for target in (whole, fractional):
            debug = copy.deepcopy(target)
            debug["spec"]["nodeName"] = "n0"
            debug["metadata"]["annotations"]["gpufleet.dev/submitted-by"] = "bob"
            debug["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "evil.io/shell"}]
            review = request(debug)
            review["request"].update(operation="UPDATE", subResource="ephemeralcontainers")
            called, answer = await admit(post, entries, review)
            assert called == ["tenancy.gpufleet.dev /mutate"]
            assert denial(answer) == (
                403, "project ml-vision does not allow image evil.io/shell:latest: allowed ghcr.io/acme/*")

    run(tmp_path, store, clock, body)


def test_without_tenancy_only_fractional_pods_reach_the_webhook(tmp_path: Any) -> None:
    store, clock = cluster()
    entries = _entries({"webhook": {"enabled": True, "tenancy": {"enabled": False}}})
    assert [e["name"] for e in entries] == ["fractional-gpus.gpufleet.dev", "gpu-visibility.gpufleet.dev"]
    whole = pod()

    async def body(post: Post, _: Any) -> None:
        assert (await admit(post, entries, request(copy.deepcopy(whole))))[0] == []
        called, answer = await admit(post, entries, request(pod(annotations={"gpufleet.dev/gpu-blocks": "25"})))
        assert called == ["fractional-gpus.gpufleet.dev /mutate", "gpu-visibility.gpufleet.dev /validate"]
        assert answer["allowed"] is True

    run(tmp_path, store, clock, body)


WHY = "a pod may not choose the GPUs it sees; request GPUs as resources"


@pytest.mark.parametrize("tenancy", [True, False])
def test_the_chart_sends_pods_of_any_scheduler_that_choose_gpus_to_the_visibility_check(
        tmp_path: Any, tenancy: bool) -> None:
    store, clock = cluster()
    entries = _entries({"webhook": {"enabled": True, "tenancy": {"enabled": tenancy}}})
    sneaky = pod()
    sneaky["spec"]["schedulerName"] = "default-scheduler"
    sneaky["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    plain = pod()
    plain["spec"]["schedulerName"] = "default-scheduler"
    cdi = copy.deepcopy(plain)
    cdi["metadata"]["annotations"]["cdi.k8s.io/gpus"] = "nvidia.com/gpu=all"
    relabel = request(copy.deepcopy(cdi))
    relabel["request"].update(operation="UPDATE", oldObject=plain)
    unchanged = request(copy.deepcopy(cdi))
    unchanged["request"].update(operation="UPDATE", oldObject=cdi)
    nudged = copy.deepcopy(plain)
    nudged["metadata"]["annotations"]["team"] = "b"
    ordinary_update = request(nudged)
    ordinary_update["request"].update(operation="UPDATE", oldObject=plain)

    async def body(post: Post, _: Any) -> None:
        called, answer = await admit(post, entries, request(copy.deepcopy(sneaky)))
        assert called == ["gpu-visibility.gpufleet.dev /validate"]
        assert denial(answer) == (403, f"spec.containers[0].env[0] (container main) sets NVIDIA_VISIBLE_DEVICES: {WHY}")
        called, answer = await admit(post, entries, relabel)  # a CDI annotation added later
        assert called == ["gpu-visibility.gpufleet.dev /validate"]
        assert denial(answer) == (403, f"metadata.annotations[cdi.k8s.io/gpus] names CDI devices: {WHY}")
        called, answer = await admit(post, entries, unchanged)  # sent (it carries one), left as it was
        assert called == ["gpu-visibility.gpufleet.dev /validate"] and answer["allowed"] is True
        # every other pod and update: never sent
        assert (await admit(post, entries, request(copy.deepcopy(plain))))[0] == []
        assert (await admit(post, entries, ordinary_update))[0] == []

    run(tmp_path, store, clock, body)
