"""Carrying decisions out through the API: bindings (annotate, then bind) and evictions.

A gang is bound in two phases: first every pod gets its ``gpufleet.dev/gpu-index`` (and, for a
fraction, ``gpu-blocks``) annotation; only when all of them have it are the Bindings posted. A gang
whose annotation phase fails is not bound at all. Before that, the volumes its pods chose are
written (:mod:`gpufleet.kube.controller.volume_writes`: a PV's claimRef, a claim's selected-node
annotation), for every pod of the gang, then the DRA claims they allocate
(:mod:`gpufleet.kube.controller.claim_writes`: each ResourceClaim's ``status.allocation`` and
``reservedFor``, as kube-scheduler's DynamicResources PreBind); when one of these writes fails, no
pod of the gang is annotated or bound, and the engine decides the gang again in the next cycle.
Between the patch and the confirmed Binding a pod is *in flight* (:attr:`Binder.inflight`): the
controller's next snapshot shows it on its node, so that no cycle decides it again. A Binding
answered 409 is looked up: already on our node (an earlier attempt went through but its answer was
lost, as when the API server restarts) counts as bound; on another node, the pod is someone else's
now.

Calls run concurrently (at most ``concurrency`` at a time, over one kept-alive connection pool);
retryable failures (no answer, 409 on a patch, 429, 5xx) are retried with exponential backoff on
the injected clock. Before every call the leader check runs again: a replica that lost its lease
stops at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gpufleet.domain import (
    ANNOTATION_FLAVOR,
    ANNOTATION_GPU_BLOCKS,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_MPS_MEM_LIMIT,
    Binding,
    Eviction,
    PodKey,
)
from gpufleet.kube.client.port import ApiError, Clock, ClusterApi, Kind
from gpufleet.kube.controller.claim_writes import ClaimContext, ClaimWrite, claim_writes
from gpufleet.kube.controller.lifecycle import BINDING, BindEvent, BindStage
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.kube.controller.volume_writes import CachedObject, VolumeWrite, VolumeWriteProblem, volume_writes
from gpufleet.kube.webhook.annotations import mps_memory_limit

__all__ = ["BindOutcome", "Binder", "EvictOutcome", "InFlight", "NotLeader", "desired_annotations"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class NotLeader(Exception):
    """This replica lost its lease: stop writing."""


@dataclass
class InFlight:
    binding: Binding
    gang: str
    stage: BindStage  # see gpufleet.kube.controller.lifecycle.BINDING
    since: float


@dataclass(frozen=True)
class BindOutcome:
    gang: str
    bound: tuple[PodKey, ...]
    failed: Mapping[PodKey, str]  # pods not bound, and why


@dataclass(frozen=True)
class EvictOutcome:
    pod: PodKey
    result: str  # evicted | gone | blocked | failed
    message: str = ""


def _split(key: PodKey) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def desired_annotations(pod: Mapping[str, Any] | None, binding: Binding,
                        gpu_memory_mib: int | None = None) -> dict[str, str | None]:
    """The annotation changes the pod needs for ``binding`` (empty: it already says so).

    A gpu-blocks annotation set by the user is the pod's request and already says the blocks;
    for a pod sized by gpu-memory the blocks held are written out. A fractional pod also gets
    the MPS memory limit its blocks stand for on that node's GPUs (``gpu_memory_mib``), which the
    webhook's environment reads (see :mod:`gpufleet.kube.webhook.annotations`)."""
    meta = (pod or {}).get("metadata") or {}
    current: Mapping[str, Any] = meta.get("annotations") or {}
    wanted: dict[str, str | None] = {ANNOTATION_GPU_INDEX: ",".join(str(g) for g in binding.gpus) or None}
    if binding.gpu_blocks is not None:
        wanted[ANNOTATION_GPU_BLOCKS] = str(binding.gpu_blocks)
        if gpu_memory_mib:
            wanted[ANNOTATION_MPS_MEM_LIMIT] = mps_memory_limit(binding.gpu_blocks, gpu_memory_mib)
    elif ANNOTATION_GPU_MEMORY in current and ANNOTATION_GPU_BLOCKS in current:
        wanted[ANNOTATION_GPU_BLOCKS] = None  # a leftover of an earlier fractional binding
    if binding.gpu_blocks is None and ANNOTATION_MPS_MEM_LIMIT in current:
        wanted[ANNOTATION_MPS_MEM_LIMIT] = None
    if binding.flavor is not None or ANNOTATION_FLAVOR in current:  # ours: a tenant's is overwritten
        wanted[ANNOTATION_FLAVOR] = binding.flavor
    return {k: v for k, v in wanted.items() if current.get(k) != v}


class Binder:
    def __init__(
        self,
        api: ClusterApi,
        clock: Clock,
        is_leader: Callable[[], bool],
        metrics: ControllerMetrics | None = None,
        concurrency: int = 64,
        retries: int = 6,
        backoff: float = 0.05,
        annotate_via: str = "patch",
        gpu_memory_of: Callable[[str], int | None] | None = None,
        cached: CachedObject | None = None,
    ) -> None:
        self.api = api
        self.cached = cached  # (kind, namespace, name) -> the informers' object: claims and PVs to write
        self.gpu_memory_of = gpu_memory_of  # node name -> MiB per GPU, for the MPS memory limit
        self.clock = clock
        self.is_leader = is_leader
        self.metrics = metrics
        self.retries = retries
        self.backoff = backoff
        if annotate_via not in ("patch", "binding"):
            raise ValueError(f"annotate_via: patch or binding, not {annotate_via!r}")
        self.annotate_via = annotate_via
        self._slots = asyncio.Semaphore(concurrency)
        self.inflight: dict[PodKey, InFlight] = {}
        # The volume writes of the current bind_gangs call, by object: pods of several gangs that
        # chose the same volume (a shared claim) wait for one write instead of racing on it.
        self._volume_calls: dict[tuple[Kind, str, str], asyncio.Future[None]] = {}
        # DRA (docs/semantics-notes.md): the cycle's claims, classes and GPU memory (set by the
        # controller each cycle), and the claim writes of the current bind_gangs call, by claim.
        self.claim_context = ClaimContext()
        self._claim_writes: dict[tuple[Kind, str, str], ClaimWrite] = {}
        self._claim_uses: dict[PodKey, list[tuple[Kind, str, str]]] = {}
        self._claim_problems: dict[PodKey, str] = {}
        self.calls = 0  # API calls made (for API-calls-per-binding figures)
        # With the usage ledger on: the annotations that stamp a binding with its bound time (the
        # clock's time when bind_gangs started), written with the others; the times by pod.
        self.stamp: Callable[[float], Mapping[str, str]] | None = None
        # Labels written with a pod's annotation patch before its Binding (the pod-grouper's pod-group
        # label of a pod bound in the cycle that labels it): the pod's, taken once.
        self.labels_of: Callable[[PodKey], Mapping[str, str]] | None = None
        self.stamps: dict[PodKey, float] = {}
        # ... and how a pod's object tells the bound time it carries (for a pod an earlier attempt bound)
        self.stamped: Callable[[Mapping[str, Any]], float | None] | None = None

    async def _call(self, operation: str, make: Callable[[], Awaitable[T]], retry_conflict: bool = True) -> T:
        """One API call with the leader check, the concurrency limit and retries."""
        delay = self.backoff
        attempt = 0
        while True:
            if not self.is_leader():
                raise NotLeader()
            try:
                async with self._slots:
                    self.calls += 1
                    return await make()
            except ApiError as err:
                if self.metrics is not None:
                    self.metrics.api_error(operation, err.status)
                attempt += 1
                if not err.retryable or (err.status == 409 and not retry_conflict) or attempt > self.retries:
                    raise
                log.info("%s: %s; retry %d in %.2fs", operation, err, attempt, delay)
                await self.clock.sleep(delay)
                delay = min(delay * 2, 5.0)

    # ------------------------------------------------------------------------------ bindings

    def _advance(self, pod: PodKey, event: BindEvent) -> None:
        """Move the pod along :data:`~gpufleet.kube.controller.lifecycle.BINDING`. The entry may be
        gone: leadership was lost (and the state forgotten) during the call."""
        flight = self.inflight.get(pod)
        if flight is not None:
            flight.stage = BINDING.next(flight.stage, event)

    async def bind_gangs(
        self,
        gangs: Sequence[tuple[str, Sequence[Binding]]],
        pods: Callable[[PodKey], Mapping[str, Any] | None],
        gate: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> list[BindOutcome]:
        """Bind every gang (all concurrently); ``pods`` gives a pod's object as last seen; ``gate``,
        awaited before a gang's first write, says why it must not be bound (None: it may)."""
        now = self.clock.now()
        for gang, bindings in gangs:
            for b in bindings:
                # Volume and DRA claim writes come first (one stage: what the pod's Binding needs written).
                first = BindStage.BINDING_VOLUMES if b.volumes or b.devices else BindStage.ANNOTATING
                self.inflight[b.pod] = InFlight(b, gang, first, now)
                if self.stamp is not None:
                    self.stamps[b.pod] = now
        self._plan_claims(b for _, bindings in gangs for b in bindings if b.devices)
        try:
            results = await asyncio.gather(
                *(self._bind_gang(gang, bindings, pods, gate) for gang, bindings in gangs), return_exceptions=True
            )
        finally:
            self._volume_calls.clear()
            self._claim_writes.clear()
            self._claim_uses.clear()
            self._claim_problems.clear()
        outcomes: list[BindOutcome] = []
        for (gang, bindings), result in zip(gangs, results, strict=True):
            if isinstance(result, BaseException):
                for b in bindings:
                    if self.inflight.get(b.pod, None) is not None and self.inflight[b.pod].stage != BindStage.BOUND:
                        self.inflight.pop(b.pod, None)
                why = "lost the leader lease" if isinstance(result, NotLeader) else f"{type(result).__name__}: {result}"
                if not isinstance(result, NotLeader | ApiError):
                    log.error("binding gang %s failed", gang, exc_info=result)
                outcomes.append(BindOutcome(gang, (), {b.pod: why for b in bindings}))
            else:
                outcomes.append(result)
        return outcomes

    async def _bind_one(self, gang: str, binding: Binding, pod: Mapping[str, Any] | None) -> BindOutcome:
        """A gang of one pod, the common case, without the gathers a real gang needs."""
        try:
            carried = await self._annotate(binding, pod)
            self._advance(binding.pod, BindEvent.ANNOTATED)
            await self._post_binding(binding, carried)
        except ApiError as err:
            self.inflight.pop(binding.pod, None)
            if self.metrics is not None:
                self.metrics.bindings.labels("failed").inc()
            return BindOutcome(gang, (), {binding.pod: _why(err)})
        self._advance(binding.pod, BindEvent.CONFIRMED)
        if self.metrics is not None:
            self.metrics.bindings.labels("bound").inc()
        return BindOutcome(gang, (binding.pod,), {})

    async def _bind_gang(
        self, gang: str, bindings: Sequence[Binding], pods: Callable[[PodKey], Mapping[str, Any] | None],
        gate: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> BindOutcome:
        if gate is not None and (why := await gate(gang)) is not None:
            for b in bindings:
                self.inflight.pop(b.pod, None)
            return BindOutcome(gang, (), {b.pod: why for b in bindings})
        volumes, devices = any(b.volumes for b in bindings), any(b.devices for b in bindings)
        if volumes or devices:
            problems = await self._write_volumes(bindings) if volumes else {}
            if not problems and devices:
                problems = await self._write_claims(bindings)
            if problems:  # all or nothing: no pod of the gang is annotated or bound
                for b in bindings:
                    self.inflight.pop(b.pod, None)
                if self.metrics is not None:
                    self.metrics.bindings.labels("failed").inc(len(bindings))
                return BindOutcome(gang, (), {b.pod: problems.get(b.pod, "another pod of its gang failed")
                                              for b in bindings})
            for b in bindings:
                if b.volumes or b.devices:
                    self._advance(b.pod, BindEvent.VOLUMES_WRITTEN)
        if len(bindings) == 1:
            return await self._bind_one(gang, bindings[0], pods(bindings[0].pod))
        annotated: list[Any] = await asyncio.gather(
            *(self._annotate(b, pods(b.pod)) for b in bindings), return_exceptions=True
        )
        problems = {b.pod: _why(r) for b, r in zip(bindings, annotated, strict=True) if isinstance(r, BaseException)}
        if any(isinstance(r, NotLeader) for r in annotated):
            raise NotLeader()
        if problems:  # all or nothing: no pod of the gang is bound
            for b in bindings:
                self.inflight.pop(b.pod, None)
            return BindOutcome(gang, (), {b.pod: problems.get(b.pod, "another pod of its gang failed")
                                          for b in bindings})
        for b in bindings:
            self._advance(b.pod, BindEvent.ANNOTATED)
        posted = await asyncio.gather(
            *(self._post_binding(b, a) for b, a in zip(bindings, annotated, strict=True)), return_exceptions=True
        )
        if any(isinstance(r, NotLeader) for r in posted):
            raise NotLeader()
        bound: list[PodKey] = []
        failed: dict[PodKey, str] = {}
        for b, r in zip(bindings, posted, strict=True):
            if isinstance(r, BaseException):
                failed[b.pod] = _why(r)
                self.inflight.pop(b.pod, None)
            else:
                bound.append(b.pod)
                self._advance(b.pod, BindEvent.CONFIRMED)
        if self.metrics is not None:
            self.metrics.bindings.labels("bound").inc(len(bound))
            if failed:
                self.metrics.bindings.labels("failed").inc(len(failed))
        return BindOutcome(gang, tuple(bound), failed)

    async def _write_volumes(self, bindings: Sequence[Binding]) -> dict[PodKey, str]:
        """Write what the gang's volumes still need (each object once, all concurrently); returns
        the pods whose writes failed, and why (empty: every write is in place)."""
        problems: dict[PodKey, str] = {}
        writes: dict[tuple[Kind, str, str], VolumeWrite] = {}
        users: dict[tuple[Kind, str, str], list[PodKey]] = {}
        for b in bindings:
            try:
                needed = volume_writes(b, self.cached or _nothing_cached)
            except VolumeWriteProblem as err:
                problems[b.pod] = f"binding volumes: {err}"
                continue
            for write in needed:
                writes.setdefault(write.target, write)
                users.setdefault(write.target, []).append(b.pod)
        if problems:
            return problems
        ordered = list(writes.values())
        results = await asyncio.gather(*(self._shared_write(w) for w in ordered), return_exceptions=True)
        if any(isinstance(r, NotLeader) for r in results):
            raise NotLeader()
        for write, result in zip(ordered, results, strict=True):
            if isinstance(result, BaseException):
                for pod in users[write.target]:
                    problems.setdefault(pod, f"binding volumes: {write.what} not written: {_why(result)}")
        return problems

    def _plan_claims(self, bindings: Iterable[Binding]) -> None:
        """The DRA claim writes of this call's bindings, gathered per claim (pods of several gangs
        joining one shared claim are appended to its reservedFor in one write)."""
        writes, uses, problems = claim_writes(bindings, self.claim_context, self.cached or _nothing_cached,
                                              self._pod_uid)
        self._claim_writes, self._claim_uses, self._claim_problems = writes, uses, problems

    def _pod_uid(self, key: PodKey) -> str:
        namespace, name = _split(key)
        meta = ((self.cached or _nothing_cached)(Kind.POD, namespace, name) or {}).get("metadata") or {}
        return str(meta.get("uid") or "")

    async def _write_claims(self, bindings: Sequence[Binding]) -> dict[PodKey, str]:
        """Write each claim's allocation and reservedFor the gang's pods need (each claim once per
        call, all concurrently); returns the pods whose writes failed, and why."""
        problems = {b.pod: f"allocating devices: {self._claim_problems[b.pod]}"
                    for b in bindings if b.pod in self._claim_problems}
        if problems:
            return problems
        targets = list(dict.fromkeys(t for b in bindings for t in self._claim_uses.get(b.pod, ())
                                     if t in self._claim_writes))
        results = await asyncio.gather(*(self._shared_claim_write(self._claim_writes[t]) for t in targets),
                                       return_exceptions=True)
        if any(isinstance(r, NotLeader) for r in results):
            raise NotLeader()
        for target, result in zip(targets, results, strict=True):
            if isinstance(result, BaseException):
                write = self._claim_writes[target]
                for b in bindings:
                    if target in self._claim_uses.get(b.pod, ()):
                        problems.setdefault(b.pod, f"allocating devices: {write.what} not written: {_why(result)}")
        return problems

    def _shared_claim_write(self, write: ClaimWrite) -> asyncio.Future[None]:
        call = self._volume_calls.get(write.target)
        if call is None:
            call = self._volume_calls[write.target] = asyncio.ensure_future(self._call(
                "patch resourceclaims/status",
                lambda: self.api.patch_status(Kind.RESOURCE_CLAIM, write.namespace, write.name, write.status)))
        return call

    def _shared_write(self, write: VolumeWrite) -> asyncio.Future[None]:
        """The one write of ``write.target`` in this bind_gangs call (started by its first user)."""
        call = self._volume_calls.get(write.target)
        if call is None:
            call = self._volume_calls[write.target] = asyncio.ensure_future(self._write_volume(write))
        return call

    async def _write_volume(self, write: VolumeWrite) -> None:
        # The patch carries the cached resourceVersion: a 409 means the object changed meanwhile
        # (retrying with the same version cannot help; the next cycle decides with the new state).
        await self._call(f"patch {write.kind.plural}",
                         lambda: self.api.patch(write.kind, write.namespace, write.name, write.patch),
                         retry_conflict=False)

    async def _annotate(self, binding: Binding, pod: Mapping[str, Any] | None) -> dict[str, str]:
        """Write the pod's annotations (patch mode), or return those the Binding is to carry
        (binding mode; an annotation to remove still needs a patch: a Binding only sets)."""
        memory = self.gpu_memory_of(binding.node) if self.gpu_memory_of is not None else None
        patch = desired_annotations(pod, binding, memory)
        if self.stamp is not None:
            patch.update(self.stamp(self.stamps.get(binding.pod, self.clock.now())))
        labels = self.labels_of(binding.pod) if self.labels_of is not None else {}
        if not patch and not labels:
            return {}
        if not labels and self.annotate_via == "binding" and all(v is not None for v in patch.values()):
            return {k: v for k, v in patch.items() if v is not None}
        namespace, name = _split(binding.pod)
        meta: dict[str, Any] = {"annotations": patch} if patch else {}
        if labels:  # a Binding cannot carry labels: they go with the annotations, in one patch
            meta["labels"] = dict(labels)
        await self._call("patch pods", lambda: self.api.patch(Kind.POD, namespace, name, {"metadata": meta}))
        return {}

    async def _post_binding(self, binding: Binding, annotations: Mapping[str, str] | None = None) -> None:
        namespace, name = _split(binding.pod)
        try:
            await self._call("create pods/binding",
                             lambda: self.api.bind(namespace, name, binding.node, annotations or None),
                             retry_conflict=False)
        except ApiError as err:
            if err.status != 409:
                raise
            # Already bound: by an earlier attempt of ours whose answer was lost, or by someone else.
            current = await self._call("get pods", lambda: self.api.get(Kind.POD, namespace, name))
            node = ((current or {}).get("spec") or {}).get("nodeName")
            if node != binding.node:
                raise ApiError(409, "Conflict", f"bound to {node!r} by someone else" if node else err.message) from None
            self._adopt_stamp(binding.pod, current)

    def _adopt_stamp(self, pod: PodKey, current: Mapping[str, Any] | None) -> None:
        """A pod an earlier attempt bound keeps that attempt's bound time: a refused Binding sets no
        annotation (so with ``--annotate-via binding`` the pod still says the first time). The ledger's
        interval is named by the time the pod carries, as the accountant reads it back on every later
        change and after a restart; a time of this attempt would open a second interval of the pod."""
        if self.stamped is None or pod not in self.stamps or current is None:
            return
        carried = self.stamped(current)
        if carried is not None:
            self.stamps[pod] = carried

    # ----------------------------------------------------------------------------- evictions

    async def evict(self, evictions: Sequence[Eviction]) -> list[EvictOutcome]:
        results = await asyncio.gather(*(self._evict(e) for e in evictions), return_exceptions=True)
        outcomes: list[EvictOutcome] = []
        for eviction, result in zip(evictions, results, strict=True):
            if isinstance(result, NotLeader):
                raise result
            if isinstance(result, BaseException):
                outcomes.append(EvictOutcome(eviction.pod, "failed", _why(result)))
            else:
                outcomes.append(result)
            if self.metrics is not None:
                self.metrics.evictions.labels(eviction.reason.value, outcomes[-1].result).inc()
        return outcomes

    async def _evict(self, eviction: Eviction) -> EvictOutcome:
        namespace, name = _split(eviction.pod)
        try:
            # 429 is how a PodDisruptionBudget says no: not retried here (the preemptor waits and
            # the controller asks again later), so it is raised at once.
            await self._call("create pods/eviction", lambda: self._evict_once(namespace, name))
        except ApiError as err:
            if err.status == 404:
                return EvictOutcome(eviction.pod, "gone")
            if err.status == 429:
                return EvictOutcome(eviction.pod, "blocked", err.message or err.reason)
            return EvictOutcome(eviction.pod, "failed", str(err))
        return EvictOutcome(eviction.pod, "evicted")

    async def _evict_once(self, namespace: str, name: str) -> None:
        try:
            await self.api.evict(namespace, name)
        except ApiError as err:
            if err.status == 429:
                raise _Blocked(err) from None
            raise

    def forget(self) -> None:
        self.inflight.clear()


def _nothing_cached(kind: Kind, namespace: str, name: str) -> None:
    """No informers' cache was given: no claim or PV is known."""
    return None


class _Blocked(ApiError):
    """A 429 that must not be retried (a PodDisruptionBudget)."""

    def __init__(self, err: ApiError) -> None:
        super().__init__(429, err.reason, err.message)

    @property
    def retryable(self) -> bool:
        return False


def _why(error: BaseException) -> str:
    if isinstance(error, ApiError):
        return f"{error.status} {error.reason}: {error.message}".strip(": ")
    return f"{type(error).__name__}: {error}"
