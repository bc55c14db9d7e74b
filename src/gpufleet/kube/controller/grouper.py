"""The pod-grouper: PodGroups and pod-group labels derived from workload owners (docs/controller.md,
"How the controller groups workloads"; the rules: :mod:`gpufleet.policy.grouping`).

At start it asks the API server which owner kinds it serves (a list of each CRD's resource: a 404
means absent, said in one log line, and the kind is skipped); its own informers then keep the owners
and the objects between them and their pods (Jobs of a JobSet, ReplicaSets of a Deployment) current.

Each controller cycle first calls :meth:`PodGrouper.step`, before the engine: for every topmost
owner :func:`~gpufleet.policy.grouping.group_for` gives its PodGroups (created or updated, owned by
the owner with ``controller`` and ``blockOwnerDeletion`` so that Kubernetes' garbage collector
deletes them; deleted here too once the owner is gone) and each pending pod of ours whose
ownerReference chain leads to it gets its group's label (:func:`~gpufleet.policy.grouping.member_of`).
Until its label and PodGroup are back in the informers' cache, such a pod is held out of the engine's
snapshot (pending, with the reason): a gang never starts as singletons. An owner whose grouping is a
:class:`~gpufleet.policy.grouping.GroupProblem` gets a Warning Event; its pods are labelled with the
group names it would have and wait with the problem as their pending reason.

Suspended owners of a suspendable kind also come out of each step with their gangs and virtual pods
(:class:`GroupStep` ``suspended``, ``virtual``; a TrainJob's built from its runtime, a TrainingRuntime
or ClusterTrainingRuntime, informed like the owners); the controller shows them to the engine only with
``admission: suspend`` and admits those placed whole with :meth:`PodGrouper.unsuspend`
(docs/semantics-notes.md, "Admission by suspension").

Hand-written groups win: a pod that already carries a pod-group label other than the one its owner
gives is never relabelled (it joins the group it names), and a PodGroup not made by the pod-grouper
is never changed or deleted. Only writes of what differs are made; a create that meets an existing
object (409) becomes a patch."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from gpufleet.adapters import InputError
from gpufleet.adapters.owners import (
    UNSUSPEND_PATCH,
    RuntimeRef,
    is_suspended,
    link_from_dict,
    read_owner,
    runtime_of,
    virtual_pods,
)
from gpufleet.domain import (
    LABEL_POD_GROUP,
    LABEL_QUEUE,
    SCHEDULER_NAME,
    Pod,
    PodKey,
    PriorityClass,
    Queue,
    QueueName,
    SchedulerConfig,
)
from gpufleet.domain.selectors import namespace_labels
from gpufleet.kube.client.port import ApiError, Clock, ClusterApi, Kind, ObjectList
from gpufleet.kube.controller.binder import NotLeader
from gpufleet.kube.controller.convert import SnapshotView
from gpufleet.kube.controller.events import EventRecorder, PodEvent
from gpufleet.kube.controller.informers import PAUSE_GC_FROM, Informer, ObjectCache, collector_paused
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.policy import ProjectIndex
from gpufleet.policy.grouping import (
    KINDS,
    SUSPENDABLE_KINDS,
    GangUnit,
    GroupFacts,
    GroupPlan,
    GroupProblem,
    ObjectLink,
    Owner,
    OwnerIndex,
    OwnerRef,
    SuspendedOwner,
    group_for,
    kind_rule,
    member_of,
    virtual_gang,
)

__all__ = [
    "ALWAYS_SERVED", "ANNOTATION_OPERATOR_PRIORITY", "GROUPER_KINDS", "MANAGED_BY", "OWNER_KINDS", "GroupStep",
    "PodGrouper", "discover", "group_body",
]

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
T = TypeVar("T")
Call = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]]

# The Kind of each owner kind the rules know, at the version read.
OWNER_KINDS: Mapping[tuple[str, str], Kind] = {
    (kind.group, kind.kind): kind
    for kind in (Kind.JOB, Kind.DEPLOYMENT, Kind.STATEFUL_SET, Kind.JOB_SET, Kind.PYTORCH_JOB, Kind.MPI_JOB,
                 Kind.TRAIN_JOB, Kind.RAY_CLUSTER, Kind.RAY_JOB, Kind.LEADER_WORKER_SET)
}
assert OWNER_KINDS.keys() == KINDS.keys(), "an informer for every owner kind the rules know"
# A TrainJob's runtimes: read for its pod template (docs/semantics-notes.md, "Admission by suspension").
_RUNTIME_KINDS = {"TrainingRuntime": Kind.TRAINING_RUNTIME, "ClusterTrainingRuntime": Kind.CLUSTER_TRAINING_RUNTIME}
GROUPER_KINDS: tuple[Kind, ...] = (*OWNER_KINDS.values(), Kind.REPLICA_SET, *_RUNTIME_KINDS.values())
ALWAYS_SERVED = frozenset({Kind.JOB, Kind.REPLICA_SET, Kind.DEPLOYMENT, Kind.STATEFUL_SET})  # built in
# The kinds an owner whose template lives elsewhere controls (a TrainJob's JobSet).
_OWNS_TEMPLATE_ELSEWHERE_CHILDREN = frozenset({Kind.JOB_SET})
_BY_API = {(kind.api_version, kind.kind): kind for kind in GROUPER_KINDS}

# The label of the PodGroups the pod-grouper makes: only those it changes or deletes.
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpufleet-pod-grouper")
# An operator's priority for a PodGroup of the pod-grouper (`gpufleet admin priority`): its class
# wins over the owner's, so the grouper does not undo the change (docs/semantics.md, "Operator actions").
ANNOTATION_OPERATOR_PRIORITY = "gpufleet.dev/operator-priority-class"


async def discover(api: ClusterApi, kinds: Iterable[Kind] = GROUPER_KINDS) -> dict[Kind, ObjectList | None]:
    """The kinds the API server serves, each with its first list when one was answered (the
    informer starts from it instead of listing again): built-in ones always; a CRD's when its list
    is answered. An absent one (404, or 403: not ours to read) is logged once and left out; another
    failure (no answer) keeps it (its informer lists again, retrying). The lists run at once."""
    async def one(kind: Kind) -> tuple[Kind, ObjectList | None, bool]:
        try:
            return kind, await api.list(kind), True
        except ApiError as err:
            if err.status in (403, 404) and kind not in ALWAYS_SERVED:
                log.info("pod-grouper: %s %s not served (%s); its workloads are not grouped",
                         kind.api_version, kind.kind, err.status)
                return kind, None, False
            return kind, None, True

    with collector_paused():  # every object of each kind, made at once, kept in the cache
        answers = await asyncio.gather(*(one(kind) for kind in kinds))
    return {kind: listing for kind, listing, served in answers if served}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _schedules_with_gpufleet(spec: Any) -> bool:
    """Whether any pod template in an owner's spec names gpufleet's scheduler: the owners of other
    schedulers' pods get no PodGroup and no warning."""
    if isinstance(spec, Mapping):
        if spec.get("schedulerName") == SCHEDULER_NAME:
            return True
        return any(_schedules_with_gpufleet(value) for value in spec.values() if isinstance(value, (Mapping, list)))
    if isinstance(spec, list):
        return any(_schedules_with_gpufleet(value) for value in spec)
    return False


def _waiting_pod(pod: Mapping[str, Any]) -> bool:
    """A pod of ours not bound, not finished, not being deleted: one the grouper labels."""
    spec = pod.get("spec") or {}
    return (spec.get("schedulerName") == SCHEDULER_NAME and not spec.get("nodeName")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not _meta(pod).get("deletionTimestamp"))


def _owner_ref(plan_owner: Any) -> JsonDict:
    return {"apiVersion": plan_owner.api_version, "kind": plan_owner.kind, "name": plan_owner.name,
            "uid": plan_owner.uid, "controller": True, "blockOwnerDeletion": True}


def group_body(plan: GroupPlan) -> JsonDict:
    """The PodGroup of ``plan``: spec, the pod-grouper's label and the ownerReference to the owner."""
    spec: JsonDict = {"minMember": plan.min_member, "queue": str(plan.queue)}
    if plan.priority_class is not None:
        spec["priorityClassName"] = plan.priority_class
    topology = {k: v for k, v in (("required", plan.topology_required), ("preferred", plan.topology_preferred))
                if v is not None}
    if topology:
        spec["topology"] = topology
    if plan.placement is not None:
        spec["placement"] = plan.placement.value
    return {
        "apiVersion": Kind.POD_GROUP.api_version, "kind": Kind.POD_GROUP.kind,
        "metadata": {"name": plan.name, "namespace": plan.owner.namespace, "labels": dict([MANAGED_BY]),
                     "ownerReferences": [_owner_ref(plan.owner)]},
        "spec": spec,
    }


def _ours(group: Mapping[str, Any]) -> bool:
    return (_meta(group).get("labels") or {}).get(MANAGED_BY[0]) == MANAGED_BY[1]


def _controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in _meta(obj).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def _spec_patch(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> JsonDict | None:
    """A merge patch from ``current`` to ``wanted`` (None: nothing differs)."""
    patch: JsonDict = {key: value for key, value in wanted.items() if current.get(key) != value}
    patch.update({key: None for key in current if key not in wanted})
    return patch or None


RELABEL_AFTER = 10.0  # seconds a label given may go unseen before it is given again


@dataclass(frozen=True)
class GroupStep:
    """What one step gives the controller's cycle: the labels and PodGroups the engine sees as if
    the informers showed them already, and the pods that wait (``held``: pending with their reason;
    ``quiet``: left out for now, neither bound nor pending)."""

    grouped: Mapping[PodKey, str] = field(default_factory=dict)
    groups: tuple[JsonDict, ...] = ()
    held: Mapping[PodKey, str] = field(default_factory=dict)
    quiet: frozenset[PodKey] = frozenset()
    # Suspended owners of a suspendable kind with their gangs, and the virtual pods standing for
    # their members (docs/semantics-notes.md, "Admission by suspension"; shown to the engine only
    # when the SchedulerConfig's admission is suspend).
    suspended: tuple[SuspendedOwner, ...] = ()
    virtual: tuple[JsonDict, ...] = ()


@dataclass
class _Outcome:
    """One step's derived state."""

    groups: dict[tuple[str, str], GroupPlan] = field(default_factory=dict)
    labels: dict[PodKey, str] = field(default_factory=dict)  # pods to label, with their group
    # Pods kept out of this cycle, and why: a problem of their owner (shown as their pending reason),
    # or, silently, a label or PodGroup on its way (a cycle or two: no Event for that).
    held: dict[PodKey, str] = field(default_factory=dict)
    quiet: set[PodKey] = field(default_factory=set)
    needs: dict[PodKey, tuple[str, str]] = field(default_factory=dict)  # the PodGroup each pod waits for
    problems: dict[str, GroupProblem] = field(default_factory=dict)  # by owner uid
    live_owners: set[str] = field(default_factory=set)  # uids of owners seen
    pod_unit_groups: set[tuple[str, str]] = field(default_factory=set)  # groups named by pods' labels
    written: set[tuple[str, str]] = field(default_factory=set)  # groups the step has written (or left)
    suspended: list[SuspendedOwner] = field(default_factory=list)
    virtual: list[JsonDict] = field(default_factory=list)


class PodGrouper:
    """The pod-grouper of one controller (see the module docstring)."""

    def __init__(self, api: ClusterApi, clock: Clock, pods: ObjectCache, call: Call, events: EventRecorder,
                 metrics: ControllerMetrics | None = None, on_change: Callable[[], None] = lambda: None) -> None:
        self.api = api
        self.clock = clock
        self.pods = pods  # the controller's cache: pods and PodGroups
        self.call = call  # the controller's API call wrapper (leader check, concurrency, retries)
        self.events = events
        self.metrics = metrics
        self.on_change = on_change
        self.kinds: tuple[Kind, ...] = ()
        self.cache: ObjectCache | None = None
        self._read: dict[str, tuple[str, Owner | GroupProblem | None]] = {}  # uid -> (rv, read)
        self._links: dict[str, tuple[str, ObjectLink]] = {}  # uid -> (rv, link)
        # Writes made whose result the informers do not show yet (not made twice meanwhile): PodGroups
        # created or patched (the body, shown to the engine until seen), deletions, pods' labels (the
        # group and when; given again after RELABEL_AFTER seconds unseen).
        self.written: dict[tuple[str, str], JsonDict] = {}
        self.deleting: set[tuple[str, str]] = set()
        self.given: dict[PodKey, tuple[str, float]] = {}
        self.to_label: dict[PodKey, str] = {}  # this cycle's labels, not yet written
        self.unsuspended: dict[str, str] = {}  # owner uid -> the resourceVersion it was unsuspended at
        # The step's PodGroup writes in flight (awaited by settle), and the PodGroups whose last write
        # failed (their next writes are awaited within the step, never shown as made before).
        self._writes: list[asyncio.Future[list[None]]] = []
        self._pending: dict[tuple[str, str], asyncio.Future[None]] = {}  # the writes in flight, by group
        self._failed: set[tuple[str, str]] = set()
        self._failures = 0  # writes failed since the last settle
        self.all_synced = asyncio.Event()  # discovery done and every informer listed once

    @property
    def synced(self) -> bool:
        return self.cache is not None and self.cache.synced

    async def run(self) -> None:
        """Discovery, then the informers, until cancelled."""
        served = await discover(self.api)
        self.kinds = tuple(served)
        cache = ObjectCache(self.kinds)
        cache.hooks.append(lambda kind, old, new: self.on_change())
        informers = [Informer(self.api, kind, cache, self.clock, self.metrics) for kind in self.kinds]
        for informer in informers:  # discovery's lists are the informers' first
            listing = served[informer.kind]
            if listing is not None:
                informer.start_from(listing)
        self.cache = cache
        tasks = [asyncio.create_task(self._signal_synced(cache), name="grouper-synced")]
        tasks += [asyncio.create_task(informer.run(), name=f"grouper-informer-{informer.kind.plural}")
                  for informer in informers]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _signal_synced(self, cache: ObjectCache) -> None:
        if not cache.kinds:
            cache.all_synced.set()
        await cache.all_synced.wait()
        self.all_synced.set()

    # ---------------------------------------------------------------------------------- deriving

    def _owner(self, obj: Mapping[str, Any], ours_below: bool = False) -> Owner | GroupProblem | None:
        """The owner ``obj`` reads as, or its problem; None when it does not schedule with gpufleet
        (no pod template of its spec names gpufleet, nor, for a kind whose template lives
        elsewhere, ``ours_below``: an object it controls does)."""
        meta = _meta(obj)
        uid = str(meta.get("uid") or "")
        rule = kind_rule(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
        elsewhere = rule is not None and rule.template_elsewhere
        runtime = self._runtime_of(obj) if elsewhere else None
        rv = (f"{meta.get('resourceVersion') or ''}/{int(ours_below)}/{_meta(runtime or {}).get('resourceVersion')}"
              if meta.get("resourceVersion") else "")
        known = self._read.get(uid)
        if known is not None and known[0] == rv and rv:
            return known[1]
        read: Owner | GroupProblem | None = None
        if (ours_below and elsewhere) or _schedules_with_gpufleet(obj.get("spec")) or (
                elsewhere and self._runtime_ours(obj, runtime)):
            try:
                read = read_owner(obj, self._runtime if elsewhere else None)
            except InputError as err:
                log.debug("pod-grouper: %s", err)
        self._read[uid] = (rv, read)
        return read

    def _runtime(self, ref: RuntimeRef) -> Mapping[str, Any] | None:
        """A TrainJob's runtime in the informers' cache; None when absent or its kind not served."""
        kind = _RUNTIME_KINDS.get(ref.kind)
        if kind is None or self.cache is None or kind not in self.kinds:
            return None
        return self.cache.get(kind, ref.namespace, ref.name)

    def _runtime_of(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        ref = runtime_of(obj)
        return self._runtime(ref) if ref is not None else None  # a bad reference: read_owner says so

    @staticmethod
    def _runtime_ours(obj: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> bool:
        """Whether a TrainJob schedules with gpufleet by its runtime: the runtime's template names
        gpufleet or, the runtime not found, the TrainJob names a gpufleet queue (then it is read, and
        its missing runtime is its problem: a Warning Event, never silence)."""
        if runtime is not None:
            return _schedules_with_gpufleet(runtime.get("spec"))
        return bool((_meta(obj).get("labels") or {}).get(LABEL_QUEUE))

    def _link(self, obj: Mapping[str, Any]) -> ObjectLink | None:
        meta = _meta(obj)
        uid, rv = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        known = self._links.get(uid)
        if known is not None and known[0] == rv and rv:
            return known[1]
        try:
            link = link_from_dict(obj)
        except InputError:
            return None
        self._links[uid] = (rv, link)
        return link

    def derive(self, facts: GroupFacts) -> _Outcome:
        """What the cluster should hold now (pure but for the read memos): groups, labels, held pods."""
        out, index = self._derive_owners(facts)
        if index is not None:
            self._derive_pods(out, index, facts)
        return out

    def _derive_owners(self, facts: GroupFacts) -> tuple[_Outcome, OwnerIndex | None]:
        """The owners' part of :meth:`derive`: the groups of every owner of a gang per owner or unit
        (those of a gang per pod come with their pods), problems, suspended owners."""
        out = _Outcome()
        cache = self.cache
        if cache is None:
            return out, None
        links: list[ObjectLink] = []
        owners: list[Owner] = []
        # The controllers of objects whose templates name gpufleet (a TrainJob's JobSet).
        ours_above = {str(ref["uid"]) for kind in self.kinds if kind in _OWNS_TEMPLATE_ELSEWHERE_CHILDREN
                      for obj in cache.objects(kind) if _schedules_with_gpufleet(obj.get("spec"))
                      and (ref := _controller_ref(obj)) is not None and ref.get("uid")}
        suspended: dict[str, Mapping[str, Any]] = {}  # uid -> the raw suspended owner
        unsuspending: set[str] = set()  # unsuspended by us, not shown so by the informer yet
        for kind in self.kinds:
            if kind in _RUNTIME_KINDS.values():
                continue  # read through the TrainJobs that name them
            for obj in cache.objects(kind):
                link = self._link(obj)
                if link is not None:
                    links.append(link)
                if (kind.group, kind.kind) not in OWNER_KINDS:
                    continue
                owner = self._owner(obj, str(_meta(obj).get("uid") or "") in ours_above)
                if isinstance(owner, Owner):
                    owners.append(owner)
                    out.live_owners.add(owner.ref.uid)
                    if (kind.group, kind.kind) in SUSPENDABLE_KINDS and is_suspended(obj):
                        if self._admitted(obj):
                            unsuspending.add(owner.ref.uid)
                        else:
                            suspended[owner.ref.uid] = obj
                elif isinstance(owner, GroupProblem):
                    out.problems[owner.owner.uid] = owner
                    out.live_owners.add(owner.owner.uid)
        self._prune({link.uid for link in links})
        self.unsuspended = {uid: rv for uid, rv in self.unsuspended.items() if uid in unsuspending}
        # Pods that own objects are links too (a LeaderWorkerSet's leader pod owns its group's
        # worker StatefulSet).
        owning = {link.controller_uid for link in links if link.controller_uid is not None}
        pods = self.pods.objects(Kind.POD)
        for pod in pods:
            if _meta(pod).get("uid") in owning and (link := self._link(pod)) is not None:
                links.append(link)
        index = OwnerIndex.build(links, owners)
        top = [o for o in owners if not self._nested(o.ref.uid, o.ref.namespace, index)]
        groupings: dict[str, tuple[GroupPlan, ...] | GroupProblem] = {}
        for owner in top:
            if owner.unit is not GangUnit.POD:
                groupings[owner.ref.uid] = group_for(owner, facts)
        for uid, grouping in groupings.items():
            if isinstance(grouping, GroupProblem):
                out.problems[uid] = grouping
            else:
                for plan in grouping:
                    out.groups[(plan.owner.namespace, plan.name)] = plan
                if uid in suspended:
                    self._virtual(suspended[uid], index.owners[uid], grouping, out)
        return out, index

    def _derive_pods(self, out: _Outcome, index: OwnerIndex, facts: GroupFacts) -> None:
        """The pods' part of :meth:`derive`: each waiting pod's group, label or reason to wait."""
        for pod in self.pods.objects(Kind.POD):
            label = (_meta(pod).get("labels") or {}).get(LABEL_POD_GROUP)
            if label:
                out.pod_unit_groups.add((str(_meta(pod).get("namespace") or ""), str(label)))
            if _waiting_pod(pod):
                self._place(pod, label, index, facts, out)

    def _admitted(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` was unsuspended by the controller and the informer does not show it yet
        (the version it patched is still the one cached): its gang is not shown to the engine again."""
        meta = _meta(obj)
        return self.unsuspended.get(str(meta.get("uid") or "")) == str(meta.get("resourceVersion") or "")

    def _virtual(self, obj: Mapping[str, Any], owner: Owner, plans: tuple[GroupPlan, ...], out: _Outcome) -> None:
        """The suspended owner's gangs and their virtual pods (a TrainJob's from its runtime; none
        where a template is not found: such an owner is never admitted)."""
        out.suspended.append(SuspendedOwner(owner.ref, tuple(virtual_gang(plan) for plan in plans)))
        for plan in plans:
            out.virtual.extend(virtual_pods(obj, owner, plan, self._runtime))

    def _prune(self, alive: set[str]) -> None:
        """Forget the reads of objects gone (pods' links are kept while they are pending)."""
        if len(self._read) > 2 * len(alive) + 1000:
            self._read = {uid: read for uid, read in self._read.items() if uid in alive}
        if len(self._links) > 2 * (len(alive) + self.pods.count(Kind.POD)) + 1000:
            pods = {str(_meta(p).get("uid") or "") for p in self.pods.objects(Kind.POD)}
            self._links = {uid: link for uid, link in self._links.items() if uid in alive or uid in pods}

    @staticmethod
    def _nested(uid: str, namespace: str, index: OwnerIndex) -> bool:
        """Whether an owner is itself owned (through its chain) by another owner gpufleet groups."""
        seen = {uid}
        link = index.links.get(uid)
        up = link.controller_uid if link is not None else None
        while up is not None and up not in seen:
            seen.add(up)
            if up in index.owners and index.owners[up].ref.namespace == namespace:
                return True
            above = index.links.get(up)
            if above is None or above.namespace != namespace:
                return False
            up = above.controller_uid
        return False

    def _place(self, pod: Mapping[str, Any], label: str | None, index: OwnerIndex, facts: GroupFacts,
               out: _Outcome) -> None:
        link = self._link(pod)
        if link is None:
            return
        key = PodKey(f"{link.namespace}/{link.name}")
        membership = member_of(link, index)
        problem: GroupProblem | None = None
        name: str | None = None
        if membership is not None:
            name = membership.group
            problem = out.problems.get(membership.owner.uid)
            owner = index.owners[membership.owner.uid]
            if owner.unit is GangUnit.POD and problem is None:
                grouping = group_for(owner, facts, link.name)
                if isinstance(grouping, GroupProblem):
                    problem = out.problems[membership.owner.uid] = grouping  # its Warning Event
                else:
                    for plan in grouping:
                        out.groups[(plan.owner.namespace, plan.name)] = plan
        else:
            problem, unknown = self._problem_above(link, index, out)
            if problem is not None:
                name = problem.names[0] if problem.names else None
            elif unknown is not None:
                if not label:
                    out.quiet.add(key)  # its owner's informer is behind
                return
        if name is None:
            return
        if label and label != name:
            return  # a hand-written group: it wins, the pod is never relabelled
        if not label:
            given = self.given.get(key)
            if given is None or given[0] != name or given[1] + RELABEL_AFTER <= self.clock.now():
                out.labels[key] = name
        if problem is not None:
            out.held[key] = f"pod group {name}: {problem.reason}"
        else:
            out.needs[key] = (link.namespace, name)

    def _problem_above(self, link: ObjectLink, index: OwnerIndex,
                       out: _Outcome) -> tuple[GroupProblem | None, str | None]:
        """The problem of an owner above ``link`` that could not be read, or the owner reference of
        an informed kind not seen yet (the informer is behind)."""
        seen: set[str] = set()
        up = link.controller_uid
        current = link
        while up is not None and up not in seen:
            seen.add(up)
            if up in out.problems and out.problems[up].owner.namespace == link.namespace:
                return out.problems[up], None
            above = index.links.get(up)
            if above is None:
                return None, self._unknown_ref(current)
            if above.namespace != link.namespace:
                return None, None
            current, up = above, above.controller_uid
        return None, None

    def _unknown_ref(self, link: ObjectLink) -> str | None:
        """The controller owner reference of ``link`` as text when it names a kind the grouper
        informs (so that it should know the object, and will once its informer catches up)."""
        kind_of_link = Kind.POD if link.kind == "Pod" else _BY_API.get((link.api_version, link.kind))
        if kind_of_link is None:
            return None
        cache = self.pods if kind_of_link is Kind.POD else self.cache
        raw = cache.get(kind_of_link, link.namespace, link.name) if cache is not None else None
        ref = _controller_ref(raw) if raw is not None else None
        if ref is None:
            return None
        kind = _BY_API.get((str(ref.get("apiVersion")), str(ref.get("kind"))))
        if kind is None or kind not in self.kinds:
            return None
        return f"{kind.kind} {link.namespace}/{ref.get('name')}"

    # ------------------------------------------------------------------------------------ acting

    async def step(self, facts: GroupFacts, enabled: bool = True) -> GroupStep:
        """Group: PodGroups written, the pods' labels to write (:meth:`take_label` with a pod's
        Binding, :meth:`write_labels` after the cycle's bindings for the others).

        The writes of PodGroups never tried before run on while the cycle goes on: the step shows
        them as made, and the cycle awaits :meth:`settle` before it acts (on a failure it acts on
        nothing; the next step shows only what the informers show or was written). Those that
        failed before are awaited here, before the step returns."""
        if self.cache is None or not enabled:
            return GroupStep()
        await self.settle()  # a step's writes are settled before the next one's
        self.forget_seen()
        burst = self.pods.count(Kind.POD) >= PAUSE_GC_FROM  # memos that live on, made at once
        with collector_paused(burst):
            out, index = self._derive_owners(facts)
        synced = self.cache.synced
        if synced and index is not None:  # the owners' groups are created while the pods are placed
            await self._write_groups(out, final=False)
            await asyncio.sleep(0)  # the creates' requests go out now, not after the pods' part
        if index is not None:
            with collector_paused(burst):
                self._derive_pods(out, index, facts)
        if synced:
            await self._write_groups(out)
            self.to_label = dict(out.labels)
        else:
            out.quiet.update(out.labels)
            out.quiet.update(out.needs)
        out.quiet.update(key for key, (namespace, name) in out.needs.items()
                         if (namespace, name) not in self.written and self.pods.get(Kind.POD_GROUP, namespace, name)
                         is None)
        await self._warn(out.problems.values())
        await self._warn(dict.fromkeys(GroupProblem(p.owner, w) for p in out.groups.values() for w in p.warnings),
                         "BadAnnotation")
        grouped = {key: name for key, (name, _) in self.given.items()}
        grouped.update(out.labels)
        return GroupStep(grouped, tuple(self.written.values()), out.held, frozenset(out.quiet),
                         tuple(out.suspended), tuple(out.virtual))

    async def unsuspend(self, owners: Iterable[OwnerRef]) -> None:
        """Admit ``owners`` (their whole gangs placed): ``spec.suspend`` patched to false. A refusal
        (409, 404: changed or gone meanwhile) is one log line; the owner is considered next cycle."""
        async def one(ref: OwnerRef) -> None:
            kind = OWNER_KINDS[(ref.api_group, ref.kind)]
            cached = self.cache.get(kind, ref.namespace, ref.name) if self.cache is not None else None
            try:
                await self.call(f"patch {kind.plural}", lambda: self.api.patch(
                    kind, ref.namespace, ref.name, copy.deepcopy(dict(UNSUSPEND_PATCH))))
            except ApiError as err:
                log.warning("admission: %s %s/%s not unsuspended (tried again next cycle): %s",
                            ref.kind, ref.namespace, ref.name, err)
                return
            self.unsuspended[ref.uid] = str(_meta(cached or {}).get("resourceVersion") or "")
            log.info("admission: unsuspended %s %s/%s (its whole gang was placed)", ref.kind, ref.namespace, ref.name)

        with contextlib.suppress(NotLeader):
            await asyncio.gather(*(one(ref) for ref in owners))

    def take_label(self, key: PodKey) -> Mapping[str, str]:
        """The pod-group label to write with the pod's patch before its Binding (taken once)."""
        name = self.to_label.pop(key, None)
        if name is None:
            return {}
        self.given[key] = (name, self.clock.now())
        return {LABEL_POD_GROUP: name}

    async def write_labels(self) -> None:
        """The labels of this cycle no Binding carried."""
        labels, self.to_label = self.to_label, {}
        for key, name in labels.items():
            self.given[key] = (name, self.clock.now())
        with contextlib.suppress(NotLeader):
            await asyncio.gather(*(self._label(key, name) for key, name in labels.items()))

    @staticmethod
    def facts(objects: Mapping[Kind, Sequence[Any]]) -> GroupFacts:
        """What grouping reads of the cluster, from the informers' converted objects (no snapshot
        is built for it: the cycle builds one, after the step, with the step's labels)."""
        configs: Sequence[SchedulerConfig] = objects.get(Kind.SCHEDULER_CONFIG, ())
        config = configs[0] if configs else SchedulerConfig()
        queues: Sequence[Queue] = objects.get(Kind.QUEUE, ())
        classes: Sequence[PriorityClass] = objects.get(Kind.PRIORITY_CLASS, ())
        pods: Sequence[Pod] = objects.get(Kind.POD, ())
        projects = sorted(objects.get(Kind.PROJECT, ()), key=lambda p: p.name)
        index = ProjectIndex.build(projects, namespace_labels(objects.get(Kind.NAMESPACE, ())),
                                   {pod.namespace for pod in pods})
        parents = {q.parent for q in queues if q.parent is not None}
        return GroupFacts(
            projects=index, default_queue=config.default_queue, require_project=config.require_project,
            topology_levels=config.topology_levels,
            priority_values={c.name: c.value for c in classes},
            non_preemptible_priority=config.non_preemptible_priority,
            leaf_queues=frozenset(QueueName(q.name) for q in queues if q.name not in parents),
        )

    @staticmethod
    def hold(view: SnapshotView, held: Mapping[PodKey, str], quiet: Iterable[PodKey] = ()) -> SnapshotView:
        """``view`` without the pods held: those of ``held`` pending with their reason, the
        ``quiet`` ones left out for now (neither bound nor pending)."""
        out = set(held).union(quiet)
        if not out:
            return view
        snapshot = replace(view.snapshot, pods=tuple(p for p in view.snapshot.pods if p.key not in out))
        return replace(view, snapshot=snapshot, pods={k: p for k, p in view.pods.items() if k not in out},
                       rejected={**view.rejected, **held})

    async def _write_groups(self, out: _Outcome, final: bool = True) -> None:
        """Create or patch the groups of ``out``; ``final``: ``out`` is whole (its pods placed), so
        the groups no owner wants any more are deleted too."""
        if final:
            self._failed.intersection_update(out.groups)
        writes: list[tuple[tuple[str, str], Awaitable[None]]] = []
        bodies: dict[tuple[str, str], JsonDict] = {}
        for (namespace, name), plan in out.groups.items():
            if (namespace, name) in out.written:
                continue  # the step's first call wrote it
            out.written.add((namespace, name))
            body = bodies[(namespace, name)] = group_body(plan)
            current = self.pods.get(Kind.POD_GROUP, namespace, name)
            operator_class = (_meta(current).get("annotations") or {}).get(ANNOTATION_OPERATOR_PRIORITY) \
                if current is not None else None
            if isinstance(operator_class, str) and operator_class:
                body["spec"]["priorityClassName"] = operator_class
            if self.written.get((namespace, name)) == body:
                continue  # on its way
            if current is None:
                writes.append(((namespace, name), self._create(body)))
            elif _ours(current):
                patch = _spec_patch(current.get("spec") or {}, body["spec"])
                if patch is not None:
                    writes.append(((namespace, name), self._patch_group(body, {"spec": patch})))
            else:
                log.warning("pod-grouper: PodGroup %s/%s exists and was not made by it; left as it is",
                            namespace, name)
        for group in self.pods.objects(Kind.POD_GROUP) if final else ():
            meta = _meta(group)
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            if key not in self.deleting and self._gone(group, out):
                writes.append((key, self._delete(*key)))
        retried = [write for key, write in writes if key in self._failed]
        fresh = [(key, write) for key, write in writes if key not in self._failed]
        with contextlib.suppress(NotLeader):  # the next leader groups them
            await asyncio.gather(*retried)
        for key, _ in fresh:  # shown as made while in flight (settle tells whether they were)
            if key in bodies:
                self.written[key] = bodies[key]
        if fresh:
            tasks = [asyncio.ensure_future(write) for _, write in fresh]
            self._pending.update((key, task) for (key, _), task in zip(fresh, tasks, strict=True))
            self._writes.append(asyncio.gather(*tasks))

    async def settle(self) -> bool:
        """Await the PodGroup writes of the last step; whether every one was made (a cycle acts on
        its decisions only then)."""
        writes, self._writes = self._writes, []
        self._pending.clear()
        for batch in writes:
            try:
                await batch
            except NotLeader:
                self._failures += 1
        failures, self._failures = self._failures, 0
        return failures == 0

    async def gate(self, gang: str) -> str | None:
        """Wait until the PodGroup of ``gang`` (``namespace/name``) is made, when the last step is
        still writing it; None when it is (or none was on its way), else why the gang is not bound.
        So a gang binds as soon as its own group exists, not when the step's every write is done."""
        namespace, _, name = gang.partition("/")
        task = self._pending.get((namespace, name))
        if task is None:
            return None
        with contextlib.suppress(NotLeader):  # counted by settle
            await asyncio.shield(task)
        if (namespace, name) in self._failed or not task.done() or task.exception() is not None:
            return f"its PodGroup {namespace}/{name} was not written"
        return None

    def _gone(self, group: Mapping[str, Any], out: _Outcome) -> bool:
        """A PodGroup of the pod-grouper no owner wants any more (its owner deleted, or a gang per
        pod whose pod is gone); a problem owner's groups are kept as they are."""
        if not _ours(group):
            return False
        ref = _controller_ref(group)
        meta = _meta(group)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if ref is None or key in out.groups:
            return False
        kind = _BY_API.get((str(ref.get("apiVersion")), str(ref.get("kind"))))
        if kind is None or kind not in self.kinds or self.cache is None or not self.cache.is_synced(kind):
            return False
        uid = str(ref.get("uid") or "")
        if uid not in out.live_owners:
            return True
        if uid in out.problems:
            return False
        owner = self._read.get(uid)
        if owner is not None and isinstance(owner[1], Owner) and owner[1].unit is GangUnit.POD:
            return key not in out.pod_unit_groups
        return False  # an owner whose units changed keeps a group until it is deleted: its pods may run

    def forget_seen(self) -> None:
        """Writes the informers show now (or whose object is gone) no longer stand in for them."""
        for key, body in list(self.written.items()):
            current = self.pods.get(Kind.POD_GROUP, *key)
            if current is not None and _spec_patch(current.get("spec") or {}, body["spec"]) is None:
                del self.written[key]
        self.deleting = {key for key in self.deleting if self.pods.get(Kind.POD_GROUP, *key) is not None}
        for pod_key, (name, _) in list(self.given.items()):
            namespace, _, pod_name = pod_key.partition("/")
            pod = self.pods.get(Kind.POD, namespace, pod_name)
            if pod is None or (_meta(pod).get("labels") or {}).get(LABEL_POD_GROUP) == name:
                del self.given[pod_key]

    async def _create(self, body: JsonDict) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        try:
            await self.call("create podgroups", lambda: self.api.create(Kind.POD_GROUP, body))
            self.written[key] = body
            self._failed.discard(key)
            log.info("pod-grouper: created PodGroup %s/%s (minMember %d) for %s %s", meta["namespace"],
                     meta["name"], body["spec"]["minMember"], meta["ownerReferences"][0]["kind"],
                     meta["ownerReferences"][0]["name"])
        except ApiError as err:
            if err.status == 409:  # made meanwhile (the informer is behind): brought up to date
                await self._patch_group(body, {"spec": body["spec"]})
            else:
                self._write_failed(key)
                log.warning("pod-grouper: PodGroup %s/%s not created: %s", *key, err)
        except NotLeader:
            self._write_failed(key)
            raise

    def _write_failed(self, key: tuple[str, str]) -> None:
        self.written.pop(key, None)
        self._failed.add(key)
        self._failures += 1

    async def _patch_group(self, body: JsonDict, patch: JsonDict) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        try:
            await self.call("patch podgroups", lambda: self.api.patch(Kind.POD_GROUP, *key, patch))
            self.written[key] = body
            self._failed.discard(key)
        except ApiError as err:
            self._write_failed(key)
            log.warning("pod-grouper: PodGroup %s/%s not updated: %s", *key, err)
        except NotLeader:
            self._write_failed(key)
            raise

    async def _label(self, key: PodKey, group: str) -> None:
        namespace, _, name = key.partition("/")
        patch = {"metadata": {"labels": {LABEL_POD_GROUP: group}}}
        try:
            await self.call("patch pods", lambda: self.api.patch(Kind.POD, namespace, name, patch))
        except ApiError as err:
            self.given.pop(key, None)  # given again next cycle
            if err.status != 404:  # a pod deleted meanwhile: nothing to label
                log.warning("pod-grouper: pod %s not labelled: %s", key, err)

    async def _delete(self, namespace: str, name: str) -> None:
        try:
            self.deleting.add((namespace, name))
            await self.call("delete podgroups", lambda: self.api.delete(Kind.POD_GROUP, namespace, name))
            log.info("pod-grouper: deleted PodGroup %s/%s (its owner is gone)", namespace, name)
        except ApiError as err:
            if err.status != 404:
                self.deleting.discard((namespace, name))
                log.warning("pod-grouper: PodGroup %s/%s not deleted: %s", namespace, name, err)

    async def _warn(self, problems: Iterable[GroupProblem], reason: str = "GroupingFailed") -> None:
        async def one(problem: GroupProblem) -> None:
            ref = problem.owner
            await self.events.emit(PodEvent(ref.namespace, ref.name, ref.uid, reason, problem.reason,
                                            "Warning", "Grouping", kind=ref.kind, api_version=ref.api_version))

        await asyncio.gather(*(one(p) for p in problems))

