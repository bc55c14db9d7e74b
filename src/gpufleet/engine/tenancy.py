"""The Project rules in the engine (docs/semantics-notes.md, "Projects (tenancy)").

The rules themselves are :mod:`gpufleet.policy`'s (the webhook asks the same ones); this module
wires them to the engine's pods and gangs:

- :meth:`Tenancy.judge`: gangs with a pending member that breaks a membership rule or rules 1-3
  wait with the reason (``Gang.policy_reason``, read by admission like a missing PodGroup);
- :class:`UserCaps`: ``maxGPUsPerUser``, a gate on admission like the queue gates, on usage per
  (Project, user) kept up to date on every bind and unbind (victim checks included);
- :class:`PendingLimits`: ``maxPendingGangsPerUser``, which of a user's pending gangs are
  candidates in a cycle.

Node pools (rule 4) are a placement constraint: ``StaticFeasibility`` masks them, given
:meth:`Tenancy.pools`. A snapshot with no Project (and no ``requireProject``) builds none of this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from gpufleet.domain import Project, QueueName, Snapshot
from gpufleet.domain.selectors import namespace_labels
from gpufleet.engine.queues import QueueForest
from gpufleet.engine.workload import Gang, PodInfo
from gpufleet.policy import (
    ProjectIndex,
    gpu_cap_problem,
    pending_gangs_problem,
    pending_problem,
    priority_class_of,
    queue_for,
    user_of,
)

__all__ = ["PendingLimits", "Tenancy", "UserCaps"]


class Tenancy:
    """The Projects of one ``schedule()`` call, and each namespace's Project (None: none, or
    claimed by several)."""

    def __init__(self, index: ProjectIndex, require_project: bool, namespaces: Iterable[str]) -> None:
        self.index = index
        self.require_project = require_project
        self.project_of: dict[str, Project | None] = {ns: index.project_of(ns) for ns in namespaces}

    @staticmethod
    def of(snapshot: Snapshot) -> Tenancy | None:
        """None when no rule can apply: no Project and no ``requireProject``."""
        if not snapshot.projects and not snapshot.config.require_project:
            return None
        namespaces = sorted({p.namespace for p in snapshot.pods})
        index = ProjectIndex.build(snapshot.projects, namespace_labels(snapshot.namespaces), namespaces)
        return Tenancy(index, snapshot.config.require_project, namespaces)

    def default_queues(self, default_queue: QueueName) -> dict[str, QueueName]:
        """namespace -> the queue of its pods that name none, where its Project gives one."""
        return {ns: queue_for(p, default_queue) for ns, p in self.project_of.items()
                if p is not None and p.default_queue is not None}

    def pools(self) -> dict[str, Project]:
        """namespace -> its Project, for the Projects with node pools."""
        return {ns: p for ns, p in self.project_of.items() if p is not None and p.node_pools}

    def judge(self, gangs: Sequence[Gang], pods: Sequence[PodInfo], open_gangs: Iterable[int],
              forest: QueueForest) -> None:
        """Set ``policy_reason`` on every open gang with a pending member that breaks a rule
        (membership, then rules 1-3; the first member by name that breaks one names it)."""
        seen: dict[tuple[object, ...], str | None] = {}  # pods alike are judged once
        index, require = self.index, self.require_project
        for g in open_gangs:
            gang = gangs[g]
            for m in gang.members:
                info = pods[m]
                if info.node is not None or info.queue < 0:
                    continue
                pod = info.pod
                key = (pod.namespace, info.queue, pod.queue_grant, priority_class_of(pod, gang.group), gang.preemptible)
                if key in seen:
                    problem = seen[key]
                else:
                    problem = seen[key] = pending_problem(index, pod, forest.queues[info.queue].name, gang.group,
                                                          gang.preemptible, require)
                if problem is not None:
                    gang.policy_reason = problem
                    break


class UserCaps:
    """GPUs (milli) per (Project, user) held by bound pods of ours, for ``maxGPUsPerUser``.

    ``gpu_milli`` is what one pod counts (the quota's rule: whole GPUs, and blocks/100; a pending
    gpu-memory pod counts as on the smallest GPU, never less than it takes)."""

    def __init__(self, tenancy: Tenancy, pods: Sequence[PodInfo], gpu_milli: Callable[[PodInfo], int]) -> None:
        self.pods = pods
        self.gpu_milli = gpu_milli
        self.slot_of: list[int] = [-1] * len(pods)
        self.slots: list[tuple[Project, str]] = []
        self.held: list[int] = []
        numbers: dict[tuple[str, str], int] = {}
        for info in pods:
            if info.gang < 0:
                continue
            project = tenancy.project_of.get(info.pod.namespace)
            if project is None or project.max_gpus_per_user is None:
                continue
            user = user_of(info.pod)
            slot = numbers.get((project.name, user))
            if slot is None:
                slot = numbers[(project.name, user)] = len(self.slots)
                self.slots.append((project, user))
                self.held.append(0)
            self.slot_of[info.idx] = slot

    @staticmethod
    def of(tenancy: Tenancy | None, pods: Sequence[PodInfo], gpu_milli: Callable[[PodInfo], int]) -> UserCaps | None:
        if tenancy is None or not any(p is not None and p.max_gpus_per_user is not None
                                      for p in tenancy.project_of.values()):
            return None
        caps = UserCaps(tenancy, pods, gpu_milli)
        for info in pods:  # what the snapshot's bound pods hold
            if info.node is not None:
                caps.add(info, 1)
        return caps

    def add(self, info: PodInfo, sign: int) -> None:
        """A pod bound (1) or unbound (-1); call while it holds what it counts (bound)."""
        slot = self.slot_of[info.idx]
        if slot >= 0:
            self.held[slot] += sign * self.gpu_milli(info)

    def gate(self, members: Sequence[int]) -> str:
        """Empty when binding ``members`` keeps every user within the cap, else the reason."""
        asked: dict[int, int] = {}
        for m in members:
            slot = self.slot_of[m]
            if slot >= 0:
                asked[slot] = asked.get(slot, 0) + self.gpu_milli(self.pods[m])
        for slot, amount in asked.items():
            project, user = self.slots[slot]
            problem = gpu_cap_problem(project, user, self.held[slot], amount)
            if problem is not None:
                return problem
        return ""

    def signature(self, pod: int) -> int:
        """What the gate's verdict on a lone pod depends on besides the state: its slot."""
        return self.slot_of[pod]


class PendingLimits:
    """``maxPendingGangsPerUser``: each capped gang's (Project, user), by its first member."""

    def __init__(self, slot_of: dict[int, int], slots: list[tuple[Project, str]]) -> None:
        self.slot_of = slot_of
        self.slots = slots

    @staticmethod
    def of(tenancy: Tenancy | None, gangs: Sequence[Gang], pods: Sequence[PodInfo]) -> PendingLimits | None:
        if tenancy is None or not any(p is not None and p.max_pending_gangs_per_user is not None
                                      for p in tenancy.project_of.values()):
            return None
        slot_of: dict[int, int] = {}
        slots: list[tuple[Project, str]] = []
        numbers: dict[tuple[str, str], int] = {}
        for gang in gangs:
            pod = pods[gang.members[0]].pod
            project = tenancy.project_of.get(pod.namespace)
            if project is None or project.max_pending_gangs_per_user is None:
                continue
            user = user_of(pod)
            slot = numbers.get((project.name, user))
            if slot is None:
                slot = numbers[(project.name, user)] = len(slots)
                slots.append((project, user))
            slot_of[gang.idx] = slot
        return PendingLimits(slot_of, slots)

    def select(self, ready: Iterable[int], gangs: Sequence[Gang]) -> list[int]:
        """Of ``ready`` (capped gangs that are otherwise candidates), the first N of each user by
        creation time, then name; the others get the reason."""
        by_slot: dict[int, list[int]] = {}
        for g in ready:
            by_slot.setdefault(self.slot_of[g], []).append(g)
        out: list[int] = []
        for slot, listed in by_slot.items():
            project, user = self.slots[slot]
            cap = project.max_pending_gangs_per_user
            assert cap is not None
            listed.sort(key=lambda g: (gangs[g].creation, gangs[g].key))
            out.extend(listed[:cap])
            problem = pending_gangs_problem(project, user, len(listed))
            for g in listed[cap:]:
                gangs[g].pending_reason = problem or ""
        return out
