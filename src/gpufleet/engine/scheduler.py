"""The scheduling loop: cycles of admission, quota gates, placement and preemption.

``schedule(snapshot)`` is a pure function: it builds array state from the snapshot, runs cycles
until one changes nothing, and returns the decisions. The simulator and the Kubernetes
controller call this same function.

The :class:`Engine` composes the parts and owns the live state; each part is its own module:
the running pods' bulk binding (running.py), who is tried next (admission.py), what counts
against queues and the queue gates (quota.py), placement (placement.py), the victim index and
search (victims.py, preemption.py) and the output (decisions.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from gpufleet.domain import (
    GPU,
    Decisions,
    Eviction,
    EvictionReason,
    Move,
    NodeName,
    PodKey,
    Project,
    Queue,
    QueueName,
    Snapshot,
)
from gpufleet.domain.selectors import namespace_labels
from gpufleet.domain.units import rfc3339
from gpufleet.engine.admission import FairOrder
from gpufleet.engine.batch import admit_run, batch_applies, commit_lone, lone_pod
from gpufleet.engine.cluster import ClusterState, IntArray
from gpufleet.engine.consolidation import Consolidator
from gpufleet.engine.decisions import DecisionLog
from gpufleet.engine.feasibility import StaticFeasibility
from gpufleet.engine.flavors import FlavorBook
from gpufleet.engine.intake import Screened, screen
from gpufleet.engine.placement import Assignment, GangPlacement, Placer
from gpufleet.engine.preemption import find_victims
from gpufleet.engine.queues import QueueForest
from gpufleet.engine.quota import QuotaGates, overcommit_warnings
from gpufleet.engine.reservations import Reservations
from gpufleet.engine.running import bind_running, preset_node_warnings
from gpufleet.engine.tenancy import PendingLimits, Tenancy, UserCaps
from gpufleet.engine.victims import VictimIndex
from gpufleet.engine.volumes import VolumeBook
from gpufleet.engine.workload import Gang, PodInfo, build_gangs, build_pod_table

__all__ = ["BuildSteps", "Engine", "schedule"]


@dataclass
class Attempt:
    ok: bool
    reason: str = ""


class BuildSteps:
    """How :class:`Engine` builds its node- and pod-derived parts from a snapshot: these steps
    build them fresh. Each step returns what a fresh build returns; a subclass may answer from state
    kept between calls (engine/incremental.py), never with anything else."""

    def screen(self, snapshot: Snapshot) -> Screened:
        return screen(snapshot)

    def cluster(self, snapshot: Snapshot) -> ClusterState:
        """The nodes' capacity state, nothing bound yet (``snapshot`` as screened)."""
        return ClusterState(snapshot.nodes, sorted(set().union(*[p.requests for p in snapshot.pods])))

    def feasibility(self, cluster: ClusterState, pools: Mapping[str, Project] | None) -> StaticFeasibility:
        return StaticFeasibility(cluster.nodes, cluster.schedulable, pools)

    def pod_table(self, snapshot: Snapshot, cluster: ClusterState, queue_of: dict[QueueName, int],
                  default_queues: Mapping[str, QueueName] | None) -> tuple[list[PodInfo], IntArray]:
        return build_pod_table(snapshot, cluster, queue_of, default_queues)

    def bind_running(self, pods: list[PodInfo], requests: IntArray, placer: Placer, gangs: list[Gang],
                     quota: QuotaGates) -> list[str]:
        """Bind the snapshot's running pods (and count them towards gangs and queues); the warnings."""
        return bind_running(pods, requests, placer, gangs, quota)

    def gangs(self, snapshot: Snapshot, pods: list[PodInfo], classes: dict[str, int]) -> list[Gang]:
        """The gangs of the pod table's pods (``build_gangs``)."""
        return build_gangs(snapshot, pods, classes)


FRESH = BuildSteps()


class Engine:
    """Working state of one call. Built from a snapshot; ``run`` decides.

    It is also the :class:`~gpufleet.engine.preemption.VictimHost` the victim search calls back
    (``quota_gate``, ``gang_request``, ``try_place``, ``release_trial``, ``unbind``, ``rebind``).
    """

    # Reuse the failure of an identical lone pod while the state is unchanged (set False on an
    # instance to decide without the shortcut: the decisions must be the same).
    MEMO_FAILURES = True
    # Admit runs of lone pods from one pick (engine/batch.py; set False on the class or an
    # instance to decide one by one: the decisions must be the same).
    USE_BATCH = True

    def __init__(self, snapshot: Snapshot, steps: BuildSteps | None = None) -> None:
        """The state of ``snapshot``. ``steps`` builds the node- and pod-derived parts (fresh from
        the snapshot by default; an :class:`~gpufleet.engine.incremental.IncrementalEngine` gives
        steps that answer from the state it keeps between calls, to the same result)."""
        if steps is None:
            steps = FRESH
        # Nodes over the GPU bound and pods on nodes it does not have never enter (intake.py).
        screened = steps.screen(snapshot)
        snapshot = screened.snapshot
        warnings = screened.warnings
        config = snapshot.config
        queues = list(snapshot.queues)
        if config.default_queue not in {q.name for q in queues}:
            queues.append(Queue(name=QueueName(config.default_queue)))
        self.cluster = steps.cluster(snapshot)
        capacity = {r: self.cluster.capacity(r) for r in {GPU} | set(self.cluster.resources)}
        # GPU-model quotas (engine/flavors.py): None when no queue lists a flavor.
        self.flavors = FlavorBook.of_snapshot(snapshot.flavors, queues, self.cluster)
        if self.flavors is not None:
            queues = self.flavors.queues(queues)
            capacity.update(self.flavors.capacity)
            warnings = warnings + self.flavors.warnings
        self.forest = QueueForest(queues, capacity)
        # Projects (docs/semantics-notes.md, "Projects"): None when no rule can apply.
        tenancy = Tenancy.of(snapshot)
        self.feasibility = steps.feasibility(self.cluster, tenancy.pools() if tenancy is not None else None)
        self.pods, requests = steps.pod_table(
            snapshot, self.cluster, self.forest.index,
            tenancy.default_queues(config.default_queue) if tenancy is not None else None,
        )
        classes = {pc.name: pc.value for pc in snapshot.priority_classes}
        self.gangs: list[Gang] = steps.gangs(snapshot, self.pods, classes)
        self.placer = Placer(self.cluster, self.feasibility, self.pods, config.placement,
                             volumes=VolumeBook.build(snapshot, self.cluster.nodes, self.feasibility, self.pods),
                             namespaces=namespace_labels(snapshot.namespaces) if snapshot.namespaces else None)
        if self.flavors is not None:
            self.flavors.bind(self.forest, self.pods, self.cluster)
        self.quota = QuotaGates(self.forest, self.cluster, self.pods, self.flavors)
        self.cycles = 0
        self.batches = 0  # runs admitted by the batch path (engine/batch.py), and their pods
        self.batched = 0
        self.version = 0  # bumped by every change of bindings, so remembered failures expire
        self.committed = 0  # bumped by every admission and eviction (queue usage changed)
        self.failed: dict[tuple[object, ...], tuple[int, str]] = {}
        # (gang, version, committed) of the last lone flavored pod the batch path's admit_lone refused
        # (engine/batch.py): its attempt right after, in the same state, knows the answer.
        self.lone_refused: tuple[int, int, int] | None = None
        self.gang_sigs: dict[int, tuple[object, ...]] = {}  # gang -> its failure signature (() for none)
        self.gang_shapes: dict[tuple[object, ...], int] = {}  # gangs alike get one number
        # gang -> ((Reservations.changes, borrows), what the reservations held say of it, the signature it
        # makes with the base signature it was made with): failure_signature
        self.held_sigs: dict[int, tuple[tuple[int, bool], tuple[tuple[int, bool], ...], tuple[object, ...],
                                        tuple[object, ...]]] = {}
        # gang -> (the signature delayed_signature was last given, the delayed signature made of it)
        self.delayed_sigs: dict[int, tuple[tuple[object, ...], tuple[object, ...]]] = {}
        self.any_borrows = (-1, False)  # (Reservations.changes, whether a reservation held borrows): reads_borrows
        # The cycle's remembered-failure test now (``answered``): the version of the failures, and
        # whether the signature is ``delayed_signature`` (no bound method kept: no reference cycle).
        self.memo: tuple[int, bool] = (-1, False)
        warnings += steps.bind_running(self.pods, requests, self.placer, self.gangs, self.quota)
        self.forest.set_time(config.now, config.usage_half_life)  # needs the running pods' usage
        # Gangs with a member not running: the only ones that can be candidates or end pending
        # (a gang running whole only becomes pending again by eviction, and is then done).
        self.open_gangs = [g.idx for g in self.gangs if g.alive < len(g.members)]
        if tenancy is not None:
            tenancy.judge(self.gangs, self.pods, self.open_gangs, self.forest)
        self.caps = UserCaps.of(tenancy, self.pods, self.quota.gpu_milli)
        self.victims = VictimIndex(self.gangs, self.pods, requests, self.forest, self.cluster,
                                   self.feasibility, self.placer.node_of)
        self.log = DecisionLog(
            warnings + overcommit_warnings(self.forest) + preset_node_warnings(self.pods, self.cluster)
        )
        self.admission = FairOrder(self.forest, self.gangs, self.pods, self.log.evictions, self.open_gangs,
                                   PendingLimits.of(tenancy, self.gangs, self.pods))
        # Consolidation (docs/semantics.md): off unless configured; built on the first gang it may help.
        self.consolidation = config.consolidation if config.consolidation and config.consolidation.enabled else None
        self.consolidating = self.consolidation is not None
        self._consolidator: Consolidator | None = None
        self._consolidation_now = config.now
        # Reservation and backfill (docs/semantics.md): None when off (no option, or no time).
        self.reserve: Reservations | None = None
        if config.reservation is not None and config.now is not None:
            self.reserve = Reservations(config.reservation, config.now, self.cluster, self.pods, self.gangs,
                                        [self.forest.name(i) for i in range(len(self.forest.index))],
                                        self.log.warnings, self.placer.node_of)

    # -- gang facts --------------------------------------------------------------------------

    def required(self, gang: Gang) -> int:
        """Pods that must start together now: minMember less the members already running."""
        return max(1, gang.min_member - gang.alive)

    def gang_request(self, members: list[int]) -> list[int]:
        return self.quota.gang_request(members)

    def quota_gate(self, gang: Gang, request: list[int]) -> str:
        """Empty when the queue rules (and the Projects' per-user GPU caps) admit ``request``
        now, else the reason."""
        reason = self.quota.gate(gang, request)
        if not reason and self.caps is not None:
            reason = self.caps.gate(self.admission.pending_members(gang))
        return reason

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> Decisions:
        first: dict[int, list[int]] | None = None  # the first cycle's candidates, when already asked
        if self.reserve is not None:
            first = self.admission.candidates()
            self.make_reservations(self.reserve, first)  # reads them, changes nothing they depend on
        while True:
            self.cycles += 1
            if not self.cycle(first):
                break
            first = None
        if self.reserve is not None:
            self.note_reservations(self.reserve)
        decisions = self.log.decisions(self.cluster.nodes, self.pods, self.gangs, self.open_gangs, self.cycles,
                                       self.placer.volume_choices(), self.flavors.names if self.flavors else ())
        if self.consolidating:
            decisions = replace(decisions, moves=self.moves())
        if self.reserve is not None and self.reserve.held and \
                (held := self.reserve.output([n.name for n in self.cluster.nodes])):
            decisions = replace(decisions, reservations=held)
        return decisions

    def consolidator(self) -> Consolidator | None:
        """The call's consolidation (None: off, or no ``now`` to read move histories against)."""
        if self._consolidator is None and self.consolidation is not None and self._consolidation_now is not None:
            # Nothing of it refers back to the engine: a reference cycle would keep the whole call's state
            # alive after it returns, for the cyclic collector to walk (schedule() pauses it for the call).
            flavors, pods = self.flavors, self.pods
            self._consolidator = Consolidator(
                self.consolidation, self._consolidation_now, self.gangs, pods, self.placer,
                None if flavors is None else (lambda members, f: flavors.applied(members, pods, f)))
        return self._consolidator

    def moves(self) -> tuple[Move, ...]:
        """The moves this call committed, by pod key."""
        c = self._consolidator
        if c is None:
            return ()
        nodes, pods = self.cluster.nodes, self.pods
        out = [Move(pods[m].key, NodeName(nodes[mv.src.node].name), tuple(sorted(mv.src.gpus)),
                    NodeName(nodes[mv.dst.node].name), tuple(sorted(mv.dst.gpus)), mv.for_gang, mv.dst.blocks)
               for m, mv in c.moves.items()]
        return tuple(sorted(out, key=lambda mv: mv.pod))

    def cycle(self, candidates: dict[int, list[int]] | None = None) -> bool:
        """One cycle over the candidates (``candidates``: :meth:`FairOrder.candidates` as of now, when
        already asked); whether it changed anything."""
        if candidates is None:
            candidates = self.admission.candidates()
        turn = self.admission.turn(candidates, self.quota.gang_request)
        changed = False
        # The hot loop (one pass per decision): bound methods and containers looked up once.
        gangs, failed, heads = self.gangs, self.failed, turn.req
        pick, advance, signature, attempt, inq = turn.pick, turn.advance, self.failure_signature, self.attempt, turn.inq
        answer_run, answered = turn.answer_run, self.answered
        delayed = self.forest.now is not None and any(q.preemption_delay > 0 for q in self.forest.queues)
        if delayed:
            signature = self.delayed_signature  # gangs alike fail alike only on the same side of the delay
        # The version of the last failure remembered (or, at the start, the version now if any is
        # remembered): while it is not the current one no memo can answer, and a gang's signature
        # is only needed once its attempt has failed (a failed attempt leaves the state as it was,
        # so the signature is the same either way).
        memo_at = self.version if failed else -1
        # Held GPUs differ by gang (reservations, docs/semantics.md): while one is held, a run admits
        # only the gangs every reservation yields to (admit_run).
        batching = self.USE_BATCH and batch_applies(self, turn)
        answered_before = False  # the last pick was answered by a remembered failure
        while (chosen := pick()) >= 0:
            gang = gangs[chosen]
            leaf = gang.queue
            request = heads[leaf]  # turn.request(leaf)
            sig: tuple[object, ...] | None = None
            if memo_at == self.version:
                sig = signature(gang, request)
                known = failed.get(sig) if sig is not None else None
                if known is not None and known[0] == memo_at:
                    gang.pending_reason = known[1]  # same pod, same state: the same failure
                    if answered_before:  # a second one in a row: likely more while nothing changes
                        self.memo = (memo_at, delayed)
                        answer_run(leaf, answered)
                    else:  # one alone costs no stretch (its set-up)
                        advance(leaf)
                    answered_before = True
                    continue
            answered_before = False
            if batching and (n := admit_run(self, turn, leaf)):
                # The pick's gang and those after it were admitted; the turn is past them.
                self.batches += 1
                self.batched += n
                changed = True
                continue
            result = attempt(gang, request, inq[leaf])
            if not result.ok and self.reserve is not None and self.reserve.held \
                    and self.evict_for_reservation(self.reserve, gang, request):
                result = Attempt(True)
            if result.ok:
                changed = True
                gang.pending_reason = ""
            else:
                gang.pending_reason = result.reason
                if memo_at != self.version:
                    sig = signature(gang, request)
                if sig is not None and self.keeps_failure(gang, result.reason):
                    memo_at = self.version
                    failed[sig] = (memo_at, result.reason)
            advance(leaf)
        return changed

    def answered(self, g: int, request: list[int]) -> bool:
        """Whether gang ``g`` (asking ``request``), picked now, is answered by a remembered failure
        (``self.memo``: the version it was remembered at, which is the version now, and the cycle's
        signature); its pending reason is then set. The cycle's test, for ``Turn.answer_run``."""
        memo_at, delayed = self.memo
        gang = self.gangs[g]
        if delayed:
            sig = self.delayed_signature(gang, request)
        elif not gang.alive and (self.reserve is None or not self.reserve.held) \
                and (got := self.gang_sigs.get(g)) is not None:
            sig = got or None  # failure_signature: a gang of gang_signature's, no hold to add
        else:
            sig = self.failure_signature(gang, request)
        known = self.failed.get(sig) if sig is not None else None
        if known is None or known[0] != memo_at:
            return False
        gang.pending_reason = known[1]
        return True

    def failure_signature(self, gang: Gang, request: list[int]) -> tuple[object, ...] | None:
        """What an attempt of a gang with no member running depends on, besides the state; None
        when there is no such shortcut.

        Backlogs are mostly many pods alike (same queue, priority, requests, constraints). Once
        one fails, the others fail the same way until the state changes (``version``), so they
        reuse its reason instead of repeating the placement and victim search. Gangs alike
        (member by member, in the order they are placed) likewise: see :meth:`gang_signature`.
        """
        if not self.MEMO_FAILURES or gang.alive:
            return None
        if self.reserve is not None and self.reserve.held:
            # What the holds are for this gang: which reservations it may use (docs/semantics.md). A
            # gang holding one is never answered by another's failure: it may evict for it.
            reserve = self.reserve
            base = self.failure_signature_now(gang, request)
            if base is None or gang.idx in reserve.held:
                return None
            # What may_use answers depends on the gang, its pending members (the same while none of
            # them runs), the reservations (the same while ``changes`` is) and whether it borrows.
            borrows = self.reads_borrows(gang) and self.borrows(gang, request)
            token = (reserve.changes, borrows)
            got = self.held_sigs.get(gang.idx)
            if got is None or got[0] != token:
                members = self.admission.pending_members(gang)
                part = tuple((g, reserve.may_use(gang, h, members, borrows)) for g, h in reserve.held.items())
                got = self.held_sigs[gang.idx] = (token, part, base, (base, part))
            elif got[2] is not base and got[2] != base:  # a lone pod's base is made anew on each call
                got = self.held_sigs[gang.idx] = (token, got[1], base, (base, got[1]))
            return got[3]  # the same object while nothing it is made of changes (delayed_signature's cache)
        return self.failure_signature_now(gang, request)

    def failure_signature_now(self, gang: Gang, request: list[int]) -> tuple[object, ...] | None:
        """:meth:`failure_signature` of a gang with no member running, holds aside."""
        if gang.group is not None or len(gang.members) != 1:
            return self.gang_signature(gang, request)
        info = self.pods[gang.members[0]]
        if info.pod.claims and self.placer.volumes is not None:
            return None  # claims and their volumes make each such pod's failure its own
        if info.pod.device_wait:
            return None  # so does the DRA claim it waits for (its reason names the claim)
        return (gang.queue, gang.priority, gang.preemptible, self.feasibility.key(info.pod), info.res.tobytes(),
                info.whole, info.blocks, info.gpu_mem_bytes, tuple(request), self.placer.rule_signature(info),
                self.caps.signature(info.idx) if self.caps is not None else -1, info.pod.host_ports)

    def delayed_signature(self, gang: Gang, request: list[int]) -> tuple[object, ...] | None:
        """:meth:`failure_signature` and whether the gang's queue still holds back its evictions."""
        sig = self.failure_signature(gang, request)
        if sig is None:
            return None
        # The delay's side is fixed for the call (the clock and the gang's age): made again only for
        # a signature of another object (failure_signature gives the same one while nothing changes).
        got = self.delayed_sigs.get(gang.idx)
        if got is None or got[0] is not sig:
            got = self.delayed_sigs[gang.idx] = (
                sig, (*sig, bool(self.forest.preemption_held(gang.queue, gang.creation))))
        return got[1]

    def gang_signature(self, gang: Gang, request: list[int]) -> tuple[object, ...] | None:
        """The failure signature of a gang with no member running (a PodGroup, or a pod of one):
        its queue, priority, preemptibility, ``minMember``, topology levels and request, and each
        pending member's constraints and resources in placement order, as for a lone pod.
        Computed once per gang (its members do not change while none runs) and numbered, so a
        lookup hashes a small tuple.

        Its failure is reused only when the reason does not name the gang or one of its pods
        (:meth:`keeps_failure`): such a reason is the same words for every gang alike."""
        got = self.gang_sigs.get(gang.idx)
        if got is None:
            members = self.admission.pending_members(gang)
            parts: list[object] = [gang.queue, gang.priority, gang.preemptible, gang.min_member,
                                   gang.topology_required, gang.topology_preferred, tuple(request),
                                   gang.group.placement if gang.group is not None else None]
            volumes = self.placer.volumes is not None
            pods, key, caps, add = self.pods, self.feasibility.key_once, self.caps, parts.append
            rules = self.placer.interpod.signature if self.placer.interpod is not None else None
            for m in members:
                info = pods[m]
                pod = info.pod
                if (pod.claims and volumes) or pod.device_wait:
                    self.gang_sigs[gang.idx] = got = ()
                    break
                add((key(pod), info.res.tobytes(), info.whole, info.blocks, info.gpu_mem_bytes,
                     () if rules is None else rules(info.idx),  # Placer.rule_signature
                     -1 if caps is None else caps.signature(m), pod.host_ports))
            else:
                shape = tuple(parts)
                got = ("gang", self.gang_shapes.setdefault(shape, len(self.gang_shapes)))
                self.gang_sigs[gang.idx] = got
        return got or None

    def keeps_failure(self, gang: Gang, reason: str) -> bool:
        """Whether a failure may stand for other gangs alike: a lone pod's always (its reasons
        never name it), a gang's when the reason names neither the gang nor one of its pods."""
        if gang.group is None and len(gang.members) == 1:
            return True
        return gang.key not in reason and not any(self.pods[m].key in reason for m in gang.members)

    # -- one attempt ---------------------------------------------------------------------------

    def try_place(self, gang: Gang, members: list[int], request: list[int]) -> GangPlacement:
        """Quota gates, then placement on what is free now (committed on success)."""
        if self.reserve is not None and self.reserve.held:
            # before the gates: lending limits count free GPUs
            self.reserve.hold_for(gang, members, self.borrows(gang, request))
        reason = self.quota.gate(gang, request)
        if not reason and self.caps is not None:
            reason = self.caps.gate(members)
        if reason:
            return GangPlacement(False, reason=reason)
        return self.placer.place_gang(gang, members, self.required(gang))

    def attempt(self, gang: Gang, request: list[int], inside: bool | None = None) -> Attempt:
        """Try the gang (``request``: its request as the fair order took it; ``inside``: whether
        that request is in quota now, where known)."""
        members = self.admission.pending_members(gang)
        waiting = self.placer.volume_wait(members)
        if waiting:  # a claim the pod waits for: neither placement nor victims can help
            return Attempt(False, waiting)
        flavors = self.flavors
        if flavors is not None and flavors.takes_gang(gang, members, self.pods):
            known = None if inside is None else (request, inside)
            unplaced = False  # the placement on every flavor is known to fail now
            if self.USE_BATCH:
                if self.lone_refused == (gang.idx, self.version, self.committed):
                    unplaced = True  # the batch path's admit_lone just refused it, nothing changed since
                else:
                    admitted = self.admit_lone_flavored(flavors, gang, known)
                    if admitted:
                        return Attempt(True)
                    unplaced = admitted is not None
            if unplaced and self.reserve is not None and self.reserve.held:
                unplaced = False  # each flavor's placement sets its holds, which consolidation reads
            ok, reason = flavors.attempt(self, gang, members, self.pods, self.feasibility.mask, self.feasibility.key,
                                         unplaced)
            return Attempt(ok, reason)
        placed = self.try_place(gang, members, request)
        if placed.ok:
            self.record(gang, placed)
            return Attempt(True)
        if self.consolidating and (planned := self.consolidate(gang, members, request)) is not None:
            self.record(gang, planned)
            return Attempt(True)
        ok, reason = self.preempt_for(gang, members, request, placed.why)
        return Attempt(ok, reason)

    def admit_lone_flavored(self, flavors: FlavorBook, gang: Gang,
                            known: tuple[list[int], bool] | None = None) -> bool | None:
        """A lone whole-GPU pod that takes a flavor, admitted as the batch path admits it
        (``FlavorBook.admit_lone``: what the flavor attempt commits without preemption, placed from
        the free-GPU index on the flavor's nodes, no copy of the pod), where the batch's conditions
        hold (no lending limits, user caps, claims or volumes), whatever the number of leaves;
        committed on success. While reservations are held, each placement on a flavor is made with
        the holds that the flavor attempt's ``try_place`` on that flavor sets (``hold_for``, by
        whether the request on it borrows), or none where every reservation yields to the gang.
        True: admitted. False: the flavor attempt would place it on no flavor now (nothing placed,
        holds aside, which every attempt sets again): it preempts or fails. None: the conditions do
        not hold, the flavor attempt decides. ``known``: a request of the gang and whether it is in
        quota now (the fair order's)."""
        m = lone_pod(self, gang)
        if m < 0 or self.caps is not None or self.placer.volumes is not None or self.forest.has_lending:
            return None
        info = self.pods[m]
        if not flavors.takes(info):
            return None
        reserve = self.reserve
        hold: Callable[[bool], None] | None = None
        if reserve is not None and reserve.held:
            if reserve.yields_all(gang):
                reserve.release_all()
            else:  # the holds of the flavor attempt's try_place, flavor by flavor (borrows: not in quota)
                hold = partial(reserve.hold_for, gang, [m])
        f = self.forest
        limit_ok = (lambda leaf, req: f.limit_verdict(leaf, req).ok) if f.has_limits else None
        got = flavors.admit_lone(info, gang, self.placer, f.in_quota, limit_ok, self.quota.quota_vec, known, hold)
        if got is None:
            return False
        a, request = got
        commit_lone(self, gang, m, a, request)  # its request on the flavor it took
        return True

    def preempt_for(self, gang: Gang, members: list[int], request: list[int],
                    failed: Callable[[], str]) -> tuple[bool, str]:
        """Admit the gang by evicting victims (``failed``: why it did not fit without, asked only
        on failure: a reason costs a pass over the nodes): committed on success, else the reason."""
        held = self.forest.preemption_held(gang.queue, gang.creation)  # docs/semantics.md
        if held:
            return False, failed() + held
        victims, why, verified, elastic = find_victims(self.victims, self, gang, members, request)
        if victims is None:
            return False, failed() + (f"; {why}" if why else "")
        by = self.pods[min(members, key=lambda m: self.pods[m].key)].key
        if why:
            self.log.warnings.append(f"victims for {by}: {why}")
        if elastic:
            self.evict_elastic(victims, gang, by)
        else:
            for v in victims:
                self.evict_gang(self.gangs[v], gang, by)
        if verified is not None:  # the state now is the one the victim check placed the gang on
            for a in verified.assignments:
                self.placer.commit(a)
            placed = verified
        else:
            placed = self.try_place(gang, members, request)
        assert placed.ok, "victim set was checked to make the gang fit"
        self.record(gang, placed)
        return True, ""

    def record_placed(self, gang: Gang, placed: object) -> None:
        """:meth:`record` of a placement :meth:`try_place` returned (the flavor attempt's callback)."""
        assert isinstance(placed, GangPlacement)
        self.record(gang, placed)

    def placed_node(self, placed: object) -> int:
        """The node of the first pod of a placement :meth:`try_place` returned."""
        assert isinstance(placed, GangPlacement)
        return placed.assignments[0].node

    def may_consolidate(self, gang: Gang, members: list[int]) -> bool:
        """False when :meth:`consolidate` gives None now whatever the request (the consolidator's
        ``hopeless``: no budget left, or fewer free GPUs in the cluster than the gang needs)."""
        c = self.consolidator()
        return c is not None and not c.hopeless(members, self.required(gang))

    def consolidate(self, gang: Gang, members: list[int], request: list[int]) -> GangPlacement | None:
        """Moves that make room for ``gang`` (docs/semantics.md, "Consolidation"), committed with its
        placement; None when there are none (nothing changed)."""
        c = self.consolidator()
        if c is None:
            return None
        required = self.required(gang)
        if c.hopeless(members, required) or self.quota_gate(gang, request):
            return None
        # The placement state: the bindings (``version``) and the GPUs reservations hold now.
        state = (self.version, self.reserve.holds() if self.reserve is not None else ())
        placed = c.plan(gang, members, required, state)
        if placed is not None:
            self.version += 1
            self.victims.moved = True  # running gangs changed nodes
        return placed

    # -- reservations (docs/semantics.md, "Reservation and backfill") ---------------------------

    def make_reservations(self, reserve: Reservations, candidates: dict[int, list[int]]) -> None:
        """At the start of the call: each leaf queue's first overdue candidate (whole GPUs, admitted by
        its queue gates) may reserve, oldest wait first, up to the configured number (``candidates``:
        :meth:`FairOrder.candidates` now, read only)."""
        wanted: list[Gang] = []
        for gangs in candidates.values():
            for g in gangs:
                gang = self.gangs[g]
                if not reserve.overdue(gang):
                    continue
                members = self.admission.pending_members(gang)
                if all(self.pods[m].whole and not self.pods[m].fractional for m in members) \
                        and not self.quota_gate(gang, self.gang_request(members)):
                    wanted.append(gang)
                    break
        wanted.sort(key=lambda gang: (gang.creation, gang.key))
        for gang in wanted:
            if len(reserve.held) >= reserve.config.max:
                break
            members = self.admission.pending_members(gang)
            feasible = self.cluster.schedulable.copy()
            for key in {self.feasibility.key(self.pods[m].pod): m for m in members}.values():
                feasible &= self.feasibility.mask(self.pods[key].pod)
            label = gang.topology_required
            reserve.reserve(gang, members, self.required(gang), feasible,
                            self.placer.domains(label) if label else None,
                            self.borrows(gang, self.gang_request(members)))

    def evict_for_reservation(self, reserve: Reservations, gang: Gang, request: list[int]) -> bool:
        """A gang whose reservation is due and that failed its attempt: evict a minimal set of its
        backfill on its nodes (taken lower priority, later start, key first until it fits, then each
        given back, last taken first, when it still fits without it) and place it; none when it cannot
        be placed with all of them. A gang not in quota takes only victims that would not be in quota
        once evicted. Whether it was placed."""
        held = reserve.held.get(gang.idx)
        if held is None or held.start > reserve.now:
            return False
        on = np.flatnonzero(np.isin(self.placer.node_of, held.nodes))
        found = {self.pods[p].gang for p in on.tolist() if self.pods[p].gang >= 0}
        victims = sorted((self.gangs[g] for g in found if reserve.evictable(self.gangs[g], gang)),
                         key=lambda v: (v.priority, -reserve.gang_start(v), v.key))
        if not self.forest.in_quota(gang.queue, request):  # it borrows: only victims that could not reclaim it
            victims = [v for v in victims if not self.in_quota_if_evicted(v)]
        members = self.admission.pending_members(gang)
        taken: list[tuple[Gang, list[Assignment]]] = []
        fits = False
        for v in victims:
            taken.append((v, self.lift(v)))
            placed = self.try_place(gang, members, request)
            if placed.ok:
                self.release_trial(placed)
                fits = True
                break
        chosen: list[Gang] = []
        if fits:
            chosen.append(taken[-1][0])
            for v, trial in reversed(taken[:-1]):  # give back each one not needed
                self.put_back(trial)
                placed = self.try_place(gang, members, request)
                if placed.ok:
                    self.release_trial(placed)
                    trial.clear()
                else:
                    self.lift(v)
                    chosen.append(v)
        for _, trial in reversed(taken):
            self.put_back(trial)
        if not chosen:
            return False
        by = self.pods[min(members, key=lambda m: self.pods[m].key)].key
        for v in sorted(chosen, key=lambda v: (v.priority, -reserve.gang_start(v), v.key)):
            self.evict_gang(v, gang, by, EvictionReason.RESERVATION)
        placed = self.try_place(gang, members, request)
        assert placed.ok, "the evictions were checked to make the gang fit"
        self.record(gang, placed)
        return True

    def reads_borrows(self, gang: Gang) -> bool:
        """Whether ``Reservations.may_use`` reads whether ``gang`` borrows: only for a preemptible
        gang and a reservation made by a borrowing gang (elsewhere any value gives the same answer)."""
        reserve = self.reserve
        if reserve is None or not gang.preemptible:
            return False
        if self.any_borrows[0] != reserve.changes:  # held changes only with ``changes``
            self.any_borrows = (reserve.changes, any(h.borrows for h in reserve.held.values()))
        return self.any_borrows[1]

    def borrows(self, gang: Gang, request: list[int]) -> bool:
        """Whether a pending gang's request is not in quota (it would borrow)."""
        return not self.forest.in_quota(gang.queue, request)

    def in_quota_if_evicted(self, gang: Gang) -> bool:
        """Whether a running gang, evicted and pending again, would be in quota (could reclaim)."""
        bound = [m for m in gang.members if self.pods[m].node is not None]
        request = self.gang_request(bound)
        trial = self.lift(gang)
        inside = self.forest.in_quota(gang.queue, request)
        self.put_back(trial)
        return inside

    def lift(self, gang: Gang) -> list[Assignment]:
        """Unbind a running gang for a trial; its assignments, to put back."""
        out: list[Assignment] = []
        for m in gang.members:
            info = self.pods[m]
            if info.node is not None:
                out.append(Assignment(m, info.node, info.gpus, info.bound_blocks))
                self.unbind(m)
        return out

    def put_back(self, trial: list[Assignment]) -> None:
        for a in reversed(trial):
            self.rebind(a.pod, a.node, a.gpus, a.blocks)

    def note_reservations(self, reserve: Reservations) -> None:
        """Release what the call did not hold to its end, and say in the pending reasons which gangs hold
        reservations and which gangs could not use them."""
        reserve.release_all()
        for g, held in reserve.held.items():
            gang = self.gangs[g]
            gang.pending_reason = (gang.pending_reason or "not tried") + \
                f"; reserved {len(held.nodes)} nodes from {rfc3339(held.start)}"
        # What each reservation adds to the reason of a gang that could not use it (the same words for every gang).
        said = [(held, f"; {len(held.nodes)} nodes reserved for {self.gangs[held.gang].key} from "
                       f"{rfc3339(held.start)} (only preemptible gangs that waited less, borrowing when it borrows, "
                       f"or gangs whose declared runtime ends by then, may use them)")
                for held in reserve.held.values()]
        for g in self.open_gangs:  # the others left pending: which reservations they could not use
            gang = self.gangs[g]
            if g in reserve.held or not gang.pending_reason:
                continue
            members = self.admission.pending_members(gang)
            if not any(self.pods[m].whole or self.pods[m].fractional for m in members):
                continue
            borrows = self.reads_borrows(gang) and self.borrows(gang, self.gang_request(members))
            unused = [text for held, text in said if not reserve.may_use(gang, held, members, borrows)]
            if unused:
                gang.pending_reason += "".join(unused)

    # -- changes of the live state -------------------------------------------------------------

    def record(self, gang: Gang, placed: GangPlacement) -> None:
        """Keep a committed placement: bindings, the gang's count and its queues' usage."""
        # A gang admitted by this call may be a victim later in it (its binding then withdrawn);
        # see VictimIndex.admit for the limits that make the call end.
        self.victims.admit(gang)
        self.version += 1
        if self.reserve is not None:
            self.reserve.drop(gang.idx)
        self.committed += 1
        pods, bindings, add, quota_vec, caps = (self.pods, self.log.bindings, self.forest.add,
                                                self.quota.quota_vec, self.caps)
        for a in placed.assignments:
            info = pods[a.pod]
            bindings[a.pod] = a  # self.log.bind(a)
            gang.alive += 1
            add(info.queue, quota_vec(info))
            if caps is not None:
                caps.add(info, 1)

    def release_trial(self, placed: GangPlacement) -> None:
        for a in reversed(placed.assignments):
            self.placer.release(a.pod)

    def unbind(self, pod: int) -> None:
        self.version += 1
        info = self.pods[pod]
        self.forest.add(info.queue, self.quota.quota_vec(info), -1)
        if self.caps is not None:
            self.caps.add(info, -1)
        self.placer.release(pod)
        self.gangs[info.gang].alive -= 1

    def rebind(self, pod: int, node: int, gpus: tuple[int, ...], blocks: int | None) -> None:
        self.version += 1
        if self.reserve is not None:
            self.reserve.release_all()  # its GPUs may be held now; the next attempt holds again
        self.placer.commit(Assignment(pod, node, gpus, blocks))
        info = self.pods[pod]
        self.gangs[info.gang].alive += 1
        self.forest.add(info.queue, self.quota.quota_vec(info))
        if self.caps is not None:
            self.caps.add(info, 1)

    def evict_elastic(self, pods: list[int], by_gang: Gang, by: PodKey) -> None:
        """Evict elastic members (pods of gangs running in the snapshot, each left with at least
        minMember bound): those pods only; their gangs run on (docs/semantics-notes.md, "Elastic
        members are preempted first")."""
        by_victim: dict[int, list[int]] = {}
        for m in pods:
            info = self.pods[m]
            reason = EvictionReason.PREEMPT if info.queue == by_gang.queue else EvictionReason.RECLAIM
            self.unbind(m)
            self.log.evict(m, Eviction(info.key, reason, by))
            by_victim.setdefault(info.gang, []).append(m)
        self.committed += 1
        for g, gone in sorted(by_victim.items()):
            self.victims.shrink(self.gangs[g], gone)

    def evict_gang(self, victim: Gang, by_gang: Gang, by: PodKey, reason: EvictionReason | None = None) -> None:
        """Evict a running gang (done: not re-queued), or withdraw the bindings of a gang this call
        admitted (never carried out: its pods are pending again and compete in later cycles)."""
        if reason is None:
            reason = EvictionReason.PREEMPT if victim.queue == by_gang.queue else EvictionReason.RECLAIM
        running = False
        for m in victim.members:
            info = self.pods[m]
            if info.node is not None:
                self.unbind(m)
                if info.pod.bound:
                    running = True
                    self.log.evict(m, Eviction(info.key, reason, by))
                else:
                    self.log.withdraw(m)
        victim.evicted = running
        if self._consolidator is not None:
            self._consolidator.forget(victim)
        if not running:
            victim.taken_back_by = by
        self.committed += 1
        self.victims.retire(victim)


def schedule(snapshot: Snapshot) -> Decisions:
    """Decide admission, placement and preemption for every pending pod of ours."""
    # The engine builds tens of thousands of small objects that die by reference counting; the
    # cyclic collector would rescan all of them many times over (~10% of a large call) for
    # nothing, so it is paused for the call. Outputs do not depend on it.
    paused = gc.isenabled()
    gc.disable()
    try:
        return Engine(snapshot).run()
    finally:
        if paused:
            gc.enable()


def admission_order(snapshot: Snapshot) -> dict[str, tuple[str, ...]]:
    """Each leaf queue's pending gangs in the order the engine tries them, as of the start of a
    ``schedule(snapshot)`` call: leaf queue name -> gang keys (PodGroup key, or the pod key of a
    gang of one), first tried first. Only candidates are listed: a gang waiting for its PodGroup,
    its scheduling gates, its minMember pods or a Project rule is in no queue's order. Queues with
    no candidate are left out. (Between queues the engine alternates by fair order: the rank is
    within the leaf queue.)"""
    engine = Engine(snapshot)
    return {engine.forest.name(leaf): tuple(engine.gangs[g].key for g in gangs)
            for leaf, gangs in sorted(engine.admission.candidates().items())}
