"""``gpufleet explain``: what the scheduler would do with one pod, in plain words.

It snapshots the cluster (:mod:`gpufleet.kube.inspect.snapshot`) through the one API port, converts
the snapshot's objects with the replay loader's converters and checks (once: no YAML text in
between) and runs the one engine (``gpufleet.engine.schedule``) on it, exactly as ``gpufleet
replay`` of that snapshot would, then reads the decisions that concern the pod: bound where and on which
GPUs, still pending and why (the engine's own reason), or evicted, by whom and why. A pod that
would bind by evicting others is told who they are. A pod naming DRA claims is told which
ResourceClaims they are and their devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.adapters import InputError, load_snapshot_documents, resolve_devices
from gpufleet.domain import (
    LABEL_POD_GROUP,
    SCHEDULER_NAME,
    Binding,
    Decisions,
    Eviction,
    EvictionReason,
    Pod,
    Reservation,
    Snapshot,
)
from gpufleet.domain.queues import gang_id, gang_key
from gpufleet.domain.units import rfc3339
from gpufleet.engine import admission_order, schedule
from gpufleet.kube.client.port import ClusterAccessError, ClusterApi, Kind, access_error
from gpufleet.kube.inspect.snapshot import FINISHED_PHASES, read_cluster
from gpufleet.ledger import is_spot_node
from gpufleet.policy import RunningPod, drain_plan, node_facts

__all__ = [
    "EXPLANATION_SCHEMA", "Explanation", "GroupOwner", "PodFacts", "explain_in_cluster", "explain_pod",
    "explain_report", "group_owner",
]

SNAPSHOT_SOURCE = "cluster snapshot"

_WHY = {
    EvictionReason.RECLAIM: "reclaim: its queue uses more than its quota, and the queue of {by} is within its own",
    EvictionReason.PREEMPT: "preempt: {by} has a higher priority in the same queue",
    EvictionReason.RESERVATION: "reservation: the reservation of {by}'s gang is due, and this gang is preemptible "
                                "or runs past its declared runtime",
}


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the API says about the pod itself (it may be outside the snapshot: finished, or
    pending for another scheduler)."""

    namespace: str
    name: str
    phase: str = "Pending"
    scheduler_name: str = "default-scheduler"
    node_name: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], namespace: str, name: str) -> PodFacts:
        raw_spec, raw_status = obj.get("spec"), obj.get("status")
        spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
        status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
        return cls(
            namespace=namespace,
            name=name,
            phase=str(status.get("phase") or "Pending"),
            scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
            node_name=str(spec["nodeName"]) if spec.get("nodeName") else None,
        )


# The label of the PodGroups the controller's pod-grouper writes (gpufleet.kube.controller.grouper's
# MANAGED_BY; inspect does not import the controller).
_GROUPER_LABEL = ("app.kubernetes.io/managed-by", "gpufleet-pod-grouper")


@dataclass(frozen=True, slots=True)
class GroupOwner:
    """The workload whose pod-grouper PodGroup a pod's gang is: its controller ownerReference."""

    api_version: str
    kind: str
    namespace: str
    name: str


def group_owner(group: Mapping[str, Any] | None) -> GroupOwner | None:
    """The owner of a PodGroup the pod-grouper wrote (its label), read from the PodGroup's controller
    ownerReference; None for a hand-written group, a missing one, or one without such a reference.
    Pod labels are never read for it: a tenant writes those."""
    if not isinstance(group, Mapping):
        return None
    meta = group.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    labels = meta.get("labels")
    if not isinstance(labels, Mapping) or labels.get(_GROUPER_LABEL[0]) != _GROUPER_LABEL[1]:
        return None
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") and ref.get("name"):
            return GroupOwner(str(ref.get("apiVersion") or ""), str(ref["kind"]), str(meta.get("namespace") or ""),
                              str(ref["name"]))
    return None


def _progress(pod: Pod, snapshot: Snapshot, decisions: Decisions) -> tuple[int, int, int]:
    """(members placed, members the gang counts, members the decisions would place now)."""
    members = _gang_members(pod, snapshot)
    placed = sum(1 for p in snapshot.pods if p.key in members and p.bound)
    group = next((g for g in snapshot.pod_groups if g.namespace == pod.namespace and g.name == pod.group_label), None)
    total = max(len(members), group.min_member if group is not None else 1)
    now = sum(1 for b in decisions.bindings if b.pod in members)
    return placed, total, now


def _owner_line(owner: GroupOwner, pod: Pod, snapshot: Snapshot, decisions: Decisions,
                pending_reason: str | None) -> str:
    """``PyTorchJob ml/llama-ft: 7 of 8 pods placed; waiting: <the engine's reason>``."""
    placed, total, now = _progress(pod, snapshot, decisions)
    line = f"{owner.kind} {owner.namespace}/{owner.name}: {placed} of {total} pods placed"
    if now:
        line += f"; {now} more would be placed now"
    elif pending_reason is not None:
        line += f"; waiting: {pending_reason}"
    return line + "."


def _gpus(gpus: tuple[int, ...], blocks: int | None) -> str:
    if blocks is not None and gpus:
        return f"{blocks}/100 of GPU {gpus[0]}"
    if not gpus:
        return "no GPU"
    return f"GPU{'s' if len(gpus) > 1 else ''} {','.join(map(str, gpus))}"


def _asks(pod: Pod) -> str:
    if pod.gpu_blocks is not None:
        return f"{pod.gpu_blocks}/100 of one GPU"
    if pod.gpu_memory_bytes is not None:
        return f"{pod.gpu_memory_bytes / 2**30:g} GiB of one GPU's memory"
    if pod.whole_gpus:
        return f"{pod.whole_gpus} whole GPU{'s' if pod.whole_gpus > 1 else ''}"
    return "no GPU"


def _gang_members(pod: Pod, snapshot: Snapshot) -> set[str]:
    """The pods of ``pod``'s gang, as the engine forms gangs (by the pod-group label, whether or not
    that PodGroup exists: a pod naming a missing one waits for it)."""
    if not pod.group_label:
        return {pod.key}
    gang = gang_key(pod)
    return {p.key for p in snapshot.pods if p.namespace == pod.namespace and gang_key(p) == gang}


_DRAINED = "Its gang is drained"


def _drain_lines(pod: Pod, snapshot: Snapshot) -> list[str]:
    """Whether the pod's gang is drained (docs/semantics-notes.md, "Draining nodes and failed GPUs"), and
    whether it holds a failed GPU: the controller's rule, on the nodes of its gang."""
    gang = gang_id(pod)
    members = [p for p in snapshot.pods if p.bound and p.ours and gang_id(p) == gang]
    where = {p.node_name for p in members}
    nodes = [node_facts(n, is_spot_node(n.labels)) for n in snapshot.nodes if n.name in where]
    running = [RunningPod(p.key, gang, str(p.node_name), p.gpu_index) for p in members]
    plan = drain_plan(nodes, running, snapshot.config)
    lines = [f.message[0].upper() + f.message[1:] + "." for f in plan.failed if f.pod == pod.key]
    lines.extend(f"{_DRAINED} ({d.reason.value}): {d.message}; it requeues at its original position."
                 for d in plan.drains)
    return lines


def _eviction_line(eviction: Eviction) -> str:
    return f"{eviction.pod} ({_WHY[eviction.reason].format(by=eviction.by)})"


def _claims_line(pod: Pod, snapshot: Snapshot, binding: Binding | None) -> str | None:
    """The pod's DRA claims (``spec.resourceClaims``): each entry's ResourceClaim and its devices
    (allocated to a bound pod, or that the binding would allocate), e.g.
    ``claims: gpu -> resourceclaim "p-gpu-x7k2": gpu.nvidia.com/n1/gpu-3``."""
    if not pod.resource_claims:
        return None
    claims = {c.name: c for c in snapshot.resource_claims if c.namespace == pod.namespace}
    given = {a.claim: a.results for a in binding.devices} if binding is not None else {}
    parts: list[str] = []
    for entry in pod.resource_claims:
        name = entry.claim_name
        if name is None:
            parts.append(f'{entry.name} -> template "{entry.template}" (no resourceclaim made from it yet)')
            continue
        results = given.get(name)
        claim = claims.get(name)
        if results is None and pod.bound and claim is not None:
            results = claim.allocation
        devices = ", ".join(f"{r.driver}/{r.pool}/{r.device}" for r in results or ())
        parts.append(f'{entry.name} -> resourceclaim "{name}"' + (f": {devices}" if devices else ""))
    return "claims: " + "; ".join(parts)


def explain_pod(facts: PodFacts, snapshot: Snapshot, decisions: Decisions,
                owner: GroupOwner | None = None) -> list[str]:
    """Plain-language lines about what the decisions mean for the pod; ``owner``: the workload its
    gang's PodGroup belongs to (:func:`group_owner`), named with the gang's progress."""
    key = facts.key
    if facts.phase in FINISHED_PHASES:
        return [f"{key} has finished (phase {facts.phase}): it holds nothing and the scheduler ignores it."]
    pod = next((p for p in snapshot.pods if p.key == key), None)
    if pod is None:
        if facts.scheduler_name != SCHEDULER_NAME and facts.node_name is None:
            return [f"{key} is pending for another scheduler (schedulerName: {facts.scheduler_name}); gpufleet "
                    "leaves it alone and only counts what it holds once it runs on a node."]
        return [f"{key} is not in the snapshot of the cluster (phase {facts.phase}); there is nothing to explain."]

    lines: list[str] = []
    scheduler = "gpufleet" if pod.ours else f"another scheduler ({pod.scheduler_name})"
    gang = f", in gang {gang_key(pod)}" if pod.group_label else ""
    eviction = next((e for e in decisions.evictions if e.pod == key), None)
    binding = next((b for b in decisions.bindings if b.pod == key), None)
    pending = next((p for p in decisions.pending if p.pod == key), None)

    if owner is not None and pod.group_label:
        lines.append(_owner_line(owner, pod, snapshot, decisions,
                                 pending.reason if pending is not None and not pod.bound else None))
    if pod.bound:
        lines.append(f"{key} runs on node {pod.node_name} ({_gpus(pod.gpu_index, pod.gpu_blocks)}), "
                     f"scheduled by {scheduler}{gang}.")
        claims = _claims_line(pod, snapshot, None)
        if claims is not None:
            lines.append(claims)
        drain = _drain_lines(pod, snapshot)
        lines.extend(drain)
        if eviction is not None:
            lines.append(f"gpufleet would evict it to make room for {eviction.by}: "
                         f"{_WHY[eviction.reason].format(by=eviction.by)}.")
        elif not any(line.startswith(_DRAINED) for line in drain):
            lines.append("It would keep running: nothing in the current state preempts it.")
        return lines

    lines.append(f"{key} is pending; it asks for {_asks(pod)}{gang}.")
    claims = _claims_line(pod, snapshot, binding)
    if claims is not None:
        lines.append(claims)
    if binding is not None:
        flavor = f", on flavor {binding.flavor}" if binding.flavor else ""
        gpus = _gpus(binding.gpus, binding.gpu_blocks)
        lines.append(f"gpufleet would bind it to node {binding.node} ({gpus}){flavor}.")
        if binding.volumes:
            lines.append("With its volumes: " + "; ".join(
                f'persistentvolumeclaim "{v.claim}" ' + (f'gets persistentvolume "{v.volume}"' if v.volume is not None
                                                         else f"is provisioned on node {binding.node}")
                for v in binding.volumes) + ".")
        members = _gang_members(pod, snapshot)
        victims = [e for e in decisions.evictions if e.by in members]
        if victims:
            lines.append("To make room it would evict:" if len(members) == 1 else "To make room its gang would evict:")
            lines.extend(f"  - {_eviction_line(e)}" for e in victims)
    elif eviction is not None:
        lines.append(f"gpufleet would bind it, then evict it for {eviction.by}: "
                     f"{_WHY[eviction.reason].format(by=eviction.by)}.")
    elif pending is not None:
        lines.append(f"It would stay pending: {pending.reason}.")
        held = _reservation(pod, decisions)
        if held is not None:
            lines.append(f"Its gang holds a reservation (docs/semantics.md, \"Reservation and backfill\"): "
                         f"{held.gpus} GPUs on node{'s' if len(held.nodes) > 1 else ''} {', '.join(held.nodes)}, "
                         f"expected to fit there from {rfc3339(held.start)}.")
    else:  # every pending pod of ours is in bindings or pending; say so if that ever breaks
        lines.append("The scheduler made no decision about it.")
    return lines


def _reservation(pod: Pod, decisions: Decisions) -> Reservation | None:
    """The reservation the pod's gang holds in the decisions, if any."""
    gang = gang_key(pod)
    return next((r for r in decisions.reservations if r.gang == gang), None)


EXPLANATION_SCHEMA = "gpufleet.dev/explain/v1"  # docs/controller.md, "gpufleet explain -o json|yaml"


def _state(facts: PodFacts, pod: Pod | None) -> str:
    if facts.phase in FINISHED_PHASES:
        return "finished"
    if pod is None:
        return "foreign" if facts.scheduler_name != SCHEDULER_NAME and facts.node_name is None else "absent"
    return "running" if pod.bound else "pending"


def _queue_position(pod: Pod, order: Mapping[str, tuple[str, ...]]) -> dict[str, Any] | None:
    gang = gang_key(pod) if pod.group_label else pod.key
    for queue, gangs in order.items():
        if gang in gangs:
            return {"queue": queue, "rank": gangs.index(gang) + 1, "count": len(gangs)}
    return None


def explain_report(facts: PodFacts, snapshot: Snapshot, decisions: Decisions,
                   order: Mapping[str, tuple[str, ...]], owner: GroupOwner | None = None) -> dict[str, Any]:
    """The machine-readable explanation (``-o json|yaml``): the schema ``EXPLANATION_SCHEMA``,
    field by field in docs/controller.md; ``message`` holds the text lines of :func:`explain_pod`.
    ``order`` is :func:`gpufleet.engine.admission_order` of the same snapshot."""
    key = facts.key
    pod = next((p for p in snapshot.pods if p.key == key), None) if facts.phase not in FINISHED_PHASES else None
    state = _state(facts, pod)
    binding = next((b for b in decisions.bindings if b.pod == key), None)
    eviction = next((e for e in decisions.evictions if e.pod == key), None)
    pending = next((p for p in decisions.pending if p.pod == key), None)
    evicts: list[Eviction] = []
    if pod is not None and binding is not None:
        members = _gang_members(pod, snapshot)
        evicts = [e for e in decisions.evictions if e.by in members]
    held = _reservation(pod, decisions) if state == "pending" and pod is not None and binding is None else None
    decision: str | None = None
    if state == "running":
        decision = "evict" if eviction is not None else "keep-running"
    elif state == "pending":
        decision = ("bind" if binding is not None else "bind-then-evict" if eviction is not None
                    else "stay-pending" if pending is not None else "none")
    owned: dict[str, Any] | None = None
    if owner is not None and pod is not None and pod.group_label:
        placed, total, _ = _progress(pod, snapshot, decisions)
        owned = {"apiVersion": owner.api_version, "kind": owner.kind, "namespace": owner.namespace,
                 "name": owner.name, "placed": placed, "members": total}
    return {
        "schema": EXPLANATION_SCHEMA,
        "pod": {"namespace": facts.namespace, "name": facts.name, "phase": facts.phase},
        "state": state,
        "gang": gang_key(pod) if pod is not None and pod.group_label else None,
        "owner": owned,
        "node": pod.node_name if pod is not None and pod.bound else None,
        "decision": decision,
        "binding": None if binding is None else {
            "node": binding.node, "gpus": list(binding.gpus), "gpuBlocks": binding.gpu_blocks,
            **({"flavor": binding.flavor} if binding.flavor else {})},
        "pendingReason": pending.reason if pending is not None and binding is None else None,
        "evictedBy": None if eviction is None else {"pod": eviction.by, "reason": eviction.reason.value},
        "evicts": [{"pod": e.pod, "reason": e.reason.value} for e in evicts],
        "queuePosition": _queue_position(pod, order) if state == "pending" and pod is not None else None,
        "message": explain_pod(facts, snapshot, decisions, owner),
        "reservation": None if held is None else {
            "nodes": list(held.nodes), "start": rfc3339(held.start), "gpus": held.gpus},
    }


@dataclass(frozen=True, slots=True)
class Explanation:
    lines: tuple[str, ...]
    warnings: tuple[str, ...] = ()  # about the snapshot (e.g. gpufleet's CRDs not installed)
    report: dict[str, Any] = field(default_factory=dict)  # explain_report, plus "warnings"


async def _owner_of(api: ClusterApi, raw: Mapping[str, Any],
                    namespace: str) -> tuple[GroupOwner | None, tuple[str, ...]]:
    """The owner of the PodGroup the pod's gang label names, read from that PodGroup, and a warning
    when that PodGroup cannot be read (the rest of the explanation stands without the owner)."""
    meta = raw.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    group = labels.get(LABEL_POD_GROUP) if isinstance(labels, Mapping) else None
    if not isinstance(group, str) or not group:
        return None, ()
    try:
        return group_owner(await api.get(Kind.POD_GROUP, namespace, group)), ()
    except Exception as err:  # ApiError, or a reply the client cannot decode: one line either way
        return None, (str(access_error(api.server, f"reading podgroup {namespace}/{group}", err)),)


async def explain_in_cluster(api: ClusterApi, namespace: str, name: str, now: float | None = None) -> Explanation:
    """Snapshot the cluster through ``api``, schedule, explain ``namespace/name``. ``now``: the
    snapshot's time, as the controller sets it to its clock (docs/semantics.md, "The snapshot's time");
    None leaves the rules that need a time off, unless the SchedulerConfig has ``spec.now``.

    Raises :class:`ClusterAccessError`: exit code 2 when the pod does not exist, 1 when the cluster
    cannot be read or holds objects the scheduler cannot read."""
    try:
        raw = await api.get(Kind.POD, namespace, name)
    except Exception as err:  # ApiError, or a reply the client cannot decode: one line either way
        raise access_error(api.server, f"reading pod {namespace}/{name}", err) from None
    if raw is None:
        raise ClusterAccessError(f"pod {namespace}/{name} not found", exit_code=2)
    snap = await read_cluster(api)
    try:
        snapshot = load_snapshot_documents(snap.documents, SNAPSHOT_SOURCE)
    except InputError as err:
        raise ClusterAccessError(f"the cluster holds an object gpufleet cannot read: {err}") from None
    if now is not None:
        snapshot = replace(snapshot, config=replace(snapshot.config, now=now))
    devices = resolve_devices(snapshot)  # DRA claims read as replay and the controller read them
    decisions = devices.attach(schedule(devices.snapshot))
    facts = PodFacts.from_dict(raw, namespace, name)
    owner, unread = await _owner_of(api, raw, namespace)
    report = explain_report(facts, devices.snapshot, decisions, admission_order(devices.snapshot), owner)
    warnings = snap.warnings + devices.warnings + unread
    return Explanation(lines=tuple(report["message"]), warnings=warnings, report={**report, "warnings": list(warnings)})
