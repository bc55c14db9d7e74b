"""The controller and Projects: informed with Namespaces, passed into the engine's snapshot, and
the Project status (NamespaceConflict) written through the real lightkube adapter over HTTP against
the API server emulator, only when it changes."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.domain import LabelSelector, Namespace, Project
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.convert import (
    CONVERTED_KINDS,
    ConversionError,
    build_snapshot,
    convert_object,
    relevant_change,
)
from gpufleet.kube.controller.informers import INFORMED_KINDS
from gpufleet.testing.emulator import ApiServerEmulator

from .controller_objects import bound_pods, node, pod, queue
from .test_controller_http import controller, emulator, eventually, start, stop  # noqa: F401  (fixture)

GROUP = "gpufleet.dev"


def project(name: str, names: list[str] | None = None, selector: dict[str, Any] | None = None,
            queues: list[str] | None = None) -> dict[str, Any]:
    namespaces: dict[str, Any] = {}
    if names is not None:
        namespaces["names"] = names
    if selector is not None:
        namespaces["selector"] = selector
    return {"metadata": {"name": name}, "spec": {"namespaces": namespaces, "queues": queues or []}}


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}}}


# --- conversion and the snapshot ----------------------------------------------------------------


def test_projects_and_namespaces_are_informed_and_converted() -> None:
    assert Kind.PROJECT in CONVERTED_KINDS and Kind.NAMESPACE in CONVERTED_KINDS
    assert Kind.PROJECT in INFORMED_KINDS and Kind.NAMESPACE in INFORMED_KINDS
    converted = convert_object(Kind.PROJECT, project("vision", ["ml"], {"matchLabels": {"team": "vision"}}, ["v"]))
    assert converted == Project(name="vision", namespace_names=("ml",), queues=("v",),
                                namespace_selector=LabelSelector(match_labels=(("team", "vision"),)))  # fmt: skip
    assert convert_object(Kind.NAMESPACE, namespace("ml", {"team": "vision"})) == Namespace(
        "ml", {"kubernetes.io/metadata.name": "ml", "team": "vision"})
    with pytest.raises(ConversionError, match=r"^Project bad: spec: defaultQueue must be one of queues$"):
        convert_object(Kind.PROJECT, {"metadata": {"name": "bad"}, "spec": {"defaultQueue": "x"}})
    with pytest.raises(ConversionError, match=r"^Namespace \?: metadata.name: required field missing$"):
        convert_object(Kind.NAMESPACE, {"metadata": {}})


def test_the_snapshot_carries_projects_sorted_and_the_namespaces() -> None:
    ns = [convert_object(Kind.NAMESPACE, namespace("ml", {"team": "vision"}))]
    without = build_snapshot({Kind.NAMESPACE: ns}).snapshot
    assert without.projects == () and without.namespaces == tuple(ns)
    projects = [convert_object(Kind.PROJECT, project(name, [name])) for name in ("b", "a")]
    snapshot = build_snapshot({Kind.PROJECT: projects, Kind.NAMESPACE: ns}).snapshot
    assert [p.name for p in snapshot.projects] == ["a", "b"]
    assert snapshot.namespaces == (Namespace("ml", {"kubernetes.io/metadata.name": "ml", "team": "vision"}),)


def test_a_project_default_queue_resolves_pods_that_name_none() -> None:
    """The controller's view files a pod that names no queue under its Project's defaultQueue, as the
    engine does (docs/semantics-notes.md, "Projects")."""
    objects = {
        Kind.QUEUE: [convert_object(Kind.QUEUE, queue("team-a", 8))],
        Kind.PROJECT: [convert_object(Kind.PROJECT, project("vision", ["ml"], queues=["team-a"]) | {
            "spec": {"namespaces": {"names": ["ml"]}, "queues": ["team-a"], "defaultQueue": "team-a"}})],
        Kind.POD: [convert_object(Kind.POD, {"metadata": {"name": "p", "namespace": "ml"},
                                             "spec": {"schedulerName": "gpufleet", "containers": [{"name": "c"}]}})],
    }
    view = build_snapshot(objects)
    assert view.queue_of == {"ml/p": "team-a"}


def test_what_changes_of_projects_and_namespaces_start_a_cycle() -> None:
    old = project("vision", ["ml"])
    assert relevant_change(Kind.PROJECT, None, old)
    assert relevant_change(Kind.PROJECT, old, project("vision", ["ml", "ml2"]))
    assert not relevant_change(Kind.PROJECT, old, {**old, "status": {"namespaceCount": 1}})  # our own write
    assert relevant_change(Kind.NAMESPACE, namespace("ml"), namespace("ml", {"team": "vision"}))
    same = namespace("ml")
    assert not relevant_change(Kind.NAMESPACE, same, {**same, "status": {"phase": "Active"}})


# --- the status, over HTTP ----------------------------------------------------------------------


def _condition(store: Any, name: str) -> dict[str, Any]:
    status = (store.object(Kind.PROJECT, "", name) or {}).get("status") or {}
    [condition] = status.get("conditions") or [{}]
    return dict(condition)


def _project_writes(store: Any) -> int:
    return sum(1 for c in store.calls if c.op == "patch_status" and c.kind is Kind.PROJECT)


@pytest.mark.asyncio
async def test_namespace_conflict_is_reported_on_both_projects_and_cleared(emulator: ApiServerEmulator) -> None:  # noqa: F811
    store = emulator.store
    store.put(Kind.NODE, node("n0"))
    store.put(Kind.QUEUE, queue("team-a", 8))
    store.put(Kind.NAMESPACE, namespace("ml"))
    store.put(Kind.NAMESPACE, namespace("nlp"))
    store.put(Kind.PROJECT, project("vision", ["ml"], queues=["team-a"]))
    store.put(Kind.PROJECT, project("nlp", ["nlp"]))
    c = controller(emulator, "projects")
    task = await start(c)
    try:
        await eventually(lambda: _condition(store, "vision").get("status") == "False"
                         and _condition(store, "nlp").get("status") == "False", what="clear statuses")  # fmt: skip
        vision = store.object(Kind.PROJECT, "", "vision")["status"]  # type: ignore[index]
        assert vision["namespaceCount"] == 1
        assert {k: v for k, v in vision["conditions"][0].items() if k != "lastTransitionTime"} == {
            "type": "NamespaceConflict", "status": "False", "reason": "NoConflict", "message": ""}

        # A third Project selects namespaces by label; labelling ml makes it claim ml too.
        store.put(Kind.PROJECT, project("intruder", selector={"matchLabels": {"team": "vision"}}))
        store.put(Kind.NAMESPACE, namespace("ml", {"team": "vision"}))
        await eventually(lambda: _condition(store, "vision").get("status") == "True"
                         and _condition(store, "intruder").get("status") == "True", what="conflict reported")  # fmt: skip
        assert _condition(store, "vision")["message"] == "namespace ml is also claimed by project intruder"
        assert _condition(store, "vision")["reason"] == "NamespaceClaimedTwice"
        assert _condition(store, "intruder")["message"] == "namespace ml is also claimed by project vision"
        assert _condition(store, "nlp")["status"] == "False"
        assert store.object(Kind.PROJECT, "", "vision")["status"]["namespaceCount"] == 0  # type: ignore[index]

        # Written only on change: a cycle for something else writes no Project status.
        writes = _project_writes(store)
        store.put(Kind.QUEUE, queue("open", 8))  # listed by no Project: any namespace may use it
        store.put(Kind.POD, pod("p0", queue="open", namespace="other"))
        await eventually(lambda: "other/p0" in bound_pods(store), what="another cycle")
        assert _project_writes(store) == writes

        # Unlabelled: the conflict clears on both.
        store.put(Kind.NAMESPACE, namespace("ml"))
        await eventually(lambda: _condition(store, "vision").get("status") == "False"
                         and _condition(store, "intruder").get("status") == "False", what="conflict cleared")  # fmt: skip
        assert _condition(store, "vision")["message"] == ""
    finally:
        await stop(task, c)


@pytest.mark.asyncio
async def test_a_namespace_claimed_by_three_projects_names_all_others(emulator: ApiServerEmulator) -> None:  # noqa: F811
    store = emulator.store
    for name in ("a", "b", "c"):
        store.put(Kind.PROJECT, project(name, ["shared", name]))
    c = controller(emulator, "projects")
    task = await start(c)
    try:
        await eventually(lambda: all(_condition(store, n).get("status") == "True" for n in "abc"), what="reported")
        assert _condition(store, "a")["message"] == "namespace shared is also claimed by projects b, c"
        assert _condition(store, "b")["message"] == "namespace shared is also claimed by projects a, c"
        assert store.object(Kind.PROJECT, "", "c")["status"]["namespaceCount"] == 1  # type: ignore[index]
    finally:
        await stop(task, c)


@pytest.mark.asyncio
async def test_without_the_project_crd_the_controller_schedules_as_before() -> None:
    """CRDs managed apart and not yet upgraded: Projects are not served (404); the controller still
    becomes ready and binds, and reads Projects once their CRD is there."""
    from gpufleet.testing.fake_cluster import FakeCluster

    from .controller_objects import clock_of, make_controller, running, small_cluster, until

    cluster = FakeCluster(not_served=[Kind.PROJECT])
    small_cluster(cluster, pending=2)
    controller = make_controller(cluster)
    async with running(controller):
        await until(lambda: len(bound_pods(cluster)) == 2, what="2 pods bound")
        cluster.not_served.clear()
        cluster.put(Kind.PROJECT, project("vision", ["ml"], queues=["team-a"]))
        for _ in range(40):  # the informer retries on its backoff (at most 10 s of virtual time)
            if _condition(cluster, "vision").get("status") == "False":
                break
            await clock_of(cluster).advance(0.5)
        assert _condition(cluster, "vision")["reason"] == "NoConflict"
