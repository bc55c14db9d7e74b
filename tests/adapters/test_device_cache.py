"""DeviceCache (issue 17): ``resolve_devices`` with the reading of its last call gives what it gives
without it, whatever changed between the calls (the controller's cycles: unchanged objects are the
same objects, a changed one is a new object).

A stale reading would give a pod devices its claim no longer asks for, keep a deleted claim's
request, or keep nodes its changed slices no longer have: each case below changes one object and
checks the cached call against a fresh one; the property changes random objects of random clusters
over several calls."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters import DeviceCache, DeviceView, resolve_devices
from gpufleet.domain import (
    CPU,
    GPU,
    MEMORY,
    MILLI,
    PODS,
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

celpy = __import__("celpy")  # cel-python raises the recursion limit on its first use: before hypothesis
celpy.Environment().compile("true")

DRIVER = "gpu.nvidia.com"
GPU_ONLY = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
CLASS = DeviceClass(DRIVER, selectors=(GPU_ONLY,))
ALLOCATABLE = {CPU: 64 * MILLI, MEMORY: 2**40 * MILLI, PODS: 110 * MILLI}


def _slice(node: str, gpus: int, product: str = "H100") -> ResourceSlice:
    return ResourceSlice(f"{node}-s", DRIVER, node, NodeName(node), 1, tuple(
        Device(f"gpu-{g}", {f"{DRIVER}/type": "gpu", f"{DRIVER}/index": g, f"{DRIVER}/productName": product})
        for g in range(gpus)))


def _cluster(nodes: int = 3, gpus: int = 4, pods: int = 6, count: int = 1) -> Snapshot:
    names = [f"n{k}" for k in range(nodes)]
    claims = tuple(ResourceClaim("ml", f"p{i}-gpu", requests=(DeviceRequest("gpu", DRIVER, count),))
                   for i in range(pods))
    return Snapshot(
        nodes=tuple(Node(NodeName(n), allocatable=ALLOCATABLE) for n in names),
        pods=tuple(Pod("ml", f"p{i}", requests={CPU: MILLI}, creation_time=float(i),
                       resource_claims=(PodClaim("gpu", claim=f"p{i}-gpu"),)) for i in range(pods)),
        resource_slices=tuple(_slice(n, gpus) for n in names), device_classes=(CLASS,), resource_claims=claims)


def _same_as_fresh(snapshot: Snapshot, cache: DeviceCache) -> DeviceView:
    """The cached call's view, checked against a call without the cache (and their decisions)."""
    cached, fresh = resolve_devices(snapshot, cache), resolve_devices(snapshot)
    assert cached == fresh
    assert cached.attach(schedule(cached.snapshot)) == fresh.attach(schedule(fresh.snapshot))
    return cached


def _with(items: tuple[object, ...], index: int, new: object) -> tuple[object, ...]:
    return (*items[:index], new, *items[index + 1:])


def test_unchanged_objects_give_the_same_objects_again() -> None:
    """The reading is reused (not only equal): the pods and nodes the engine gets are those of the
    last call, and a fresh cache reads them anew."""
    snapshot = _cluster()
    cache = DeviceCache()
    first = _same_as_fresh(snapshot, cache)
    again = _same_as_fresh(replace(snapshot, pods=tuple(snapshot.pods)), cache)
    assert all(a is b for a, b in zip(first.snapshot.pods, again.snapshot.pods, strict=True))
    assert all(a is b for a, b in zip(first.snapshot.nodes, again.snapshot.nodes, strict=True))
    other = resolve_devices(snapshot, DeviceCache())
    assert not any(a is b for a, b in zip(first.snapshot.pods, other.snapshot.pods, strict=True))


def test_a_changed_claim_is_read_again() -> None:
    snapshot = _cluster(count=1)
    cache = DeviceCache()
    _same_as_fresh(snapshot, cache)
    claims = snapshot.resource_claims
    changed = replace(claims[0], requests=(DeviceRequest("gpu", DRIVER, 3),))
    view = _same_as_fresh(replace(snapshot, resource_claims=_with(claims, 0, changed)), cache)  # type: ignore[arg-type]
    assert view.snapshot.pods[0].requests[GPU] == 3 * MILLI
    decisions = view.attach(schedule(view.snapshot))
    (binding,) = [b for b in decisions.bindings if b.pod == "ml/p0"]
    assert len(binding.devices[0].results) == 3


def test_a_deleted_or_deleting_claim_is_not_kept() -> None:
    snapshot = _cluster()
    cache = DeviceCache()
    _same_as_fresh(snapshot, cache)
    gone = _same_as_fresh(replace(snapshot, resource_claims=snapshot.resource_claims[1:]), cache)
    assert gone.snapshot.pods[0].device_wait == 'resourceclaim "p0-gpu" not found'
    assert gone.attach(schedule(gone.snapshot)).bindings[0].pod != "ml/p0"
    deleting = replace(snapshot.resource_claims[0], deleting=True)
    view = _same_as_fresh(replace(snapshot, resource_claims=_with(snapshot.resource_claims, 0, deleting)),  # type: ignore[arg-type]
                          cache)
    assert view.snapshot.pods[0].device_wait == 'resourceclaim "p0-gpu" is being deleted'


def test_a_claim_held_by_another_pod_is_decided_again() -> None:
    """The pod and its claim unchanged, but another pod now holds the claim: the pod shares it."""
    snapshot = _cluster()
    cache = DeviceCache()
    _same_as_fresh(snapshot, cache)
    claim = replace(snapshot.resource_claims[0], allocation=(DeviceResult("gpu", DRIVER, "n1", "gpu-2"),),
                    allocated_node=NodeName("n1"), reserved_for=("holder",))
    holder = Pod("ml", "holder", requests={CPU: MILLI}, node_name=NodeName("n1"), phase="Running",
                 resource_claims=(PodClaim("gpu", claim="p0-gpu"),))
    changed = replace(snapshot, pods=(*snapshot.pods, holder),
                      resource_claims=_with(snapshot.resource_claims, 0, claim))  # type: ignore[arg-type]
    view = _same_as_fresh(changed, cache)
    (p0,) = [p for p in view.snapshot.pods if p.name == "p0"]
    assert p0.device_nodes == frozenset({"n1"}) and GPU not in p0.requests


def test_a_bound_pod_whose_claim_changed_is_read_again() -> None:
    snapshot = _cluster(nodes=1, gpus=4, pods=1)
    claim = replace(snapshot.resource_claims[0], allocation=(DeviceResult("gpu", DRIVER, "n0", "gpu-1"),),
                    allocated_node=NodeName("n0"), reserved_for=("p0",))
    pod = replace(snapshot.pods[0], node_name=NodeName("n0"), phase="Running")
    snapshot = replace(snapshot, pods=(pod,), resource_claims=(claim,))
    cache = DeviceCache()
    assert _same_as_fresh(snapshot, cache).snapshot.pods[0].gpu_index == (1,)
    moved = replace(claim, allocation=(DeviceResult("gpu", DRIVER, "n0", "gpu-3"),))
    assert _same_as_fresh(replace(snapshot, resource_claims=(moved,)), cache).snapshot.pods[0].gpu_index == (3,)
    # Its claim now reserved for another (bound) pod: it holds nothing.
    other = replace(pod, name="a-holder")
    taken = replace(moved, reserved_for=("a-holder",))
    view = _same_as_fresh(replace(snapshot, pods=(pod, other), resource_claims=(taken,)), cache)
    assert [p.gpu_index for p in view.snapshot.pods] == [(3,), ()]


def test_changed_slices_are_read_again() -> None:
    snapshot = _cluster(nodes=2, gpus=2, pods=3)
    cache = DeviceCache()
    _same_as_fresh(snapshot, cache)
    # n0's slice loses its GPUs but one: the node's copy and the pods' nodes change.
    fewer = _same_as_fresh(replace(snapshot, resource_slices=(_slice("n0", 1), snapshot.resource_slices[1])), cache)
    assert fewer.snapshot.nodes[0].allocatable[GPU] == MILLI
    # n1's slice gone: no pod may go there.
    view = _same_as_fresh(replace(snapshot, resource_slices=snapshot.resource_slices[:1]), cache)
    assert GPU not in view.snapshot.nodes[1].allocatable
    assert all(b.node == "n0" for b in view.attach(schedule(view.snapshot)).bindings)


def test_a_changed_device_class_or_plain_gpu_node_is_read_again() -> None:
    snapshot = _cluster(nodes=2, gpus=2, pods=2)
    cache = DeviceCache()
    _same_as_fresh(snapshot, cache)
    picky = DeviceClass(DRIVER, selectors=(GPU_ONLY, f"device.attributes['{DRIVER}'].productName == 'A100'"))
    view = _same_as_fresh(replace(snapshot, device_classes=(picky,)), cache)
    assert all(p.device_wait is not None or p.device_nodes == frozenset() for p in view.snapshot.pods)
    # A node that advertises nvidia.com/gpu itself: the DRA nodes become a restriction of their own.
    plain = Node(NodeName("plain"), allocatable={**ALLOCATABLE, GPU: 8 * MILLI})
    view = _same_as_fresh(replace(snapshot, nodes=(*snapshot.nodes, plain)), cache)
    assert all(p.device_nodes == frozenset({"n0", "n1"}) for p in view.snapshot.pods)


# -- the property: random clusters, random changes, several calls --------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[Snapshot]:
    """A cluster and the snapshots of a few cycles after it, each changing a few of its objects."""
    snapshot = _cluster(nodes=draw(st.integers(1, 3)), gpus=draw(st.integers(1, 4)), pods=draw(st.integers(1, 6)))
    out = [snapshot]
    for _ in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(0, 3))):
            snapshot = draw(st.sampled_from(_CHANGES))(draw, snapshot)
        out.append(replace(snapshot, pods=tuple(snapshot.pods)))  # a new snapshot of the same objects
    return out


def _pick(draw: st.DrawFn, items: tuple[object, ...]) -> int | None:
    return draw(st.integers(0, len(items) - 1)) if items else None


def _claim_count(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    k = _pick(draw, s.resource_claims)
    if k is None:
        return s
    claim = replace(s.resource_claims[k], requests=(DeviceRequest("gpu", DRIVER, draw(st.integers(1, 3))),))
    return replace(s, resource_claims=_with(s.resource_claims, k, claim))  # type: ignore[arg-type]


def _claim_deleting(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    k = _pick(draw, s.resource_claims)
    if k is None:
        return s
    claim = replace(s.resource_claims[k], deleting=not s.resource_claims[k].deleting)
    return replace(s, resource_claims=_with(s.resource_claims, k, claim))  # type: ignore[arg-type]


def _claim_gone(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    k = _pick(draw, s.resource_claims)
    return s if k is None else replace(s, resource_claims=s.resource_claims[:k] + s.resource_claims[k + 1:])


def _claim_held(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    """A pending pod bound (its claim allocated on a node's first GPUs), or a bound pod's claim freed."""
    k = _pick(draw, s.pods)
    if k is None:
        return s
    pod = s.pods[k]
    name = pod.resource_claims[0].claim
    at = [c for c in range(len(s.resource_claims)) if s.resource_claims[c].name == name]
    if not at or not s.resource_slices:
        return s
    claim = s.resource_claims[at[0]]
    if pod.node_name is None:
        sl = draw(st.sampled_from(s.resource_slices))
        count = min(claim.requests[0].count, len(sl.devices))
        claim = replace(claim, allocation=tuple(DeviceResult("gpu", DRIVER, sl.pool, d.name)
                                                for d in sl.devices[:count]),
                        allocated_node=sl.node, reserved_for=(pod.name,))
        pod = replace(pod, node_name=sl.node, phase="Running")
    else:
        claim = replace(claim, allocation=(), allocated_node=None, reserved_for=())
        pod = replace(pod, phase="Succeeded")
    return replace(s, pods=_with(s.pods, k, pod), resource_claims=_with(s.resource_claims, at[0], claim))  # type: ignore[arg-type]


def _allocation_changed(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    """A held claim's allocation moved to other devices of its slice, its pod unchanged."""
    held = [k for k, c in enumerate(s.resource_claims) if c.allocation]
    if not held:
        return s
    k = draw(st.sampled_from(held))
    claim = s.resource_claims[k]
    devices = [d.name for sl in s.resource_slices if sl.pool == claim.allocation[0].pool for d in sl.devices]
    if not devices:
        return s
    names = draw(st.lists(st.sampled_from(devices), min_size=1, max_size=2, unique=True))
    claim = replace(claim, allocation=tuple(DeviceResult("gpu", DRIVER, claim.allocation[0].pool, n) for n in names))
    return replace(s, resource_claims=_with(s.resource_claims, k, claim))  # type: ignore[arg-type]


def _pod_changed(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    k = _pick(draw, s.pods)
    if k is None:
        return s
    pod = replace(s.pods[k], requests={CPU: draw(st.integers(1, 4)) * MILLI})
    return replace(s, pods=_with(s.pods, k, pod))  # type: ignore[arg-type]


def _pod_gone(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    k = _pick(draw, s.pods)
    return s if k is None else replace(s, pods=s.pods[:k] + s.pods[k + 1:])


def _pod_new(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    """A new pod naming an existing claim (it waits for the first) or a claim of its own."""
    i = len(s.pods) + draw(st.integers(100, 200))
    shared = draw(st.booleans()) and s.resource_claims
    name = draw(st.sampled_from(s.resource_claims)).name if shared else f"q{i}-gpu"
    pod = Pod("ml", f"q{i}", requests={CPU: MILLI}, creation_time=float(i),
              resource_claims=(PodClaim("gpu", claim=name),))
    claims = s.resource_claims if shared else (
        *s.resource_claims, ResourceClaim("ml", name, requests=(DeviceRequest("gpu", DRIVER, 1),)))
    return replace(s, pods=(*s.pods, pod), resource_claims=claims)


def _slice_changed(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    k = _pick(draw, s.resource_slices)
    if k is None:
        return s
    node = str(s.resource_slices[k].node)
    new = _slice(node, draw(st.integers(1, 4)), draw(st.sampled_from(["H100", "A100"])))
    return replace(s, resource_slices=_with(s.resource_slices, k, new))  # type: ignore[arg-type]


def _slice_gone(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    k = _pick(draw, s.resource_slices)
    return s if k is None else replace(s, resource_slices=s.resource_slices[:k] + s.resource_slices[k + 1:])


def _node_changed(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    k = _pick(draw, s.nodes)
    if k is None:
        return s
    extra = {GPU: 8 * MILLI} if draw(st.booleans()) else {}
    node = replace(s.nodes[k], allocatable={**ALLOCATABLE, **extra}, gpu_product=draw(st.sampled_from([None, "X"])))
    return replace(s, nodes=_with(s.nodes, k, node))  # type: ignore[arg-type]


def _class_changed(draw: st.DrawFn, s: Snapshot) -> Snapshot:
    product = draw(st.sampled_from([None, "H100", "A100"]))
    selectors = (GPU_ONLY,) if product is None else (
        GPU_ONLY, f"device.attributes['{DRIVER}'].productName == '{product}'")
    return replace(s, device_classes=(DeviceClass(DRIVER, selectors=selectors),))


_CHANGES = [_claim_count, _claim_deleting, _claim_gone, _claim_held, _allocation_changed, _pod_changed, _pod_gone, _pod_new,
            _slice_changed, _slice_gone, _node_changed, _class_changed]


@settings(max_examples=120, deadline=None)
@given(histories())
def test_the_cache_never_changes_what_is_read(history: list[Snapshot]) -> None:
    cache = DeviceCache()
    for snapshot in history:
        _same_as_fresh(snapshot, cache)
