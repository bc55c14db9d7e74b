"""What ``gpufleet admin`` would do, decided from one snapshot of the cluster, without writing anything.

The rules (docs/semantics.md, "Operator actions"):

- :func:`reclaim_plan`: the gangs an operator's reclaim of a queue evicts, in order. The figures are
  the controller's own Queue status accounting (:func:`gpufleet.kube.controller.reporting.queue_reports`
  on the snapshot the controller's conversion builds): usage, quota, borrowed.
- :func:`drain_gangs`: the gangs a drain of a node or of some of its GPUs takes, by the one drain
  rule (:func:`gpufleet.policy.drain_plan`), with the node as the drain would mark it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufleet.domain import GPU, Decisions, GpuFailurePolicy, Pod, PodKey
from gpufleet.domain.queues import gang_id
from gpufleet.engine import pod_preemptible
from gpufleet.kube.controller.convert import SnapshotView
from gpufleet.kube.controller.reporting import end_state, queue_reports, usage_of
from gpufleet.kube.controller.status import format_quantity
from gpufleet.ledger import is_spot_node
from gpufleet.policy import RunningPod, drain_plan, node_facts

__all__ = ["GangAction", "ReclaimPlan", "RunningGang", "amounts", "drain_gangs", "reclaim_plan", "running_gangs"]


@dataclass(frozen=True, slots=True)
class RunningGang:
    """A gang with bound, unfinished pods of ours: its pods, leaf queue, PodGroup and figures."""

    gang: str  # gang_id: "namespace/group", or "pod:namespace/name" for a pod alone
    queue: str
    pods: tuple[PodKey, ...]
    group: str | None  # "namespace/name" of its PodGroup, when it has one
    started: float  # the earliest start of its pods (status.startTime, else creation): newest = largest
    preemptible: bool
    usage: Mapping[str, int]  # what it counts against quota, milli-units per resource

    @property
    def name(self) -> str:
        return self.gang.removeprefix("pod:")


@dataclass(frozen=True, slots=True)
class GangAction:
    gang: RunningGang
    why: str


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    queue: str
    before: Mapping[str, int]  # the queue's usage now
    quota: Mapping[str, int]
    after: Mapping[str, int]  # its usage once the plan's gangs are gone
    actions: tuple[GangAction, ...]

    @property
    def borrowing(self) -> bool:
        return any(self.before[r] > self.quota[r] for r in self.quota)


def running_gangs(view: SnapshotView, resources: Sequence[str]) -> list[RunningGang]:
    """Every gang with a bound, unfinished pod of ours in a queue, by gang."""
    members: dict[str, list[Pod]] = {}
    for key, pod in view.pods.items():
        if pod.ours and pod.node_name is not None and not pod.finished and key in view.queue_of:
            members.setdefault(gang_id(pod), []).append(pod)
    out: list[RunningGang] = []
    for gang, pods in sorted(members.items()):
        pods.sort(key=lambda p: p.key)
        usage = dict.fromkeys(resources, 0)
        for pod in pods:
            for r, amount in zip(resources, usage_of(pod, resources), strict=True):
                usage[r] += amount
        starts = [p.start_time if p.start_time else p.creation_time for p in pods]
        label = pods[0].group_label
        out.append(RunningGang(gang, view.queue_of[pods[0].key], tuple(p.key for p in pods),
                               f"{pods[0].namespace}/{label}" if label else None, min(starts),
                               all(pod_preemptible(p, view.snapshot, view.groups) for p in pods), usage))
    return out


def amounts(values: Mapping[str, int]) -> str:
    """"4 nvidia.com/gpu", one resource after the other."""
    return ", ".join(f"{format_quantity(max(0, v))} {r}" for r, v in sorted(values.items()))


def reclaim_plan(view: SnapshotView, queue: str) -> ReclaimPlan:
    """The gangs an operator's reclaim of ``queue`` evicts, in order (docs/semantics.md, "Operator
    actions"). ``queue`` must be a queue of the snapshot."""
    queues = view.snapshot.queues
    parent = {str(q.name): (str(q.parent) if q.parent else None) for q in queues}
    reports = queue_reports(queues, view, end_state(view, Decisions()))
    resources = sorted(reports[queue].usage)
    usage = {name: dict(report.usage) for name, report in reports.items()}
    quota = {name: {r: report.quota.get(r, 0) for r in resources} for name, report in reports.items()}

    def path(leaf: str) -> list[str]:  # leaf up to queue (inclusive); [] when not below it
        out: list[str] = []
        at: str | None = leaf
        while at is not None:
            out.append(at)
            if at == queue:
                return out
            at = parent.get(at)
        return []

    def over(name: str) -> set[str]:
        return {r for r in resources if usage[name][r] > quota[name][r]}

    candidates = {g.gang: (g, path(g.queue)) for g in running_gangs(view, resources)}
    candidates = {k: v for k, v in candidates.items() if v[1]}
    before = dict(usage[queue])
    actions: list[GangAction] = []
    while candidates and (above := over(queue)):
        best: tuple[tuple[bool, bool, float, str], str] | None = None
        for key, (gang, below) in candidates.items():
            uses = {r for r in above if gang.usage.get(r, 0) > 0}
            if not uses:
                continue
            lower = any(over(q) & {r for r in resources if gang.usage.get(r, 0) > 0} for q in below[:-1])
            rank = (not gang.preemptible, not lower, -gang.started, gang.gang)
            if best is None or rank < best[0]:
                best = (rank, key)
        if best is None:
            break
        gang, below = candidates.pop(best[1])
        why = (f"queue {queue} uses {amounts({r: usage[queue][r] for r in sorted(above)})} over its quota of "
               f"{amounts({r: quota[queue][r] for r in sorted(above)})}")
        if not best[0][1]:
            why += f"; its queue {next(q for q in below[:-1] if over(q))} is over its own quota too"
        actions.append(GangAction(gang, why))
        for q in below:
            for r in resources:
                usage[q][r] -= gang.usage.get(r, 0)
    return ReclaimPlan(queue, before, quota[queue], dict(usage[queue]), tuple(actions))


def drain_gangs(view: SnapshotView, node: str, gpus: frozenset[int] = frozenset()) -> list[GangAction]:
    """The gangs a drain of ``node`` (or, ``gpus``, of those GPUs of it) takes, by the drain rule, with
    the node cordoned and marked ``gpufleet.dev/drain`` (or those GPUs listed unhealthy, onGPUFailure:
    evict): every gang with a bound pod of ours on it (on one of those GPUs), whole."""
    found = next((n for n in view.snapshot.nodes if n.name == node), None)
    if found is None:
        return []
    facts = node_facts(found, is_spot_node(found.labels))
    if gpus:
        facts = dataclasses.replace(facts, keys=frozenset(), unschedulable=False, unhealthy_gpus=gpus)
        config = dataclasses.replace(view.snapshot.config, on_gpu_failure=GpuFailurePolicy.EVICT)
    else:
        facts = dataclasses.replace(facts, keys=frozenset(), unschedulable=True, drain_marked=True,
                                    unhealthy_gpus=frozenset())
        config = view.snapshot.config
    gangs = {g.gang: g for g in running_gangs(view, [GPU])}
    running = [RunningPod(key, g.gang, str(view.pods[key].node_name), view.pods[key].gpu_index or ())
               for g in gangs.values() for key in g.pods]
    plan = drain_plan([facts], running, config)
    return [GangAction(gangs[d.gang], d.message) for d in plan.drains if d.gang in gangs]
