"""DRA GPU devices read into the engine's vocabulary, and the engine's GPUs read back as devices.

docs/semantics-notes.md, "Dynamic Resource Allocation", is the rule this module implements. The
engine knows GPUs by node and index; DRA knows them as devices of ResourceSlices, asked for by
ResourceClaims. :func:`resolve_devices` turns a snapshot with DRA objects into one the engine
schedules as it schedules any snapshot (node GPU counts from slices; pods' GPU requests from their
claims, with the nodes their selectors allow and the reasons they wait), and
:meth:`DeviceView.attach` turns the GPUs of each binding back into the devices its claims get. The
controller and ``replay`` both go through here, so that they allocate alike. The controller keeps a
:class:`DeviceCache` between its cycles: what did not change since the last cycle (the same objects) is
not read again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from operator import attrgetter, is_
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from gpufleet.adapters._gc import no_gc
from gpufleet.adapters.quantity import QuantityError, to_milli
from gpufleet.domain import (
    GPU,
    MILLI,
    SCHEDULER_NAME,
    Binding,
    ClaimAllocation,
    Decisions,
    Device,
    DeviceClass,
    DeviceResult,
    Node,
    Pod,
    PodKey,
    ResourceClaim,
    ResourceSlice,
    Snapshot,
)

if TYPE_CHECKING:
    from gpufleet.adapters._device_cel import Selector

__all__ = ["DeviceCache", "DeviceView", "resolve_devices"]

GPU_TYPE = "gpu"
MIG_TYPE = "mig"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # a MIG profile's extended resource, as NVIDIA's mixed strategy names it
_GPU_NAME = re.compile(r"gpu-(\d+)")
MIB_MILLI = 1024 * 1024 * MILLI

DeviceRef = tuple[str, str, str]  # driver, pool, device name
Asked = tuple[tuple[str, int, str], ...]  # (request, count, resource: GPU or a MIG profile's resource)
Plan = tuple[Asked, frozenset[str] | None]  # a claim's requests, and the nodes it restricts to (None: none)


class _NodeGpus:
    """A node's GPU devices by index: ``by_index`` (their references) and ``devices``; ``driver``,
    the one driver of all of them (None: several). Five thousand a call, of which only the nodes of
    bindings and running pods (and of selectors asked device by device) are ever looked up: a node
    of the usual slice (``usual``: its devices, all GPUs, gpu-0 .. gpu-n-1 in index order) makes
    its two tables when first asked."""

    __slots__ = ("_by_index", "_devices", "_results", "_usual", "driver")

    def __init__(self, by_index: Mapping[int, DeviceRef] | None, devices: Mapping[int, Device] | None,
                 driver: str | None = None, usual: ResourceSlice | None = None) -> None:
        self._by_index = by_index
        self._devices = devices
        self.driver = driver
        self._usual = usual
        self._results: dict[tuple[str, tuple[int, ...]], tuple[DeviceResult, ...]] = {}

    def results(self, request: str, gpus: tuple[int, ...]) -> tuple[DeviceResult, ...] | None:
        """The results of ``request`` for the GPUs of indices ``gpus`` (None: one of them is no
        device), made once per request and GPUs for as long as the node's slices are read (a
        DeviceCache keeps them between calls: the GPUs of a node are given again and again)."""
        key = (request, gpus)
        got = self._results.get(key)
        if got is None:
            refs = [self.ref(i) for i in gpus]
            if None in refs:
                return None
            if len(self._results) >= _RESULTS_KEPT:  # tenants name their requests: a few kept per node
                self._results.clear()
            got = self._results[key] = tuple([_new_result(request, *ref) for ref in refs])  # type: ignore[misc]
        return got

    @property
    def by_index(self) -> Mapping[int, DeviceRef]:
        got = self._by_index
        if got is None:
            s = self._usual
            assert s is not None
            driver, pool = s.driver, s.pool
            got = self._by_index = dict(enumerate([(driver, pool, d.name) for d in s.devices]))
        return got

    @property
    def devices(self) -> Mapping[int, Device]:
        got = self._devices
        if got is None:
            assert self._usual is not None
            got = self._devices = dict(enumerate(self._usual.devices))
        return got

    def ref(self, index: int) -> DeviceRef | None:
        """The reference of the GPU device of ``index`` (None: none), as ``by_index.get(index)``."""
        s = self._usual
        if self._by_index is None and s is not None:  # no table made: read off the usual slice
            return (s.driver, s.pool, s.devices[index].name) if 0 <= index < len(s.devices) else None
        return self.by_index.get(index)

    @property
    def count(self) -> int:
        return len(self._usual.devices) if self._usual is not None else len(self.by_index)

    @property
    def first(self) -> tuple[str, Device]:
        """The driver and the device of the lowest index."""
        if self._usual is not None:
            return self._usual.driver, self._usual.devices[0]
        return self.by_index[min(self.by_index)][0], self.devices[min(self.devices)]

    @property
    def sample(self) -> Device:
        """The first device of ``devices``."""
        return self._usual.devices[0] if self._usual is not None else next(iter(self.devices.values()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NodeGpus) and (self.by_index, self.devices, self.driver) == (
            other.by_index, other.devices, other.driver)

    __hash__ = None  # type: ignore[assignment]  # mutable tables: unhashable, as the mappings are


_RESULTS_KEPT = 64  # the most results a node keeps (_NodeGpus.results)


class _Need(NamedTuple):
    """What a pending pod's claim asks the engine for: its requests ((name, count, resource) in spec
    order), or (``held``) the results of a claim another pod holds. A tuple: ten thousand a call."""

    claim: str
    requests: Asked
    held: tuple[DeviceResult, ...]


@dataclass(frozen=True)
class DeviceView:
    """A snapshot read for the engine, and what the controller does with DRA claims."""

    snapshot: Snapshot
    warnings: tuple[str, ...] = ()
    stale: tuple[ResourceClaim, ...] = ()  # allocations held by no pod: the controller clears them
    _gpus: Mapping[str, _NodeGpus] = field(default_factory=dict)
    _needs: Mapping[PodKey, tuple[_Need, ...]] = field(default_factory=dict)
    _migs: Mapping[str, Mapping[str, tuple[DeviceRef, ...]]] = field(default_factory=dict)  # node -> resource ->
    _held: frozenset[DeviceRef] = frozenset()  # devices of held claims

    def attach(self, decisions: Decisions) -> Decisions:
        """``decisions`` with each binding's ``devices``: its GPUs handed to its claims' requests."""
        if not self._needs:
            return decisions
        taken: set[DeviceRef] = set(self._held)  # MIG devices given out, held ones first
        needs_of, gpus_of = self._needs, self._gpus
        bindings: list[Binding] = []
        with no_gc():
            for b in decisions.bindings:
                needs = needs_of.get(b.pod)
                if not needs:
                    bindings.append(b)
                    continue
                # The usual binding (ten thousand a call): one claim of one request for whole GPUs,
                # each GPU a device of the node; _with_devices's result in fewer steps.
                if len(needs) == 1 and b.gpu_blocks is None and len(needs[0].requests) == 1:
                    need = needs[0]
                    request, count, resource = need.requests[0]
                    node = gpus_of.get(b.node)
                    if resource == GPU and count == len(b.gpus) and node is not None:
                        results = node.results(request, b.gpus)
                        if results is not None:
                            allocation = _new_allocation(need.claim, results, False)
                            bindings.append(_binding_with_devices(b, (allocation,)))
                            continue
                bindings.append(self._with_devices(b, taken))
        return replace(decisions, bindings=tuple(bindings))

    def _with_devices(self, binding: Binding, taken: set[DeviceRef]) -> Binding:
        needs = self._needs.get(binding.pod)
        if not needs:
            return binding
        node = self._gpus.get(binding.node)
        gpus = binding.gpus
        shared_gpu = binding.gpu_blocks is not None  # a share: its one request gets its one GPU
        at = 0
        out: list[ClaimAllocation] = []
        for need in needs:
            if need.held:
                out.append(ClaimAllocation(need.claim, need.held, shared=True))
                continue
            results: list[DeviceResult] = []
            for request, count, resource in need.requests:
                if resource != GPU:
                    results.extend(self._free_migs(binding.node, resource, request, count, taken))
                    continue
                for _ in range(count):
                    if at >= len(gpus) or node is None:
                        break
                    ref = node.by_index.get(gpus[at])
                    at += 0 if shared_gpu else 1
                    if ref is not None:
                        results.append(_new_result(request, ref[0], ref[1], ref[2]))
            out.append(_new_allocation(need.claim, tuple(results), False))
        return _copy_binding(binding, {"devices": tuple(out)})

    def _free_migs(self, node: str, resource: str, request: str, count: int,
                   taken: set[DeviceRef]) -> list[DeviceResult]:
        """The first ``count`` MIG devices of ``resource`` on ``node`` by name that no held claim and
        no earlier binding has (the engine counted them free, so there are enough)."""
        out: list[DeviceResult] = []
        for ref in self._migs.get(node, {}).get(resource, ()):
            if len(out) == count:
                break
            if ref not in taken:
                taken.add(ref)
                out.append(DeviceResult(request, ref[0], ref[1], ref[2]))
        return out


def _latest_slices(snapshot: Snapshot) -> dict[str, list[ResourceSlice]]:
    """Node-local slices per node, in name order: only each (driver, pool)'s highest generation."""
    newest: dict[tuple[str, str], int] = {}
    for s in snapshot.resource_slices:
        if s.node is not None:
            key = (s.driver, s.pool)
            if newest.get(key, s.generation) <= s.generation:
                newest[key] = s.generation
    per_node: dict[str, list[ResourceSlice]] = {}
    for s in snapshot.resource_slices:
        if s.node is not None and s.generation == newest[(s.driver, s.pool)]:
            per_node.setdefault(s.node, []).append(s)
    for slices in per_node.values():
        if len(slices) > 1:
            slices.sort(key=lambda s: s.name)
    return per_node


class _Keys(dict[str, tuple[str, str]]):
    """Per driver, its qualified ``type`` and ``index`` attribute names (built once per driver)."""

    def __missing__(self, driver: str) -> tuple[str, str]:
        got = (f"{driver}/type", f"{driver}/index")
        self[driver] = got
        return got


_KEYS = _Keys()


def _mig_resource(driver: str, device: Device) -> str | None:
    """The extended resource of a MIG device (by its ``profile``), None for other devices."""
    if device.attributes.get(_KEYS[driver][0]) != MIG_TYPE:
        return None
    profile = device.attributes.get(f"{driver}/profile")
    return f"{MIG_RESOURCE_PREFIX}{profile}" if isinstance(profile, str) and profile else None


def _index_of(driver: str, device: Device) -> int | None:
    value = device.attributes.get(_KEYS[driver][1])
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = _GPU_NAME.fullmatch(device.name)
    return int(m.group(1)) if m else None


_INT_ONLY = {int}  # the types of a slice's GPU indices when all are ints (no bool, no float)


def _node_gpus(node: str, slices: list[ResourceSlice], warnings: list[str],
               rest: list[tuple[str, str, Device]]) -> _NodeGpus | None:
    """The node's GPU devices by index (None: it has none, or they clash); its other devices are
    added to ``rest``. Five thousand nodes per call: one pass over the devices."""
    if len(slices) == 1:  # the usual slice: GPUs only, gpu-0 .. gpu-7 with their indices
        s = slices[0]
        type_key, index_key = _KEYS[s.driver]
        devices = s.devices
        if [d.attributes.get(type_key) for d in devices].count(GPU_TYPE) == len(devices) and devices:
            numbers = [d.attributes.get(index_key) for d in devices]
            if numbers == list(range(len(numbers))) and set(map(type, numbers)) == _INT_ONLY:
                return _NodeGpus(None, None, s.driver, s)
    gpus: list[tuple[str, str, Device]] = []
    found: list[int | None] = []
    for s in slices:
        type_key, index_key = _KEYS[s.driver]
        for d in s.devices:
            attributes = d.attributes
            if attributes.get(type_key) == GPU_TYPE:
                gpus.append((s.driver, s.pool, d))
                value = attributes.get(index_key)
                found.append(value if type(value) is int else _index_of(s.driver, d))
            else:
                rest.append((s.driver, s.pool, d))
    if not gpus:
        return None
    if found == list(range(len(found))):  # the usual slice: gpu-0 .. gpu-7 with their indices
        return _NodeGpus({i: (drv, pool, d.name) for i, (drv, pool, d) in enumerate(gpus)},
                         {i: d for i, (_drv, _pool, d) in enumerate(gpus)}, _one_driver(slices))
    names = [t[2].name for t in gpus]
    if names != sorted(names):
        order = sorted(range(len(gpus)), key=lambda k: names[k])
        gpus, found = [gpus[k] for k in order], [found[k] for k in order]
    if None in found:
        indices = list(range(len(gpus)))
    else:
        indices = [i for i in found if i is not None]
        if sorted(indices) != list(range(len(indices))) and len(set(indices)) == len(indices):
            # The engine numbers a node's GPUs 0..n-1: sparse indices are renumbered in their order.
            rank = {v: r for r, v in enumerate(sorted(indices))}
            indices = [rank[i] for i in indices]
    by_index: dict[int, DeviceRef] = {}
    table: dict[int, Device] = {}
    for i, (drv, pool, d) in zip(indices, gpus, strict=True):
        if i in by_index:
            twins = ", ".join([*sorted(ref[2] for j, ref in by_index.items() if j == i), d.name])
            warnings.append(f"node {node}: DRA GPU devices {twins} share index {i}; its ResourceSlices are ignored")
            return None
        by_index[i] = (drv, pool, d.name)
        table[i] = d
    return _NodeGpus(by_index, table, _one_driver(slices))


def _one_driver(slices: list[ResourceSlice]) -> str | None:
    first = slices[0].driver
    return first if all(s.driver == first for s in slices) else None


def _with_migs(node: Node, migs: Mapping[str, tuple[DeviceRef, ...]]) -> Node:
    allocatable = dict(node.allocatable)
    for resource, refs in migs.items():
        allocatable[resource] = len(refs) * MILLI
    return _copy_node(node, {"allocatable": allocatable})


def _with_gpus(node: Node, gpus: _NodeGpus,
               shared: dict[tuple[int, int], tuple[Mapping[str, int], Mapping[str, int]]] | None = None) -> Node:
    """``node`` with its GPUs from its slices. ``shared``: nodes that shared one allocatable mapping
    share the new one (as the loader shares them: the engine reads 5,000 nodes' mappings)."""
    count = gpus.count
    key = (id(node.allocatable), count)
    known = shared.get(key) if shared is not None else None
    if known is None:
        new = dict(node.allocatable)
        new[GPU] = count * MILLI
        known = (node.allocatable, new)
        if shared is not None:
            shared[key] = known
    allocatable = known[1]
    driver, first = gpus.first
    product = node.gpu_product
    if product is None:
        value = first.attributes.get(f"{driver}/productName")
        product = value if isinstance(value, str) else None
    memory = node.gpu_memory_mib
    if memory is None:
        text = first.capacity.get(f"{driver}/memory")
        if text is not None:
            memory = _mib(text)
    return _copy_node(node, {"allocatable": allocatable, "gpu_product": product, "gpu_memory_mib": memory})


@lru_cache(maxsize=64)
def _mib(quantity: str) -> int | None:
    """A device's memory capacity in MiB (None: zero or not a quantity); a few distinct texts a call."""
    try:
        return to_milli(quantity) // MIB_MILLI or None
    except QuantityError:
        return None


class _NoneMatch:
    """Stands for "no GPU device of this driver matches" among the selectors to ask per device."""


_NONE_MATCH: Selector = _NoneMatch()  # type: ignore[assignment]


class _SliceReading:
    """What a snapshot's ResourceSlices say, read once for as long as they are the same objects: each
    node's GPUs, MIG devices and other devices, the warnings, and the selectors and the nodes they
    allow (which read nothing but the slices and their expressions)."""

    __slots__ = ("dra_nodes", "eligible", "gpus", "migs", "others", "refs", "selectors", "warnings")

    def __init__(self, snapshot: Snapshot) -> None:
        self.warnings: list[str] = []
        self.gpus: dict[str, _NodeGpus] = {}
        self.others: list[tuple[str, Device]] = []  # devices neither GPU nor MIG (for reasons)
        # node -> MIG resource -> its devices by name, and each with its driver
        self.migs: dict[str, dict[str, list[tuple[DeviceRef, Device]]]] = {}
        for node, slices in _latest_slices(snapshot).items():
            rest: list[tuple[str, str, Device]] = []
            got = _node_gpus(node, slices, self.warnings, rest)
            if got is not None:
                self.gpus[node] = got
            for drv, pool, d in rest:
                resource = _mig_resource(drv, d)
                if resource is None:
                    self.others.append((drv, d))
                else:
                    self.migs.setdefault(node, {}).setdefault(resource, []).append(((drv, pool, d.name), d))
        for table in self.migs.values():
            for refs in table.values():
                refs.sort(key=lambda t: t[0][2])
        # node -> MIG resource -> its devices' references (DeviceView's table)
        self.refs: dict[str, Mapping[str, tuple[DeviceRef, ...]]] = {
            node: {r: tuple(ref for ref, _d in refs) for r, refs in table.items()} for node, table in self.migs.items()}
        self.dra_nodes = frozenset(self.gpus)
        self.selectors: dict[str, Selector | str] = {}
        self.eligible: dict[tuple[str, ...], tuple[str, frozenset[str]] | str] = {}


class _PodRead(NamedTuple):
    """A usual pending pod as read (see _Resolver.resolve): the pod and its claim it was read from,
    the pod the engine gets, its key and what its claim asks."""

    pod: Pod
    claim: ResourceClaim
    new: Pod
    key: PodKey
    needs: tuple[_Need, ...]


def _same(old: Sequence[object], new: Sequence[object]) -> bool:
    """Whether ``old`` and ``new`` hold the same objects (not equal ones: the same) in the same order."""
    return len(old) == len(new) and all(map(is_, old, new))


class DeviceCache:
    """What :func:`resolve_devices` read in its last call, which the next call takes where its
    objects are the same ones (identity, not equality: the controller's informers keep every object
    that did not change between cycles; a changed one is a new object). The slices' reading is kept
    while the snapshot's ResourceSlices are the same objects in the same order; a node's resolved
    copy while the node and the slices are the same; a bound pod's while the pod, the claims it holds
    and the slices are the same; a usual pending pod's while the pod, its claim, the slices, the
    DeviceClasses and the resources that nodes without DRA devices advertise are the same (what its
    reading depends on; who holds or allocates its claim is decided again every call). Only what the
    last call saw is kept (the objects held, so that no id is reused while kept). One cache serves one
    caller's calls one at a time."""

    __slots__ = ("_bound", "_classes", "_nodes", "_plain", "_pods", "_reading", "_slices")

    def __init__(self) -> None:
        self._slices: tuple[ResourceSlice, ...] = ()
        self._reading: _SliceReading | None = None
        self._classes: tuple[DeviceClass, ...] = ()
        self._plain: frozenset[str] = frozenset()
        self._nodes: dict[int, tuple[Node, Node]] = {}  # id(node) -> the node, its resolved copy
        self._pods: dict[int, _PodRead] = {}  # id(pod) -> its reading
        # id(pod) -> a bound pod, the claims it holds (None for the others), the pod the engine gets
        self._bound: dict[int, tuple[Pod, tuple[ResourceClaim | None, ...], Pod]] = {}

    def _take(self, snapshot: Snapshot) -> _SliceReading | None:
        """The slices' reading, if the snapshot's slices are those of the last call; else nothing
        of the last call is kept."""
        if self._reading is not None and _same(self._slices, snapshot.resource_slices):
            return self._reading
        self._reading, self._nodes, self._pods, self._bound = None, {}, {}, {}
        return None


class _Resolver:
    def __init__(self, snapshot: Snapshot, cache: DeviceCache | None = None) -> None:
        self.snapshot = snapshot
        self.cache = cache
        reading = cache._take(snapshot) if cache is not None else None
        if reading is None:
            reading = _SliceReading(snapshot)
            if cache is not None:
                cache._slices, cache._reading = snapshot.resource_slices, reading
        self.reading = reading
        self.warnings = reading.warnings
        self.gpus = reading.gpus
        self.others = reading.others
        self.migs = reading.migs
        self.claims: dict[tuple[str, str], ResourceClaim] = {
            (c.namespace, c.name): c for c in snapshot.resource_claims
        }
        self.classes: dict[str, DeviceClass] = {c.name: c for c in snapshot.device_classes}
        # Selectors and what they allow: those of the slices' reading, kept for the next call as far
        # as this one asks for them (tenants' selectors come and go: the reading keeps no others).
        self.selectors: dict[str, Selector | str] = {}
        self.eligible: dict[tuple[str, ...], tuple[str, frozenset[str]] | str] = {}
        self.plans: dict[object, Plan | Callable[[str], str]] = {}
        self.plans_by_id: dict[tuple[int, str | None], tuple[object, Plan | Callable[[str], str]]] = {}
        self.sums: dict[Asked, tuple[tuple[str, int], ...]] = {}  # a claim's requests -> milli-units per resource
        # (id of a requests mapping, what is added) -> (that mapping, kept alive; the new one)
        self.requests: dict[tuple[int, tuple[tuple[str, int], ...]], tuple[Mapping[str, int], Mapping[str, int]]] = {}
        self.dra_nodes = reading.dra_nodes
        # Resources (GPU, MIG profiles) that some node without DRA devices of them also advertises.
        self.plain: set[str] = set()
        for n in snapshot.nodes:
            for resource, amount in n.allocatable.items():
                if amount <= 0:
                    continue
                if resource == GPU:
                    if n.name not in self.gpus:
                        self.plain.add(resource)
                elif resource.startswith(MIG_RESOURCE_PREFIX) and resource not in self.migs.get(n.name, {}):
                    self.plain.add(resource)
        # The pods read in the last call, if what their readings depend on besides them is the same.
        self.old_pods: dict[int, _PodRead] = {}
        if cache is not None:
            plain = frozenset(self.plain)
            if _same(cache._classes, snapshot.device_classes) and cache._plain == plain:
                self.old_pods = cache._pods
            cache._classes, cache._plain = snapshot.device_classes, plain

    # -- selectors ------------------------------------------------------------------------------

    def _selector(self, expression: str) -> Selector | str:
        got = self.selectors.get(expression)
        if got is None:
            got = self.reading.selectors.get(expression)
            if got is not None:
                self.selectors[expression] = got
                return got
            # Imported here: cel-python loads only for snapshots that have selectors to evaluate.
            from gpufleet.adapters._device_cel import Selector, SelectorError

            try:
                got = Selector(expression)
            except SelectorError as err:
                got = f"selector {expression.strip()}: {err}"
            self.selectors[expression] = got
        return got

    def _nodes_for(self, expressions: tuple[str, ...]) -> tuple[str, frozenset[str]] | str:
        """What devices satisfying all ``expressions`` are: GPUs, or MIG devices of one profile (its
        resource), and the nodes all of whose such devices satisfy them; or why none can be given."""
        got = self.eligible.get(expressions)
        if got is None:
            got = self.reading.eligible.get(expressions)
            if got is not None:
                self.eligible[expressions] = got
        if got is not None:
            return got
        selectors: list[Selector] = []
        for e in expressions:
            s = self._selector(e)
            if isinstance(s, str):
                self.eligible[expressions] = s
                return s
            selectors.append(s)
        errors: list[str] = []
        tested = erred = 0  # devices asked, and those a selector failed on with an error

        def matches(driver: str, d: Device) -> bool:
            nonlocal tested, erred
            tested += 1
            for s in selectors:
                r = s.evaluate(driver, d)
                if r is not True:
                    if isinstance(r, str):
                        errors.append(f"selector {s.expression.strip()}: {r}")
                        erred += 1
                    return False
            return True

        result: tuple[str, frozenset[str]] | str
        nodes: set[str] = set()
        any_gpu = False
        # Selectors that read only the driver and the type (a device class's) say the same of every
        # GPU device of a driver: asked once per driver, not of fifty thousand devices.
        per_driver: dict[str, tuple[tuple[Selector, ...], str | None]] = {}  # driver -> per device, error
        for node, gpus in self.gpus.items():
            asked: tuple[Selector, ...] = tuple(selectors)
            if gpus.driver is not None:
                known = per_driver.get(gpus.driver)
                if known is None:
                    known = self._per_device(gpus.driver, gpus.sample, selectors)
                    per_driver[gpus.driver] = known
                asked, error = known
                if not asked or asked[0] is _NONE_MATCH:  # decided for the whole node at once
                    tested += gpus.count
                    if asked:
                        if error is not None:
                            errors.append(error)
                            erred += gpus.count
                    else:
                        any_gpu = True
                        nodes.add(node)
                    continue
            pairs = [(ref[0], d) for ref, d in zip(gpus.by_index.values(), gpus.devices.values(), strict=True)]
            ok = [True] * len(pairs)
            for s in asked:  # a node's devices at a time
                for k, r in enumerate(s.evaluate_all(pairs)):
                    if r is not True and ok[k]:
                        ok[k] = False
                        if isinstance(r, str):
                            errors.append(f"selector {s.expression.strip()}: {r}")
                            erred += 1
            tested += len(pairs)
            any_gpu |= any(ok)
            if all(ok):
                nodes.add(node)
        result = (GPU, frozenset(nodes))
        if not any_gpu:
            mig = self._mig_nodes(matches)
            if mig is not None:
                result = mig
            else:
                other = self._other_match(selectors)
                if other is not None:
                    result = other
                elif errors and erred == tested:
                    result = sorted(errors)[0]
        self.eligible[expressions] = result
        return result

    def _per_device(self, driver: str, sample: Device,
                    selectors: Sequence[Selector]) -> tuple[tuple[Selector, ...], str | None]:
        """Of ``selectors``, those to ask of each GPU device of ``driver``; ``(_NONE_MATCH,)`` (with
        the error, if it was one) when one that reads only the driver and the type fails for them
        all (asked of ``sample``)."""
        out: list[Selector] = []
        for s in selectors:
            if not s.reads_only_type(driver):
                out.append(s)
                continue
            r = s.evaluate(driver, sample)
            if r is not True:
                return (_NONE_MATCH,), f"selector {s.expression.strip()}: {r}" if isinstance(r, str) else None
        return tuple(out), None

    def _mig_nodes(self, matches: Callable[[str, Device], bool]) -> tuple[str, frozenset[str]] | str | None:
        """MIG devices that ``matches``: (their profile's resource, the nodes all of whose devices of
        that profile match), a reason when they are of several profiles, None when none matches."""
        found: dict[str, set[str]] = {}
        for node, table in self.migs.items():
            for resource, refs in table.items():
                hits = [matches(ref[0], d) for ref, d in refs]
                if any(hits):
                    nodes = found.setdefault(resource, set())
                    if all(hits):
                        nodes.add(node)
        if not found:
            return None
        if len(found) > 1:
            profiles = ", ".join(sorted(r[len(MIG_RESOURCE_PREFIX):] for r in found))
            return f"devices of several MIG profiles ({profiles})"
        ((resource, nodes),) = found.items()
        return resource, frozenset(nodes)

    def _other_match(self, selectors: Sequence[Selector]) -> str | None:
        for driver, d in self.others:
            if all(s.evaluate(driver, d) is True for s in selectors):
                kind = d.attributes.get(f"{driver}/type")
                return f'devices of type "{kind}"' if isinstance(kind, str) else "devices other than GPUs"
        return None

    # -- pods -----------------------------------------------------------------------------------

    def held(self) -> tuple[dict[tuple[str, str], Pod], list[ResourceClaim]]:
        """Claims held by a bound pod (-> that pod, the first by name), and stale allocations."""
        by_key: dict[tuple[str, str], Pod] = {(p.namespace, p.name): p for p in self.snapshot.pods}
        holders: dict[tuple[str, str], Pod] = {}
        stale: list[ResourceClaim] = []
        allocated = sorted((c for c in self.snapshot.resource_claims if c.allocation),
                           key=lambda c: (c.namespace, c.name))
        for claim in allocated:
            key = (claim.namespace, claim.name)
            live = [by_key[(claim.namespace, n)] for n in sorted(claim.reserved_for)
                    if (claim.namespace, n) in by_key and not by_key[(claim.namespace, n)].finished]
            bound = [p for p in live if p.node_name is not None]
            if bound:
                holders[key] = bound[0]
            elif not live:
                stale.append(claim)
        return holders, stale

    def resolve(self) -> DeviceView:
        holders, stale = self.held()
        pods: list[Pod] = []
        needs: dict[PodKey, tuple[_Need, ...]] = {}
        allocators: dict[tuple[str, str], Pod] = {}
        claims, plan_of, sums_of, with_requests = self.claims, self._plan, self._claim_sums, self._with_requests
        caching, old_pods, read_pods = self.cache is not None, self.old_pods, dict[int, _PodRead]()
        old_bound = self.cache._bound if self.cache is not None else {}
        read_bound: dict[int, tuple[Pod, tuple[ResourceClaim | None, ...], Pod]] = {}
        # In namespace/name order: of pending pods naming one unheld claim, the first allocates it.
        for pod in sorted(self.snapshot.pods, key=_by_key):
            entries = pod.resource_claims
            if not entries or pod.phase in _FINISHED:  # Pod.finished
                pods.append(pod)
            elif pod.node_name is not None:
                if caching:  # the pod read in the last call, if it holds the same claims
                    held_claims = self._held_claims(pod, holders)
                    was = old_bound.get(id(pod))
                    if was is None or was[0] is not pod or not _same(was[1], held_claims):
                        was = (pod, held_claims, self._bound(pod, holders))
                    read_bound[id(pod)] = was
                    pods.append(was[2])
                else:
                    pods.append(self._bound(pod, holders))
            elif pod.scheduler_name != SCHEDULER_NAME:  # not Pod.ours
                pods.append(pod)
            else:
                # The usual pod (ten thousand a call), inline: not fractional, one claim, which
                # exists, is not being deleted, is held by no pod, is allocated with this pod and
                # can be allocated. The same result as _pending's in fewer steps.
                if len(entries) == 1 and pod.gpu_blocks is None and pod.gpu_memory_bytes is None:
                    entry = entries[0]
                    name = entry.claim if entry.claim is not None else entry.generated
                    if name is not None:
                        key = (pod.namespace, name)
                        claim = claims.get(key)
                        if (claim is not None and not claim.deleting and key not in holders
                                and allocators.setdefault(key, pod) is pod):
                            # Read in the last call from this pod and this claim (DeviceCache):
                            # the same reading.
                            read = old_pods.get(id(pod)) if caching else None
                            if read is not None and read.pod is pod and read.claim is claim:
                                read_pods[id(pod)] = read
                                pods.append(read.new)
                                needs[read.key] = read.needs
                                continue
                            plan = plan_of(name, claim)
                            if not isinstance(plan, str):
                                asked, restrict = plan
                                extra_items = sums_of(asked)
                                if restrict is not None:
                                    new = _pod_with_nodes_requests(pod, restrict, with_requests(
                                        pod.requests, extra_items) if extra_items else pod.requests)
                                elif extra_items:
                                    new = _pod_with_requests(pod, with_requests(pod.requests, extra_items))
                                else:
                                    new = pod
                                pods.append(new)
                                pod_key = PodKey(f"{pod.namespace}/{pod.name}")
                                pod_needs = needs[pod_key] = (_Need(name, asked, ()),)
                                if caching:
                                    read_pods[id(pod)] = _PodRead(pod, claim, new, pod_key, pod_needs)
                                continue
                new, need = self._pending(pod, holders, allocators)
                pods.append(new)
                if need:
                    needs[PodKey(f"{pod.namespace}/{pod.name}")] = need
        migs = self.reading.refs
        nodes = []
        allocatables: dict[tuple[int, int], tuple[Mapping[str, int], Mapping[str, int]]] = {}
        cache = self.cache
        gpus_of = self.gpus
        if cache is None:
            for n in self.snapshot.nodes:
                if n.name in gpus_of:
                    n = _with_gpus(n, gpus_of[n.name], allocatables)
                if n.name in migs:
                    n = _with_migs(n, migs[n.name])
                nodes.append(n)
        else:
            old_nodes, read_nodes = cache._nodes, dict[int, tuple[Node, Node]]()
            for n in self.snapshot.nodes:
                name = n.name
                if name in gpus_of or name in migs:
                    seen = old_nodes.get(id(n))
                    if seen is None or seen[0] is not n:  # else read in the last call, from the same slices
                        new_node = _with_gpus(n, gpus_of[name], allocatables) if name in gpus_of else n
                        if name in migs:
                            new_node = _with_migs(new_node, migs[name])
                        seen = (n, new_node)
                    read_nodes[id(n)] = seen
                    n = seen[1]
                nodes.append(n)
            cache._nodes, cache._pods, cache._bound = read_nodes, read_pods, read_bound
            self.reading.selectors, self.reading.eligible = self.selectors, self.eligible
        held = frozenset((r.driver, r.pool, r.device) for key in holders for r in self.claims[key].allocation)
        snapshot = replace(self.snapshot, nodes=tuple(nodes), pods=tuple(pods))
        return DeviceView(snapshot, tuple(self.warnings), tuple(stale), self.gpus, needs, migs, held)

    def _held_claims(self, pod: Pod, holders: Mapping[tuple[str, str], Pod]) -> tuple[ResourceClaim | None, ...]:
        """Per claim of the bound ``pod``, the claim if the pod is its holder (None: it is not):
        what _bound reads of the claims."""
        out: list[ResourceClaim | None] = []
        for entry in pod.resource_claims:
            name = entry.claim_name
            holder = holders.get((pod.namespace, name)) if name else None
            out.append(self.claims[(pod.namespace, name)] if holder is not None and name and holder.key == pod.key
                       else None)
        return tuple(out)

    def _bound(self, pod: Pod, holders: Mapping[tuple[str, str], Pod]) -> Pod:
        """A bound pod holds the devices of the claims it is the holder of: GPUs by index, MIG
        devices as their profiles' resources."""
        indices: list[int] = []
        extra: dict[str, int] = {}
        for entry in pod.resource_claims:
            name = entry.claim_name
            holder = holders.get((pod.namespace, name)) if name else None
            if holder is None or holder.key != pod.key:
                continue
            node = pod.node_name or ""
            gpus = self.gpus.get(node)
            migs = self.migs.get(node, {})
            for r in self.claims[(pod.namespace, name or "")].allocation:
                ref = (r.driver, r.pool, r.device)
                # A node has a few devices: looked up on it, not in a table of every device.
                index = next((i for i, at in gpus.by_index.items() if at == ref), None) if gpus else None
                if index is not None:
                    indices.append(index)
                    continue
                for resource, refs in migs.items():
                    if any(at == ref for at, _d in refs):
                        extra[resource] = extra.get(resource, 0) + MILLI
        if not indices and not extra:
            return pod
        changes: dict[str, object] = {}
        if indices:
            changes["gpu_index"] = (indices[0],) if pod.is_fractional else tuple(indices)
            if not pod.is_fractional:
                extra[GPU] = len(indices) * MILLI
        if extra:
            changes["requests"] = self._with_requests(pod.requests, tuple(sorted(extra.items())))
        return _copy_pod(pod, changes)

    def _pending(self, pod: Pod, holders: Mapping[tuple[str, str], Pod],
                 allocators: dict[tuple[str, str], Pod]) -> tuple[Pod, tuple[_Need, ...]]:
        needs: list[_Need] = []
        nodes: frozenset[str] | None = None
        extra: dict[str, int] = {}
        single: tuple[tuple[str, int], ...] | None = None  # ``extra`` sorted, when one claim asked for it
        requests = 0
        for entry in pod.resource_claims:
            name = entry.claim_name
            if name is None:
                return replace(pod, device_wait=(
                    f'waiting for resourceclaim for entry "{entry.name}" (template "{entry.template}") to be created'
                )), ()
            claim = self.claims.get((pod.namespace, name))
            if claim is None:
                return replace(pod, device_wait=f'resourceclaim "{name}" not found'), ()
            if claim.deleting:
                return replace(pod, device_wait=f'resourceclaim "{name}" is being deleted'), ()
            holder = holders.get((pod.namespace, name))
            if holder is not None:
                node = holder.node_name or ""
                nodes = frozenset({node}) if nodes is None else nodes & {node}
                needs.append(_Need(name, (), claim.allocation))
                continue
            first = allocators.setdefault((pod.namespace, name), pod)
            if first is not pod:
                return replace(pod, device_wait=(
                    f'waiting for resourceclaim "{name}" to be allocated with pod {first.key}'
                )), ()
            plan = self._plan(name, claim)
            if isinstance(plan, str):
                return replace(pod, device_wait=plan), ()
            asked, restrict = plan
            if restrict is not None:
                nodes = restrict if nodes is None else nodes & restrict
            if len(pod.resource_claims) == 1:  # the usual pod: its one claim's sums, computed once
                extra_items = self._claim_sums(asked)
                extra.update(extra_items)
                single = extra_items
            else:
                for _r, c, resource in asked:
                    extra[resource] = extra.get(resource, 0) + c * MILLI
            requests += len(asked)
            needs.append(_Need(name, asked, ()))
        fractional = pod.gpu_blocks is not None or pod.gpu_memory_bytes is not None  # Pod.is_fractional
        if fractional:
            for need in needs:
                claim = self.claims[(pod.namespace, need.claim)]
                if any("sharing" in c.parameters for c in claim.config):
                    # The tenant's own MPS limits would replace those of its blocks.
                    return replace(pod, device_wait=(
                        f'resourceclaim "{need.claim}": the claim of a fractional pod may not set its own sharing '
                        f"(gpufleet sets the MPS limits from the pod's blocks)"
                    )), ()
        if fractional and (requests != 1 or extra.get(GPU) != MILLI):
            first_claim = next((n.claim for n in needs if n.requests), needs[0].claim if needs else "")
            return replace(pod, device_wait=(
                f'resourceclaim "{first_claim}": a fractional pod must have exactly one GPU request of count 1'
            )), ()
        changes: dict[str, object] = {}
        if fractional:
            extra.pop(GPU, None)  # its share is its blocks
        if extra:
            items = single if single is not None and not fractional else tuple(sorted(extra.items()))
            changes["requests"] = self._with_requests(pod.requests, items)
        if nodes is not None:
            changes["device_nodes"] = nodes
        return (_copy_pod(pod, changes) if changes else pod), tuple(needs)

    def _claim_sums(self, asked: Asked) -> tuple[tuple[str, int], ...]:
        """What a claim's requests ``asked`` add to a pod's requests, by resource (milli units, sorted),
        computed once per distinct ``asked``."""
        got = self.sums.get(asked)
        if got is None:
            sums: dict[str, int] = {}
            for _r, c, resource in asked:
                sums[resource] = sums.get(resource, 0) + c * MILLI
            got = self.sums[asked] = tuple(sorted(sums.items()))
        return got

    def _with_requests(self, requests: Mapping[str, int], extra: tuple[tuple[str, int], ...]) -> Mapping[str, int]:
        """``requests`` plus ``extra`` (resource, milli-units); pods that shared one mapping share the
        new one too (the engine reads thousands of pods faster when their requests are one object)."""
        key = (id(requests), extra)
        got = self.requests.get(key)
        if got is None:
            added = dict(requests)
            for resource, amount in extra:
                added[resource] = added.get(resource, 0) + amount
            got = (requests, added)
            self.requests[key] = got
        return got[1]

    def _plan(self, name: str, claim: ResourceClaim) -> Plan | str:
        """A claim's requests ((name, count, resource) in order) and the nodes it restricts the pod
        to, or why it cannot be allocated. Once per claim spec (all the claims of one template)."""
        # Claims made from one template share their requests tuple: looked up by its identity first
        # (the tuple kept alive beside the plan, so that its id is not reused during the call).
        requests = claim.requests
        seen = self.plans_by_id.get((id(requests), claim.unsupported))
        if seen is not None and seen[0] is requests:
            got = seen[1]
        else:
            # Then by the fields, not the DeviceRequests (whose generated __hash__ is Python).
            key = (claim.unsupported, *[(r.name, r.device_class, r.count, r.selectors, r.unsupported)
                                        for r in requests])
            found = self.plans.get(key)
            if found is None:
                found = self.plans[key] = self._make_plan(claim)
            got = found
            self.plans_by_id[(id(requests), claim.unsupported)] = (requests, got)
        return got(name) if callable(got) else got

    def _natural(self, resource: str) -> frozenset[str] | None:
        """The nodes with DRA devices of ``resource``, when no other node advertises it (then a
        request that can use all of them restricts nothing the resource request does not)."""
        if resource in self.plain:
            return None
        if resource == GPU:
            return self.dra_nodes
        return frozenset(node for node, table in self.migs.items() if resource in table)

    def _make_plan(self, claim: ResourceClaim) -> Plan | Callable[[str], str]:
        """``_plan``, its reason a function of the claim's name."""
        if claim.unsupported:
            what = claim.unsupported
            return lambda name: f'resourceclaim "{name}": {what} is not supported by gpufleet'
        asked: list[tuple[str, int, str]] = []
        nodes: frozenset[str] | None = None
        for request in claim.requests:
            r = request.name
            if request.unsupported:
                what = request.unsupported
                return lambda name: f'resourceclaim "{name}" request "{r}": {what} is not supported by gpufleet'
            device_class = self.classes.get(request.device_class)
            if device_class is None:
                c = request.device_class
                return lambda name: f'deviceclass "{c}" of resourceclaim "{name}" request "{r}" not found'
            target = self._nodes_for(device_class.selectors + request.selectors)
            if isinstance(target, str):
                why = target
                return lambda name: f'resourceclaim "{name}" request "{r}": {why} is not supported by gpufleet'
            resource, eligible = target
            if eligible != self._natural(resource):
                nodes = eligible if nodes is None else nodes & eligible
            asked.append((request.name, request.count, resource))
        return tuple(asked), nodes




_by_key: Callable[[Pod], tuple[str, str]] = attrgetter("namespace", "name")
_FINISHED = ("Succeeded", "Failed")  # Pod.finished's phases


T = TypeVar("T")


def _slot_function(cls: type[T], params: Sequence[str] | None, value: Callable[[str], str],
                   tail: Sequence[str] = ()) -> Callable[..., T]:
    """A generated function of ``params`` (None: every field of the frozen slotted dataclass ``cls``,
    in order) making a ``cls`` whose field ``name`` is the expression ``value(name)``, then running the
    lines ``tail`` (which may call ``setters[name](new, value)``): the slots are set through their member
    descriptors and no ``__init__`` runs, several times faster than the constructor or
    ``dataclasses.replace`` (ten thousand pods, bindings and device results a call; a Pod has forty
    fields), so the values must be valid ones."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    setters = {name: getattr(cls, name).__set__ for name in names}  # the slots' member descriptors
    lines = [f"def make({', '.join(names if params is None else params)}):", "    new = new_object(cls)"]
    lines += [f"    set_{name}(new, {value(name)})" for name in names]
    lines += [*tail, "    return new"]
    scope: dict[str, object] = {"new_object": object.__new__, "cls": cls, "setters": setters}
    scope.update({f"set_{name}": setter for name, setter in setters.items()})
    exec("\n".join(lines), scope)  # code made only of the dataclass's own field names
    return scope["make"]  # type: ignore[return-value]


def _copier(cls: type[T]) -> Callable[[T, Mapping[str, object]], T]:
    """``dataclasses.replace(obj, **changes)`` for ``cls`` (:func:`_slot_function`): ``changes`` must
    hold valid values of existing fields."""
    return _slot_function(cls, ["obj", "changes"], lambda name: f"obj.{name}",
                          ["    for name, value in changes.items():", "        setters[name](new, value)"])


def _replacer(cls: type[T], *changed: str) -> Callable[..., T]:
    """``_copier(cls)`` for the fields ``changed`` (their values given after ``obj``, in that
    order): no mapping of changes made and read per object."""
    assert set(changed) <= {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return _slot_function(cls, ["obj", *changed], lambda name: name if name in changed else f"obj.{name}")


def _maker(cls: type[T]) -> Callable[..., T]:
    """``cls(*values)`` (every field given, in order) for ``cls`` without ``__post_init__``
    (:func:`_slot_function`)."""
    return _slot_function(cls, None, lambda name: name)


_copy_pod = _copier(Pod)
_copy_binding = _copier(Binding)
_copy_node = _copier(Node)
_pod_with_nodes_requests: Callable[[Pod, frozenset[str], Mapping[str, int]], Pod] = _replacer(
    Pod, "device_nodes", "requests")
_pod_with_requests: Callable[[Pod, Mapping[str, int]], Pod] = _replacer(Pod, "requests")
_binding_with_devices: Callable[[Binding, tuple[ClaimAllocation, ...]], Binding] = _replacer(Binding, "devices")
_new_result: Callable[[str, str, str, str], DeviceResult] = _maker(DeviceResult)
_new_allocation: Callable[[str, tuple[DeviceResult, ...], bool], ClaimAllocation] = _maker(ClaimAllocation)


def resolve_devices(snapshot: Snapshot, cache: DeviceCache | None = None) -> DeviceView:
    """``snapshot`` as the engine schedules it with its DRA objects read (see the module text).

    A snapshot without ResourceSlices and without pods naming claims is returned as it is.
    ``cache``: what the caller's last call read, taken where its objects are the same ones (a
    caller that keeps its objects between calls, as the controller does between cycles); the
    result is the same as without it."""
    if not snapshot.resource_slices and not _any_claims(snapshot.pods):
        return DeviceView(snapshot)
    with no_gc():
        return _Resolver(snapshot, cache).resolve()


def _any_claims(pods: Iterable[Pod]) -> bool:
    return any(p.resource_claims for p in pods)
