"""DRA GPU devices read into the engine's vocabulary, and the engine's GPUs read back as devices.

docs/semantics-notes.md, "Dynamic Resource Allocation", is the rule this module implements. The
engine knows GPUs by node and index; DRA knows them as devices of ResourceSlices, asked for by
ResourceClaims. :func:`resolve_devices` turns a snapshot with DRA objects into one the engine
schedules as it schedules any snapshot (node GPU counts from slices; pods' GPU requests from their
claims, with the nodes their selectors allow and the reasons they wait), and
:meth:`DeviceView.attach` turns the GPUs of each binding back into the devices its claims get. The
controller and ``replay`` both go through here, so that they allocate alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from typing import TYPE_CHECKING

from gpufleet.adapters.quantity import QuantityError, to_milli
from gpufleet.domain import (
    GPU,
    MILLI,
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
    Snapshot,
)

if TYPE_CHECKING:
    from gpufleet.adapters._device_cel import Selector

__all__ = ["DeviceView", "resolve_devices"]

GPU_TYPE = "gpu"
_GPU_NAME = re.compile(r"gpu-(\d+)")
MIB_MILLI = 1024 * 1024 * MILLI

DeviceRef = tuple[str, str, str]  # driver, pool, device name
Plan = tuple[tuple[tuple[str, int], ...], frozenset[str]]  # a claim's (request, count)s, and its nodes


@dataclass(frozen=True)
class _NodeGpus:
    """A node's GPU devices by index."""

    by_index: Mapping[int, DeviceRef]
    devices: Mapping[int, Device]


@dataclass(frozen=True, slots=True)
class _Need:
    """What a pending pod's claim asks the engine for: GPU requests ((name, count) in spec order),
    or (``held``) the results of a claim another pod holds."""

    claim: str
    requests: tuple[tuple[str, int], ...] = ()
    held: tuple[DeviceResult, ...] = ()


@dataclass(frozen=True)
class DeviceView:
    """A snapshot read for the engine, and what the controller does with DRA claims."""

    snapshot: Snapshot
    warnings: tuple[str, ...] = ()
    stale: tuple[ResourceClaim, ...] = ()  # allocations held by no pod: the controller clears them
    _gpus: Mapping[str, _NodeGpus] = field(default_factory=dict)
    _needs: Mapping[PodKey, tuple[_Need, ...]] = field(default_factory=dict)

    def attach(self, decisions: Decisions) -> Decisions:
        """``decisions`` with each binding's ``devices``: its GPUs handed to its claims' requests."""
        if not self._needs:
            return decisions
        bindings = tuple(self._with_devices(b) for b in decisions.bindings)
        return replace(decisions, bindings=bindings)

    def _with_devices(self, binding: Binding) -> Binding:
        needs = self._needs.get(binding.pod)
        if not needs:
            return binding
        node = self._gpus.get(binding.node)
        gpus = list(binding.gpus)
        out: list[ClaimAllocation] = []
        for need in needs:
            if need.held:
                out.append(ClaimAllocation(need.claim, need.held, shared=True))
                continue
            results: list[DeviceResult] = []
            for request, count in need.requests:
                for _ in range(count):
                    if not gpus or node is None:
                        break
                    ref = node.by_index.get(gpus.pop(0) if binding.gpu_blocks is None else gpus[0])
                    if ref is not None:
                        results.append(DeviceResult(request, *ref))
            out.append(ClaimAllocation(need.claim, tuple(results)))
        return replace(binding, devices=tuple(out))


def _latest_slices(snapshot: Snapshot) -> dict[str, list[tuple[str, str, Device]]]:
    """Devices of node-local slices, per node: only each (driver, pool)'s highest generation."""
    newest: dict[tuple[str, str], int] = {}
    for s in snapshot.resource_slices:
        if s.node is not None:
            key = (s.driver, s.pool)
            newest[key] = max(newest.get(key, s.generation), s.generation)
    out: dict[str, list[tuple[str, str, Device]]] = {}
    for s in sorted(snapshot.resource_slices, key=lambda s: s.name):
        if s.node is not None and s.generation == newest[(s.driver, s.pool)]:
            out.setdefault(s.node, []).extend((s.driver, s.pool, d) for d in s.devices)
    return out


def _is_gpu(driver: str, device: Device) -> bool:
    return device.attributes.get(f"{driver}/type") == GPU_TYPE


def _index_of(driver: str, device: Device) -> int | None:
    value = device.attributes.get(f"{driver}/index")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = _GPU_NAME.fullmatch(device.name)
    return int(m.group(1)) if m else None


def _node_gpus(node: str, devices: list[tuple[str, str, Device]], warnings: list[str]) -> _NodeGpus | None:
    gpus = sorted(((drv, pool, d) for drv, pool, d in devices if _is_gpu(drv, d)), key=lambda t: t[2].name)
    if not gpus:
        return None
    found = [_index_of(drv, d) for drv, _p, d in gpus]
    if any(i is None for i in found):
        indices = list(range(len(gpus)))
    else:
        indices = [i for i in found if i is not None]
        if len(set(indices)) == len(indices) and sorted(indices) != list(range(len(indices))):
            # The engine numbers a node's GPUs 0..n-1: sparse indices are renumbered in their order.
            rank = {v: r for r, v in enumerate(sorted(indices))}
            indices = [rank[i] for i in indices]
    by_index: dict[int, DeviceRef] = {}
    table: dict[int, Device] = {}
    for i, (drv, pool, d) in zip(indices, gpus, strict=True):
        assert i is not None
        if i in by_index:
            names = ", ".join([*sorted(ref[2] for j, ref in by_index.items() if j == i), d.name])
            warnings.append(f"node {node}: DRA GPU devices {names} share index {i}; its ResourceSlices are ignored")
            return None
        by_index[i] = (drv, pool, d.name)
        table[i] = d
    return _NodeGpus(by_index, table)


def _with_gpus(node: Node, gpus: _NodeGpus) -> Node:
    allocatable = dict(node.allocatable)
    allocatable[GPU] = len(gpus.by_index) * MILLI
    first = gpus.devices[min(gpus.devices)]
    driver = gpus.by_index[min(gpus.by_index)][0]
    product = node.gpu_product
    if product is None:
        value = first.attributes.get(f"{driver}/productName")
        product = value if isinstance(value, str) else None
    memory = node.gpu_memory_mib
    if memory is None and f"{driver}/memory" in first.capacity:
        try:
            memory = to_milli(first.capacity[f"{driver}/memory"]) // MIB_MILLI or None
        except QuantityError:
            memory = None
    return replace(node, allocatable=allocatable, gpu_product=product, gpu_memory_mib=memory)


class _Resolver:
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.warnings: list[str] = []
        self.gpus: dict[str, _NodeGpus] = {}
        self.others: list[tuple[str, Device]] = []  # non-GPU devices of every node (for reasons)
        for node, devices in _latest_slices(snapshot).items():
            got = _node_gpus(node, devices, self.warnings)
            if got is not None:
                self.gpus[node] = got
            self.others.extend((drv, d) for drv, _p, d in devices if not _is_gpu(drv, d))
        self.ref_index: dict[DeviceRef, tuple[str, int]] = {
            ref: (node, i) for node, g in self.gpus.items() for i, ref in g.by_index.items()
        }
        self.claims: dict[tuple[str, str], ResourceClaim] = {
            (c.namespace, c.name): c for c in snapshot.resource_claims
        }
        self.classes: dict[str, DeviceClass] = {c.name: c for c in snapshot.device_classes}
        self.selectors: dict[str, Selector | str] = {}
        self.eligible: dict[tuple[str, ...], frozenset[str] | str] = {}
        self.plans: dict[object, Plan | Callable[[str], str]] = {}
        self.requests: dict[tuple[int, int], tuple[Mapping[str, int], Mapping[str, int]]] = {}
        self.whole_sets: dict[int, tuple[frozenset[str], bool]] = {}  # id -> (the set, kept alive; equal?)
        self.dra_nodes = frozenset(self.gpus)
        self.plain_gpu_nodes = any(
            n.allocatable.get(GPU, 0) > 0 for n in snapshot.nodes if n.name not in self.gpus
        )

    # -- selectors ------------------------------------------------------------------------------

    def _selector(self, expression: str) -> Selector | str:
        got = self.selectors.get(expression)
        if got is None:
            # Imported here: cel-python loads only for snapshots that have selectors to evaluate.
            from gpufleet.adapters._device_cel import Selector, SelectorError

            try:
                got = Selector(expression)
            except SelectorError as err:
                got = f"selector {expression.strip()}: {err}"
            self.selectors[expression] = got
        return got

    def _nodes_for(self, expressions: tuple[str, ...]) -> frozenset[str] | str:
        """Nodes whose every GPU device satisfies all ``expressions``, or why none can be chosen."""
        got = self.eligible.get(expressions)
        if got is not None:
            return got
        selectors: list[Selector] = []
        for e in expressions:
            s = self._selector(e)
            if isinstance(s, str):
                self.eligible[expressions] = s
                return s
            selectors.append(s)
        nodes: set[str] = set()
        any_gpu = False
        errors: list[str] = []
        for node, gpus in self.gpus.items():
            all_match = True
            for i, d in gpus.devices.items():
                driver = gpus.by_index[i][0]
                ok = True
                for s in selectors:
                    r = s.evaluate(driver, d)
                    if r is not True:
                        if isinstance(r, str):
                            errors.append(f"selector {s.expression.strip()}: {r}")
                        ok = False
                        break
                any_gpu |= ok
                all_match &= ok
            if all_match:
                nodes.add(node)
        result: frozenset[str] | str = frozenset(nodes)
        if not any_gpu:
            other = self._other_match(selectors)
            if other is not None:
                result = other
            elif errors and len(errors) == sum(len(g.devices) for g in self.gpus.values()):
                result = sorted(errors)[0]
        self.eligible[expressions] = result
        return result

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
        for key, claim in sorted(self.claims.items()):
            if not claim.allocated:
                continue
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
        allocators: dict[tuple[str, str], PodKey] = {}
        # In namespace/name order: of pending pods naming one unheld claim, the first allocates it.
        for pod in sorted(self.snapshot.pods, key=_by_key):
            if not pod.resource_claims or pod.finished:
                pods.append(pod)
            elif pod.node_name is not None:
                pods.append(self._bound(pod, holders))
            elif not pod.ours:
                pods.append(pod)
            else:
                new, need = self._pending(pod, holders, allocators)
                pods.append(new)
                if need:
                    needs[pod.key] = need
        nodes = tuple(_with_gpus(n, self.gpus[n.name]) if n.name in self.gpus else n for n in self.snapshot.nodes)
        snapshot = replace(self.snapshot, nodes=nodes, pods=tuple(pods))
        return DeviceView(snapshot, tuple(self.warnings), tuple(stale), self.gpus, needs)

    def _bound(self, pod: Pod, holders: Mapping[tuple[str, str], Pod]) -> Pod:
        """A bound pod holds the devices of the claims it is the holder of (their indices)."""
        indices: list[int] = []
        for entry in pod.resource_claims:
            name = entry.claim_name
            holder = holders.get((pod.namespace, name)) if name else None
            if holder is None or holder.key != pod.key:
                continue
            for r in self.claims[(pod.namespace, name or "")].allocation:
                at = self.ref_index.get((r.driver, r.pool, r.device))
                if at is not None and at[0] == pod.node_name:
                    indices.append(at[1])
        if not indices:
            return pod
        if pod.is_fractional:
            return replace(pod, gpu_index=(indices[0],))
        requests = dict(pod.requests)
        requests[GPU] = requests.get(GPU, 0) + len(indices) * MILLI
        return replace(pod, requests=requests, gpu_index=tuple(indices))

    def _pending(self, pod: Pod, holders: Mapping[tuple[str, str], Pod],
                 allocators: dict[tuple[str, str], PodKey]) -> tuple[Pod, tuple[_Need, ...]]:
        needs: list[_Need] = []
        nodes: frozenset[str] | None = None
        count = 0
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
                needs.append(_Need(name, held=claim.allocation))
                continue
            first = allocators.setdefault((pod.namespace, name), pod.key)
            if first != pod.key:
                return replace(pod, device_wait=(
                    f'waiting for resourceclaim "{name}" to be allocated with pod {first}'
                )), ()
            plan = self._plan(name, claim)
            if isinstance(plan, str):
                return replace(pod, device_wait=plan), ()
            asked, eligible = plan
            nodes = eligible if nodes is None else nodes & eligible
            for _r, c in asked:
                count += c
            requests += len(asked)
            needs.append(_Need(name, requests=asked))
        if pod.is_fractional and (count != 1 or requests != 1):
            first_claim = next((n.claim for n in needs if n.requests), needs[0].claim if needs else "")
            return replace(pod, device_wait=(
                f'resourceclaim "{first_claim}": a fractional pod must have exactly one GPU request of count 1'
            )), ()
        changes: dict[str, object] = {}
        if count and not pod.is_fractional:
            changes["requests"] = self._with_gpu_request(pod.requests, count)
        if nodes is not None and (self.plain_gpu_nodes or not self._all_dra_nodes(nodes)):
            changes["device_nodes"] = nodes
        return (_copy_pod(pod, changes) if changes else pod), tuple(needs)

    def _all_dra_nodes(self, nodes: frozenset[str]) -> bool:
        """Whether ``nodes`` are all the nodes with DRA GPUs (then they restrict nothing the GPU
        request does not). Remembered per set object: comparing sets of 5,000 names per pod is slow."""
        got = self.whole_sets.get(id(nodes))
        if got is None:
            got = (nodes, nodes is self.dra_nodes or nodes == self.dra_nodes)
            self.whole_sets[id(nodes)] = got
        return got[1]

    def _with_gpu_request(self, requests: Mapping[str, int], count: int) -> Mapping[str, int]:
        """``requests`` plus ``count`` GPUs; pods that shared one mapping share the new one too
        (the engine reads thousands of pods faster when their requests are the same object)."""
        key = (id(requests), count)
        got = self.requests.get(key)
        if got is None:
            added = dict(requests)
            added[GPU] = added.get(GPU, 0) + count * MILLI
            got = (requests, added)
            self.requests[key] = got
        return got[1]

    def _plan(self, name: str, claim: ResourceClaim) -> Plan | str:
        """A claim's GPU requests ((name, count) in order) and the nodes that can serve them all, or
        why it cannot be allocated. Computed once per claim spec (all the claims of one template)."""
        key = (claim.requests, claim.unsupported)
        got = self.plans.get(key)
        if got is None:
            got = self._make_plan(claim)
            self.plans[key] = got
        return got(name) if callable(got) else got

    def _make_plan(self, claim: ResourceClaim) -> Plan | Callable[[str], str]:
        """``_plan``, its reason a function of the claim's name."""
        if claim.unsupported:
            what = claim.unsupported
            return lambda name: f'resourceclaim "{name}": {what} is not supported by gpufleet'
        asked: list[tuple[str, int]] = []
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
            eligible = self._nodes_for(device_class.selectors + request.selectors)
            if isinstance(eligible, str):
                why = eligible
                return lambda name: f'resourceclaim "{name}" request "{r}": {why} is not supported by gpufleet'
            nodes = eligible if nodes is None else nodes & eligible
            asked.append((request.name, request.count))
        return tuple(asked), nodes if nodes is not None else self.dra_nodes


_POD_FIELDS = tuple(f.name for f in fields(Pod))
_pod_values = attrgetter(*_POD_FIELDS)


def _by_key(pod: Pod) -> tuple[str, str]:
    return pod.namespace, pod.name


def _copy_pod(pod: Pod, changes: Mapping[str, object]) -> Pod:
    """``dataclasses.replace(pod, **changes)`` in half the time (ten thousand pods per call, and a
    Pod has forty fields): the fields are copied as they are, no ``__init__`` runs."""
    new = object.__new__(Pod)
    for name, value in zip(_POD_FIELDS, _pod_values(pod), strict=True):
        object.__setattr__(new, name, value)
    for name, value in changes.items():
        object.__setattr__(new, name, value)
    return new


def resolve_devices(snapshot: Snapshot) -> DeviceView:
    """``snapshot`` as the engine schedules it with its DRA objects read (see the module text).

    A snapshot without ResourceSlices and without pods naming claims is returned as it is."""
    if not snapshot.resource_slices and not _any_claims(snapshot.pods):
        return DeviceView(snapshot)
    return _Resolver(snapshot).resolve()


def _any_claims(pods: Iterable[Pod]) -> bool:
    return any(p.resource_claims for p in pods)
