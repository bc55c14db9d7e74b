"""DRA GPU devices read for the engine and handed back to claims (docs/semantics-notes.md,
"Dynamic Resource Allocation"): built from domain objects, decided by the real engine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.adapters import resolve_devices
from gpufleet.domain import (
    ANNOTATION_NVLINK_DOMAINS,
    ANNOTATION_UNHEALTHY_GPUS,
    CPU,
    GPU,
    MEMORY,
    MILLI,
    PODS,
    Decisions,
    Device,
    DeviceClass,
    DeviceRequest,
    DeviceResult,
    Node,
    NodeName,
    Pod,
    PodClaim,
    ResourceClaim,
    ResourceSlice,
    Snapshot,
)
from gpufleet.engine import schedule

DRIVER = "gpu.nvidia.com"
GPU_CLASS = DeviceClass(DRIVER, selectors=(f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'",))
NIC_CLASS = DeviceClass("nic", selectors=(f"device.attributes['{DRIVER}'].type == 'nic'",))
MIG_CLASS = DeviceClass("mig.nvidia.com", selectors=(f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig'",))
BASE = {CPU: 64 * MILLI, MEMORY: 512 * 2**30 * MILLI, PODS: 110 * MILLI}


def gpu(i: int, product: str = "NVIDIA H100 80GB HBM3", index: bool = True) -> Device:
    attributes: dict[str, str | int | bool] = {f"{DRIVER}/type": "gpu", f"{DRIVER}/uuid": f"GPU-{i:04d}",
                                               f"{DRIVER}/productName": product}
    if index:
        attributes[f"{DRIVER}/index"] = i
    return Device(f"gpu-{i}", attributes, {f"{DRIVER}/memory": "80Gi"})


def node(name: str, annotations: dict[str, str] | None = None) -> Node:
    return Node(NodeName(name), allocatable=dict(BASE), annotations=annotations or {},
                unhealthy_gpus=frozenset(int(g) for g in (annotations or {}).get(ANNOTATION_UNHEALTHY_GPUS, "").split(",") if g),
                nvlink_domains=tuple(tuple(int(g) for g in d.split(",")) for d in
                                     (annotations or {}).get(ANNOTATION_NVLINK_DOMAINS, "").split(";") if d))


def slice_(node_name: str, devices: tuple[Device, ...], generation: int = 1) -> ResourceSlice:
    return ResourceSlice(f"{node_name}-{DRIVER}-{generation}", DRIVER, node_name, NodeName(node_name), generation, devices)


def claim(name: str, count: int = 1, selectors: tuple[str, ...] = (), cls: str = DRIVER, **kw: object) -> ResourceClaim:
    return ResourceClaim("ml", name, uid=f"uid-{name}",
                         requests=(DeviceRequest("gpu", cls, count, selectors),), **kw)  # type: ignore[arg-type]


def pod(name: str, *claims: str, node_name: str | None = None, phase: str = "Pending", **kw: object) -> Pod:
    return Pod("ml", name, requests={CPU: MILLI}, node_name=NodeName(node_name) if node_name else None, phase=phase,
               resource_claims=tuple(PodClaim(f"c{i}", claim=c) for i, c in enumerate(claims)), **kw)  # type: ignore[arg-type]


def run(snapshot: Snapshot) -> Decisions:
    view = resolve_devices(snapshot)
    return view.attach(schedule(view.snapshot))


def devices_of(decisions: Decisions, key: str) -> list[tuple[str, str, str]]:
    (b,) = [b for b in decisions.bindings if b.pod == key]
    return [(a.claim, r.request, r.device) for a in b.devices for r in a.results]


def cluster(*pods: Pod, claims: tuple[ResourceClaim, ...] = (), nodes: tuple[Node, ...] | None = None,
            slices: tuple[ResourceSlice, ...] | None = None) -> Snapshot:
    nodes = nodes if nodes is not None else (node("n1"),)
    slices = slices if slices is not None else tuple(slice_(n.name, tuple(gpu(i) for i in range(4))) for n in nodes)
    return Snapshot(nodes=nodes, pods=pods, resource_slices=slices, device_classes=(GPU_CLASS, MIG_CLASS, NIC_CLASS),
                    resource_claims=claims)


def test_slices_give_the_node_its_gpus_and_model() -> None:
    view = resolve_devices(cluster())
    (n1,) = view.snapshot.nodes
    assert n1.allocatable[GPU] == 4 * MILLI
    assert n1.gpu_product == "NVIDIA H100 80GB HBM3" and n1.gpu_memory_mib == 80 * 1024


def test_claim_gets_devices_in_the_nvlink_domain_avoiding_unhealthy_gpus() -> None:
    annotations = {ANNOTATION_NVLINK_DOMAINS: "0,1;2,3", ANNOTATION_UNHEALTHY_GPUS: "0"}
    snap = cluster(pod("p", "c"), claims=(claim("c", count=2),), nodes=(node("n1", annotations),))
    decisions = run(snap)
    # GPU 0 is unhealthy, so only the domain {2,3} holds two healthy GPUs.
    assert devices_of(decisions, "ml/p") == [("c", "gpu", "gpu-2"), ("c", "gpu", "gpu-3")]
    (b,) = decisions.bindings
    assert b.gpus == (2, 3)


def test_held_claims_keep_their_devices_and_the_next_pod_gets_others() -> None:
    held = claim("a", allocation=(DeviceResult("gpu", DRIVER, "n1", "gpu-0"),), allocated_node=NodeName("n1"),
                 reserved_for=("running",))
    snap = cluster(pod("running", "a", node_name="n1", phase="Running"), pod("p", "b"),
                   claims=(held, claim("b", count=3)))
    decisions = run(snap)
    assert devices_of(decisions, "ml/p") == [("b", "gpu", "gpu-1"), ("b", "gpu", "gpu-2"), ("b", "gpu", "gpu-3")]


def test_allocation_wins_over_a_stale_gpu_index_annotation() -> None:
    held = claim("a", allocation=(DeviceResult("gpu", DRIVER, "n1", "gpu-3"),), allocated_node=NodeName("n1"),
                 reserved_for=("running",))
    snap = cluster(pod("running", "a", node_name="n1", phase="Running", gpu_index=(0,)), pod("p", "b"),
                   claims=(held, claim("b", count=3)))
    assert devices_of(run(snap), "ml/p") == [("b", "gpu", "gpu-0"), ("b", "gpu", "gpu-1"), ("b", "gpu", "gpu-2")]


def test_no_device_is_given_twice_when_the_node_is_full() -> None:
    held = claim("a", count=4, allocation=tuple(DeviceResult("gpu", DRIVER, "n1", f"gpu-{i}") for i in range(4)),
                 allocated_node=NodeName("n1"), reserved_for=("running",))
    decisions = run(cluster(pod("running", "a", node_name="n1", phase="Running"), pod("p", "b"),
                            claims=(held, claim("b"))))
    assert not decisions.bindings
    (pending,) = decisions.pending
    assert "without 1 free GPU" in pending.reason


def test_shared_claim_follows_its_holder_and_takes_no_gpu() -> None:
    held = claim("shared", allocation=(DeviceResult("gpu", DRIVER, "n2", "gpu-1"),), allocated_node=NodeName("n2"),
                 reserved_for=("first",))
    snap = cluster(pod("first", "shared", node_name="n2", phase="Running"), pod("second", "shared"),
                   claims=(held,), nodes=(node("n1"), node("n2")))
    decisions = run(snap)
    (b,) = decisions.bindings
    assert (b.pod, b.node, b.gpus) == ("ml/second", "n2", ())
    (alloc,) = b.devices
    assert alloc.shared and alloc.results == (DeviceResult("gpu", DRIVER, "n2", "gpu-1"),)


def test_two_pending_pods_of_one_claim_the_second_waits() -> None:
    decisions = run(cluster(pod("a", "c"), pod("b", "c"), claims=(claim("c"),)))
    assert [b.pod for b in decisions.bindings] == ["ml/a"]
    assert [(p.pod, p.reason) for p in decisions.pending] == [
        ("ml/b", 'waiting for resourceclaim "c" to be allocated with pod ml/a')]


def test_stale_allocation_is_reported_and_its_devices_are_free() -> None:
    stale = claim("old", count=4, allocation=tuple(DeviceResult("gpu", DRIVER, "n1", f"gpu-{i}") for i in range(4)),
                  allocated_node=NodeName("n1"), reserved_for=("gone",))
    view = resolve_devices(cluster(pod("p", "c"), claims=(stale, claim("c", count=4))))
    assert [c.name for c in view.stale] == ["old"]
    assert [b.pod for b in schedule(view.snapshot).bindings] == ["ml/p"]


@pytest.mark.parametrize(("claims", "entry", "reason"), [
    ((), PodClaim("gpu", template="single-gpu"),
     'waiting for resourceclaim for entry "gpu" (template "single-gpu") to be created'),
    ((), PodClaim("gpu", claim="missing"), 'resourceclaim "missing" not found'),
    ((claim("c", deleting=True),), PodClaim("gpu", claim="c"), 'resourceclaim "c" is being deleted'),
    ((claim("c", cls="nope"),), PodClaim("gpu", claim="c"), 'deviceclass "nope" of resourceclaim "c" request "gpu" not found'),
    ((claim("c", unsupported="constraints"),), PodClaim("gpu", claim="c"),
     'resourceclaim "c": constraints is not supported by gpufleet'),
    ((replace(claim("c"), requests=(DeviceRequest("gpu", DRIVER, unsupported="firstAvailable"),)),),
     PodClaim("gpu", claim="c"), 'resourceclaim "c" request "gpu": firstAvailable is not supported by gpufleet'),
    ((claim("c", cls="nic"),), PodClaim("gpu", claim="c"),
     'resourceclaim "c" request "gpu": devices of type "nic" is not supported by gpufleet'),
    ((claim("c", cls="mig.nvidia.com"),), PodClaim("gpu", claim="c"),
     'resourceclaim "c" request "gpu": devices of several MIG profiles (1g.10gb, 2g.20gb) is not supported by gpufleet'),
    ((claim("c", selectors=("device.attributes['gpu.nvidia.com'].index ==",)),), PodClaim("gpu", claim="c"),
     "resourceclaim \"c\" request \"gpu\": selector device.attributes['gpu.nvidia.com'].index ==: "),
])
def test_claims_that_cannot_be_allocated_keep_the_pod_waiting(claims: tuple[ResourceClaim, ...], entry: PodClaim,
                                                            reason: str) -> None:
    p = replace(pod("p"), resource_claims=(entry,))
    migs = (Device("gpu-4-mig-1g10gb-0", {f"{DRIVER}/type": "mig", f"{DRIVER}/profile": "1g.10gb"}),
            Device("gpu-4-mig-2g20gb-1", {f"{DRIVER}/type": "mig", f"{DRIVER}/profile": "2g.20gb"}),
            Device("nic-0", {f"{DRIVER}/type": "nic"}))
    slices = (slice_("n1", (*(gpu(i) for i in range(4)), *migs)),)
    decisions = run(cluster(p, claims=claims, slices=slices))
    (pending,) = decisions.pending
    assert pending.reason.startswith(reason)
    if not reason.endswith(": "):
        assert pending.reason == reason


def test_selector_chooses_nodes_whose_every_gpu_matches() -> None:
    slices = (slice_("n1", tuple(gpu(i, "NVIDIA A100-SXM4-40GB") for i in range(4))),
              slice_("n2", tuple(gpu(i) for i in range(4))))
    h100 = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*h100.*$')"
    decisions = run(cluster(pod("p", "c"), claims=(claim("c", selectors=(h100,)),),
                            nodes=(node("n1"), node("n2")), slices=slices))
    (b,) = decisions.bindings
    assert b.node == "n2"


def test_selector_on_some_gpus_of_a_node_rules_the_node_out_with_a_reason() -> None:
    by_index = "device.attributes['gpu.nvidia.com'].index == 0 || device.attributes['gpu.nvidia.com'].index == 2"
    decisions = run(cluster(pod("p", "c"), claims=(claim("c", selectors=(by_index,)),)))
    (pending,) = decisions.pending
    assert pending.reason == "0/1 nodes fit: 1 without devices for its resource claims; no eligible victims"


def test_capacity_and_version_selectors() -> None:
    memory = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"
    decisions = run(cluster(pod("p", "c"), claims=(claim("c", selectors=(memory,)),)))
    assert [b.pod for b in decisions.bindings] == ["ml/p"]
    too_big = "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('80Gi'))"
    decisions = run(cluster(pod("p", "c"), claims=(claim("c", selectors=(too_big,)),)))
    assert not decisions.bindings


def test_fractional_pod_takes_blocks_on_one_device_and_whole_pods_avoid_it() -> None:
    frac = pod("frac", "f", gpu_blocks=30)
    whole = pod("whole", "w")
    decisions = run(cluster(frac, whole, claims=(claim("f"), claim("w", count=4))))
    # four whole GPUs are wanted, but one GPU holds a share: never both on one GPU
    assert [b.pod for b in decisions.bindings] == ["ml/frac"]
    (b,) = decisions.bindings
    assert b.gpu_blocks == 30 and devices_of(decisions, "ml/frac") == [("f", "gpu", f"gpu-{b.gpus[0]}")]


def test_fractional_pod_with_two_devices_waits() -> None:
    decisions = run(cluster(pod("frac", "f", gpu_blocks=30), claims=(claim("f", count=2),)))
    (pending,) = decisions.pending
    assert pending.reason == 'resourceclaim "f": a fractional pod must have exactly one GPU request of count 1'


def test_nodes_without_dra_gpus_are_not_used_for_claims() -> None:
    plain = replace(node("plain"), allocatable={**BASE, GPU: 8 * MILLI})
    decisions = run(cluster(pod("p", "c"), claims=(claim("c"),), nodes=(node("n1"), plain),
                            slices=(slice_("n1", (gpu(0),)),)))
    (b,) = decisions.bindings
    assert b.node == "n1"


def test_only_the_newest_generation_of_a_pool_counts_and_names_give_indices() -> None:
    old = slice_("n1", tuple(gpu(i, index=False) for i in range(8)), generation=1)
    new = slice_("n1", tuple(gpu(i, index=False) for i in range(2)), generation=2)
    (n1,) = resolve_devices(cluster(slices=(old, new))).snapshot.nodes
    assert n1.allocatable[GPU] == 2 * MILLI


def test_duplicate_indices_ignore_the_slices_with_a_warning() -> None:
    twins = (gpu(0), replace(gpu(1), attributes={**gpu(1).attributes, f"{DRIVER}/index": 0}))
    view = resolve_devices(cluster(slices=(slice_("n1", twins),)))
    assert view.warnings == ("node n1: DRA GPU devices gpu-0, gpu-1 share index 0; its ResourceSlices are ignored",)
    assert GPU not in view.snapshot.nodes[0].allocatable


def test_a_snapshot_without_dra_is_returned_as_it_is() -> None:
    snap = Snapshot(nodes=(node("n1"),), pods=(pod("p"),))
    assert resolve_devices(snap).snapshot is snap


def mig(gpu_index: int, slot: int, profile: str) -> Device:
    return Device(f"gpu-{gpu_index}-mig-{profile.replace('.', '')}-{slot}",
                  {f"{DRIVER}/type": "mig", f"{DRIVER}/profile": profile, f"{DRIVER}/parentUUID": f"GPU-{gpu_index:04d}"})


def mig_claim(name: str, profile: str, count: int = 1, **kw: object) -> ResourceClaim:
    return claim(name, count, selectors=(f"device.attributes['gpu.nvidia.com'].profile == '{profile}'",),
                 cls="mig.nvidia.com", **kw)


def test_mig_devices_count_as_their_profile_and_are_allocated_by_name() -> None:
    devices = (gpu(0), *(mig(1, i, "1g.10gb") for i in range(3)), mig(1, 3, "3g.40gb"))
    held = mig_claim("held", "1g.10gb", allocation=(DeviceResult("gpu", DRIVER, "n1", "gpu-1-mig-1g10gb-0"),),
                     allocated_node=NodeName("n1"), reserved_for=("running",))
    snap = cluster(pod("running", "held", node_name="n1", phase="Running"), pod("a", "ca"), pod("b", "cb"),
                   pod("c", "cc"), claims=(held, mig_claim("ca", "1g.10gb"), mig_claim("cb", "1g.10gb"),
                                           mig_claim("cc", "1g.10gb")),
                   slices=(slice_("n1", devices),))
    view = resolve_devices(snap)
    (n1,) = view.snapshot.nodes
    assert n1.allocatable["nvidia.com/mig-1g.10gb"] == 3 * MILLI and n1.allocatable["nvidia.com/mig-3g.40gb"] == MILLI
    assert n1.allocatable[GPU] == MILLI  # the GPU not in MIG mode
    decisions = view.attach(schedule(view.snapshot))
    assert devices_of(decisions, "ml/a") == [("ca", "gpu", "gpu-1-mig-1g10gb-1")]
    assert devices_of(decisions, "ml/b") == [("cb", "gpu", "gpu-1-mig-1g10gb-2")]
    (pending,) = decisions.pending  # the held device and two new ones: none left for c
    assert pending.pod == "ml/c" and "short of nvidia.com/mig-1g.10gb" in pending.reason


def test_whole_gpu_claims_never_get_mig_devices_and_mig_claims_never_get_gpus() -> None:
    snap = cluster(pod("whole", "w"), pod("part", "m"), claims=(claim("w"), mig_claim("m", "3g.40gb")),
                   nodes=(node("gpus"), node("migs")),
                   slices=(slice_("gpus", (gpu(0),)), slice_("migs", (mig(0, 0, "3g.40gb"), mig(0, 1, "3g.40gb")))))
    decisions = run(snap)
    assert {b.pod: b.node for b in decisions.bindings} == {"ml/whole": "gpus", "ml/part": "migs"}
    assert devices_of(decisions, "ml/part") == [("m", "gpu", "gpu-0-mig-3g40gb-0")]


def test_a_fractional_pod_whose_claim_sets_its_own_sharing_waits() -> None:
    """A tenant's own MPS limits (100 % of the threads) must not replace those of its blocks."""
    from gpufleet.domain import DeviceConfig

    own = DeviceConfig(DRIVER, {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                                "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 100}}})
    decisions = run(cluster(pod("frac", "f", gpu_blocks=10), claims=(claim("f", config=(own,)),)))
    (pending,) = decisions.pending
    assert pending.reason == ('resourceclaim "f": the claim of a fractional pod may not set its own sharing '
                              "(gpufleet sets the MPS limits from the pod's blocks)")
    # the same claim for a whole-GPU pod is the tenant's own business: its GPU is its own
    assert [b.pod for b in run(cluster(pod("whole", "f"), claims=(claim("f", config=(own,)),))).bindings] == ["ml/whole"]


@pytest.mark.parametrize("expression", [
    "device.attributes['gpu.nvidia.com'].type.nosuch() == 1",  # read once per driver (only the type)
    "device.attributes['gpu.nvidia.com'].uuid.nosuch() == 1",  # read per device
])
def test_a_selector_failing_on_every_gpu_names_its_error(expression: str) -> None:
    decisions = run(cluster(pod("p", "c"), claims=(claim("c", selectors=(expression,)),)))
    (pending,) = decisions.pending
    assert pending.reason.startswith(f'resourceclaim "c" request "gpu": selector {expression}: ')
    assert pending.reason.endswith(" is not supported by gpufleet")


def test_the_fast_copies_equal_dataclasses_replace() -> None:
    from gpufleet.adapters.devices import _copy_binding, _copy_node, _copy_pod
    from gpufleet.domain import Binding, PodKey

    p = pod("p", "c", gpu_blocks=30, labels={"a": "b"})
    assert _copy_pod(p, {"device_wait": "x", "requests": {GPU: MILLI}}) == replace(
        p, device_wait="x", requests={GPU: MILLI})
    n = node("n1", {ANNOTATION_NVLINK_DOMAINS: "0,1"})
    assert _copy_node(n, {"gpu_product": "H100"}) == replace(n, gpu_product="H100")
    b = Binding(PodKey("ml/p"), NodeName("n1"), gpus=(1,))
    assert _copy_binding(b, {}) == b and _copy_binding(b, {}) is not b


def test_claimed_gpus_count_against_the_queue_like_any_gpus() -> None:
    """A tenant cannot get past its queue's limit by asking through a claim instead of nvidia.com/gpu."""
    from gpufleet.domain import Queue, QueueName, QueueResource

    team = Queue(QueueName("team"), resources={GPU: QueueResource(quota=2 * MILLI, limit=2 * MILLI)})
    snap = replace(cluster(pod("big", "c", queue_label=QueueName("team")), claims=(claim("c", count=4),)),
                   queues=(team,))
    decisions = run(snap)
    assert not decisions.bindings
    (pending,) = decisions.pending
    assert pending.reason.startswith("queue team at its limit of 2 GPUs: uses 0, gang needs 4")
    small = replace(snap, resource_claims=(claim("c", count=2),))
    assert [b.pod for b in run(small).bindings] == ["ml/big"]


def test_attach_of_the_usual_binding_equals_the_general_steps() -> None:
    """``attach`` hands the usual binding (one claim, one whole-GPU request) its devices in fewer
    steps: the same devices as the general steps (``_with_devices``) give, binding by binding."""
    from gpufleet.bench.shapes import make_shape

    view = resolve_devices(make_shape("dra-basic", 0.02))
    decisions = schedule(view.snapshot)
    fast = view.attach(decisions).bindings
    taken = set(view._held)
    general = tuple(view._with_devices(b, taken) for b in decisions.bindings)
    assert fast == general
    assert sum(1 for b in fast if b.devices and b.devices[0].results) >= 100
