"""The view models over the bundled demo snapshot (examples/demo.yaml): what each page shows, and
what a caller who may see only some queues or projects does not."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpufleet.adapters import load_objects_file, load_snapshot_file
from gpufleet.domain import MILLI, Project
from gpufleet.web.access import EVERYTHING, Visibility
from gpufleet.web.fleet import FREE, NO_PROJECT, Fleet
from gpufleet.web.source import build_fleet
from gpufleet.web.views.cluster import OTHER, cluster_group, cluster_view
from gpufleet.web.views.jobs import JobFilters, blocking, job_detail, job_list
from gpufleet.web.views.queues import queues_view

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"

TEAM_B = Visibility(queues=frozenset({"team-b"}))


def test_fleet_holds_the_engines_decisions_and_gpu_cells(demo_fleet: Fleet) -> None:
    q = demo_fleet.queue_names.index
    a1 = demo_fleet.node_index["gpu-a1"]
    assert list(demo_fleet.grid[a1]) == [q("team-b")] * 8
    b1 = demo_fleet.node_index["gpu-b1"]
    assert demo_fleet.grid[b1, 0] == FREE and demo_fleet.blocks[b1, 0] == 40  # nb-alice's 40 blocks
    assert [s.pod for s in demo_fleet.shares[(b1, 0)]] == ["ml/nb-alice"]
    assert demo_fleet.job_by_key["ml/llama-ft"].decision == "bind"
    assert demo_fleet.job_by_key["ml/b-train-2"].decision == "evict"
    assert demo_fleet.order["team-a"] == ("ml/llama-ft", "ml/big-run")


def test_cluster_view_counts_groups_and_bars(demo_fleet: Fleet) -> None:
    view = cluster_view(demo_fleet, EVERYTHING, "rack")
    racks = {g.key: g for g in view.groups}
    assert set(racks) == {"rack-a", "rack-b"}
    assert racks["rack-a"].nodes == 2 and racks["rack-a"].gpus == 16 and racks["rack-a"].held == 14
    assert racks["rack-b"].held == 0.4  # one fractional pod of 40 blocks
    names = {view.names[q]: n for q, n in racks["rack-a"].bar}
    assert names == {"team-b": 14}
    assert view.gpus == 24 and view.nodes == 3


def test_cluster_view_hides_queues_the_caller_may_not_see(demo_fleet: Fleet) -> None:
    view = cluster_view(demo_fleet, Visibility(queues=frozenset({"notebooks"})), "rack")
    racks = {g.key: g for g in view.groups}
    assert racks["rack-a"].bar == ((OTHER, 14.0),)
    page = cluster_group(demo_fleet, Visibility(queues=frozenset({"notebooks"})), "rack", "rack-a")
    assert page is not None
    cells = [c for n in page.nodes for d in n.domains for c in d]
    assert {c.color for c in cells} == {OTHER, FREE} and all(c.pod is None for c in cells)


def test_cluster_view_colours_by_project(demo_fleet: Fleet) -> None:
    snapshot = demo_fleet.snapshot
    fleet = Fleet.build(replace(snapshot, projects=(Project("vision", namespace_names=("ml",)),)))
    assert fleet.project_names == ["vision", NO_PROJECT]
    view = cluster_view(fleet, EVERYTHING, "rack", color="project")
    racks = {g.key: g for g in view.groups}
    assert view.names == ("vision", NO_PROJECT) and racks["rack-a"].bar == ((0, 14.0),)
    # a member of the project sees its pods whatever their queue; a stranger sees them as OTHER
    member = cluster_group(fleet, Visibility(projects=frozenset({"vision"})), "rack", "rack-a", color="project")
    assert member is not None and member.nodes[0].domains[0][0].pod == "ml/b-train-1"
    stranger = cluster_view(fleet, Visibility(projects=frozenset({"other"})), "rack", color="project")
    assert {g.key: g.bar for g in stranger.groups}["rack-a"] == ((OTHER, 14.0),)
    b = cluster_group(fleet, EVERYTHING, "rack", "rack-b", color="project")
    assert b is not None and b.nodes[0].domains[0][0].shares == ((0, 40, "ml/nb-alice"),)


def test_cluster_group_shows_nodes_by_nvlink_domain_and_pages(demo_fleet: Fleet) -> None:
    page = cluster_group(demo_fleet, EVERYTHING, "rack", "rack-a", limit=1)
    assert page is not None and page.total == 2 and page.next_offset == 1
    node = page.nodes[0]
    assert node.name == "gpu-a1" and [len(d) for d in node.domains] == [4, 4]
    assert node.domains[0][0].pod == "ml/b-train-1"
    rest = cluster_group(demo_fleet, EVERYTHING, "rack", "rack-a", offset=1)
    assert rest is not None and [n.name for n in rest.nodes] == ["gpu-a2"] and rest.next_offset is None
    b = cluster_group(demo_fleet, EVERYTHING, "rack", "rack-b")
    assert b is not None
    frac = b.nodes[0].domains[0][0]
    assert frac.shares == ((demo_fleet.queue_names.index("notebooks"), 40, "ml/nb-alice"),) and frac.free_blocks == 60
    assert cluster_group(demo_fleet, EVERYTHING, "rack", "rack-z") is None
    assert cluster_group(demo_fleet, EVERYTHING, "nonsense", "rack-a") is None


def test_queues_view_is_the_engines_forest(demo_fleet: Fleet) -> None:
    rows = {r.name: r for r in queues_view(demo_fleet, EVERYTHING).rows}
    b = rows["team-b"].bars[0]
    assert (b.quota, b.usage, b.borrowed, b.limit) == (8 * MILLI, 14 * MILLI, 6 * MILLI, 16 * MILLI)
    a = rows["team-a"].bars[0]
    assert a.usage == 0 and a.lent == 6 * MILLI  # team-b borrows 6 of team-a's unused 8
    assert rows["team-a"].pending == ("ml/llama-ft", "ml/big-run") and rows["team-a"].pending_count == 2
    assert rows["team-a"].depth == 1 and rows["research"].depth == 0 and not rows["research"].leaf
    assert rows["team-a"].fair_rank == 1 and rows["team-b"].fair_rank == 2  # less dominant usage goes first
    assert rows["research"].bars[0].quota == 16 * MILLI


def test_queues_view_masks_ancestors_and_hides_others(demo_fleet: Fleet) -> None:
    rows = {r.name: r for r in queues_view(demo_fleet, TEAM_B).rows}
    assert set(rows) == {"research", "team-b"}
    assert rows["research"].masked and rows["research"].bars == () and not rows["team-b"].masked


def test_job_list_filters_and_facets(demo_fleet: Fleet) -> None:
    everything = job_list(demo_fleet, EVERYTHING, JobFilters())
    assert everything.total == len(demo_fleet.jobs) == 9
    pending = job_list(demo_fleet, EVERYTHING, JobFilters(state="pending"))
    assert {j.key for j in pending.rows} == {"ml/big-run", "ml/llama-ft", "ml/nb-bob", "ml/serve-1", "ml/serve-2"}
    assert [j.key for j in job_list(demo_fleet, EVERYTHING, JobFilters(queue="serving", text="2")).rows] == ["ml/serve-2"]
    assert "team-a" in everything.facets["queue"] and "running" in everything.facets["state"]
    assert job_list(demo_fleet, EVERYTHING, JobFilters(model="NVIDIA-H100-80GB-HBM3")).total == 7
    tenant = job_list(demo_fleet, TEAM_B, JobFilters())
    assert {j.queue for j in tenant.rows} == {"team-b"} and tenant.visible == 3
    assert tenant.facets["queue"] == ("team-b",)
    assert JobFilters.of({"q": " big ", "state": "pending", "offset": "x"}) == JobFilters(text="big", state="pending")


def test_job_detail_explains_a_pending_job_with_the_blocking_resource(demo_fleet: Fleet) -> None:
    d = job_detail(demo_fleet, EVERYTHING, "ml/big-run")
    assert d is not None and d.job.state == "pending"
    assert d.explanation is not None and d.explanation["decision"] == "stay-pending"
    assert "limit" in d.blocking and "gpus" in d.blocking
    assert ("limit", True) in d.reason_parts
    assert "".join(t for t, _ in d.reason_parts) == d.explanation["pendingReason"]
    assert d.queue_rank == (2, 2) and d.history is None
    assert [p.decision for p in d.pods] == ["stay pending", "stay pending"]
    bound = job_detail(demo_fleet, EVERYTHING, "ml/llama-ft")
    assert bound is not None and all(p.decision.startswith("bind to") for p in bound.pods)
    evicted = job_detail(demo_fleet, EVERYTHING, "ml/b-train-2")
    assert evicted is not None and evicted.pods[0].decision.startswith("evict (for ml/llama-ft-0")


def test_job_detail_is_none_for_a_job_the_caller_may_not_see(demo_fleet: Fleet) -> None:
    assert job_detail(demo_fleet, TEAM_B, "ml/big-run") is None
    assert job_detail(demo_fleet, TEAM_B, "ml/b-train-1") is not None
    assert job_detail(demo_fleet, EVERYTHING, "ml/nothing") is None


def test_blocking_words_and_pieces() -> None:
    words, parts = blocking("queue a at its limit of 16 GPUs; no node has 8 free GPUs")
    assert words == ("limit", "gpus")
    assert [t for t, hot in parts if hot] == ["limit", "GPUs", "GPUs"]
    assert blocking("") == ((), ())


def test_job_detail_names_the_workload_owning_a_pod_grouper_podgroup(tmp_path: Path) -> None:
    """Issue 16's item 3 on the dashboard: the job page names the owner, as `gpufleet explain` does,
    from the PodGroup's controller ownerReference (only a pod-grouper PodGroup; a pod's labels never)."""
    snapshot = tmp_path / "snap.yaml"
    snapshot.write_text("""\
apiVersion: v1
kind: Node
metadata: {name: n0}
status: {allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "2"}}
---
apiVersion: gpufleet.dev/v1alpha1
kind: Queue
metadata: {name: team-a}
spec: {resources: {nvidia.com/gpu: {quota: "8"}}}
---
apiVersion: gpufleet.dev/v1alpha1
kind: PodGroup
metadata:
  name: pytorchjob-llama-0123456789
  namespace: ml
  labels: {app.kubernetes.io/managed-by: gpufleet-pod-grouper}
  ownerReferences: [{apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: llama, uid: u1, controller: true}]
spec: {minMember: 4, queue: team-a}
---
apiVersion: gpufleet.dev/v1alpha1
kind: PodGroup
metadata: {name: by-hand, namespace: ml}
spec: {minMember: 4, queue: team-a}
""" + "".join(f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {group}-{i}, namespace: ml, labels: {{gpufleet.dev/pod-group: {label}}}}}
spec:
  schedulerName: gpufleet
  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: "1"}}}}}}]
""" for group, label in (("llama", "pytorchjob-llama-0123456789"), ("hand", "by-hand")) for i in range(4)))
    fleet = build_fleet(load_snapshot_file(snapshot), load_objects_file(snapshot))
    detail = job_detail(fleet, EVERYTHING, "ml/pytorchjob-llama-0123456789")
    assert detail is not None and detail.explanation is not None
    owner = detail.explanation["owner"]
    assert (owner["kind"], owner["namespace"], owner["name"], owner["placed"], owner["members"]) == (
        "PyTorchJob", "ml", "llama", 0, 4)
    assert detail.explanation["message"][0].startswith("PyTorchJob ml/llama: 0 of 4 pods placed")
    hand = job_detail(fleet, EVERYTHING, "ml/by-hand")
    assert hand is not None and hand.explanation is not None and hand.explanation["owner"] is None


def test_cluster_shows_allocated_against_used_from_the_ledger(tmp_path: Path) -> None:
    """Where the usage ledger has utilisation samples, a group shows the GPUs used beside those held,
    each GPU its pod's measured utilisation; a GPU the caller may not see shows none."""
    from gpufleet.ledger import IntervalStart, UtilisationSample, open_ledger

    with open_ledger(str(tmp_path / "ledger.db")) as ledger:
        ledger.write([IntervalStart(pod_uid="u1", bound_at=1000.0, namespace="ml", pod_name="b-train-1",
                                    queue="team-b", node="gpu-a1", gpus=8)])
        ledger.write([UtilisationSample("u1", 1000.0, 1060.0, gpu_util=40.0),
                      UtilisationSample("u1", 1000.0, 1120.0, gpu_util=60.0)])
        fleet = build_fleet(load_snapshot_file(DEMO), (), ledger)
    view = cluster_view(fleet, EVERYTHING, "rack")
    [rack] = [g for g in view.groups if g.key == "rack-a"]
    assert (rack.measured, rack.used) == (8, 4.0)  # 8 GPUs at 50% mean
    assert (view.measured, view.used) == (8, 4.0)
    page = cluster_group(fleet, EVERYTHING, "rack", "rack-a")
    assert page is not None
    [node] = [n for n in page.nodes if n.name == "gpu-a1"]
    assert [c.used for d in node.domains for c in d] == [50.0] * 8
    other = [n for n in page.nodes if n.name != "gpu-a1"]
    assert all(c.used is None for n in other for d in n.domains for c in d)
    hidden = Visibility(all=False, queues=frozenset({"team-a"}))
    assert cluster_view(fleet, hidden, "rack").measured == 0
    page = cluster_group(fleet, hidden, "rack", "rack-a")
    assert page is not None and all(c.used is None for n in page.nodes for d in n.domains for c in d)
    assert Fleet.build(load_snapshot_file(DEMO)).used is None  # no ledger: nothing measured, nothing shown
