"""The node agent's loop: poll the GPUs, step the health rules, keep the Node true.

Each poll (``interval_s``, 1 s by default, on the injected clock):

1. without a reader (NVML missing or failing), try to open one, backing off after failures
   (:class:`~gpufleet.domain.retry.Backoff`); meanwhile the condition says Unknown and why, the
   unhealthy GPUs already on the Node stay there, and the process keeps running;
2. read every GPU's health and the Xid events since the last poll, step the health rules
   (:func:`gpufleet.agent.health.step`) with the operator's uncordon request (the Node's
   ``gpufleet.dev/gpu-uncordon`` annotation);
3. every ``discovery_s``, read the GPUs and, when they changed, describe them again
   (:func:`gpufleet.agent.discovery.node_gpu_metadata`);
4. write the Node when (and only when) what it should say differs from what it says: labels,
   annotations, the ``GPUHealthy`` condition; then an Event per health change and per notice;
5. feed the agent's metrics and the usage export.

The Node is read at start (the rules' state is restored from its ``gpufleet.dev/gpu-health``
annotation, so a restarted agent keeps each GPU's history) and every ``node_sync_s`` (the uncordon
request, keys someone else changed), not every poll.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.agent import discovery, health
from gpufleet.agent.gpus import GpuInfo, GpuReader, GpuReaderError
from gpufleet.agent.health import GpuHealth, GpuNotice, HealthChange, HealthPolicy, HealthState
from gpufleet.agent.service.metrics import AgentMetrics
from gpufleet.agent.service.node_writes import DesiredNode, NodeWriter
from gpufleet.agent.service.ports import UsageSink
from gpufleet.domain import ANNOTATION_UNHEALTHY_GPUS
from gpufleet.domain.retry import Backoff
from gpufleet.kube import ApiError, Clock

__all__ = ["AgentLoop", "AgentSettings", "PodsSource", "change_event", "print_write"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    node: str
    interval_s: float = 1.0
    discovery_s: float = 30.0  # how often the GPUs' inventory is read again (MIG, NVLink changes)
    node_sync_s: float = 10.0  # how often the Node is read again (the operator's uncordon)
    policy: HealthPolicy = field(default_factory=HealthPolicy)
    feature_labels: bool = True  # False where NVIDIA's GPU feature discovery writes the nvidia.com/gpu.* labels
    open_backoff: Backoff = field(default_factory=lambda: Backoff(initial_s=1.0, maximum_s=300.0))

    def __post_init__(self) -> None:
        if not self.node:
            raise ValueError("the node's name must not be empty")
        if self.interval_s <= 0:
            raise ValueError(f"the poll interval must be positive, got {self.interval_s}")


PodsSource = Callable[[], Sequence[Mapping[str, Any]]]

# The Event of a health change: (reason, Warning?) by the state the GPU entered.
_CHANGE_EVENTS = {HealthState.UNHEALTHY: ("GPUUnhealthy", True), HealthState.HEALTHY: ("GPUHealthy", False),
                  HealthState.UNKNOWN: ("GPUHealthUnknown", True)}
NOTICE_REASON = "GPUNotice"
HISTORY_LOST_REASON = "GPUHealthHistoryUnreadable"
# The same notice (an application's Xid 13 at every poll of a crash-looping pod) is told once per
# this many seconds: the Node's Events must not become a log of every fault.
NOTICE_REPEAT_S = 300.0


def change_event(change: HealthChange) -> tuple[str, str, bool]:
    """A health change as a Node Event: (reason, note, warning)."""
    reason, warning = _CHANGE_EVENTS[change.current]
    return reason, f"GPU {change.index} ({change.uuid or 'no UUID'}) is {change.current.value.lower()}: " \
        f"{change.reason}", warning


def _notice_event(notice: GpuNotice) -> tuple[str, str, bool]:
    return NOTICE_REASON, f"GPU {notice.index} ({notice.uuid or 'no UUID'}): {notice.message}", False


def _problem(err: Exception) -> str:
    return str(err) if isinstance(err, GpuReaderError) else f"{type(err).__name__}: {err}"


def _meta_map(node: Mapping[str, Any] | None, part: str) -> Mapping[str, Any]:
    meta = (node or {}).get("metadata")
    got = meta.get(part) if isinstance(meta, Mapping) else None
    return got if isinstance(got, Mapping) else {}


class AgentLoop:
    def __init__(self, settings: AgentSettings, open_reader: Callable[[], GpuReader], writer: NodeWriter,
                 clock: Clock, metrics: AgentMetrics | None = None, usage: UsageSink | None = None,
                 pods: PodsSource = tuple) -> None:
        self.settings = settings
        self.open_reader = open_reader
        self.writer = writer
        self.clock = clock
        self.metrics = metrics if metrics is not None else AgentMetrics()
        self.usage = usage
        self.pods = pods
        self.reader: GpuReader | None = None
        self.reader_problem: str | None = None  # why there is no reader (the condition's message)
        self._open_failures = 0
        self._next_open = 0.0
        self.state: dict[int, GpuHealth] | None = None  # None until the Node was read (the history restored)
        self._gpus: tuple[GpuInfo, ...] | None = None
        self._metadata: discovery.NodeGpuMetadata | None = None  # None: never read, leave the keys alone
        self._next_discovery = 0.0
        self._next_node_read = 0.0
        self._unhealthy: frozenset[int] | None = None  # None: leave the Node's annotation as it is
        self._told: dict[str, float] = {}  # a notice's note -> when it was last told
        self.polls = 0

    # ------------------------------------------------------------------------------ the reader

    def _ensure_reader(self, now: float) -> GpuReader | None:
        if self.reader is not None or now < self._next_open:
            return self.reader
        try:
            self.reader = self.open_reader()
        except Exception as err:  # a missing or broken library: never a crash loop
            self._reader_failed(_problem(err), now)
            return None
        if self._open_failures:
            log.info("the GPUs can be read again")
        self._open_failures = 0
        self.reader_problem = None
        self._next_discovery = now
        return self.reader

    def _reader_failed(self, problem: str, now: float) -> None:
        if problem != self.reader_problem:  # one line per new problem, not one per retry
            log.error("cannot read the GPUs: %s (GPUHealthy is Unknown; trying again)", problem)
        self.reader_problem = problem
        self._open_failures += 1
        self._next_open = now + self.settings.open_backoff.delay(self._open_failures)
        self.metrics.unreadable()
        if self.usage is not None:
            self.usage.clear(now)
        if self.reader is not None:
            reader, self.reader = self.reader, None
            try:
                reader.close()
            except Exception as err:  # a failing library's close must not stop the agent
                log.debug("closing the GPU reader failed: %s", err)

    # ------------------------------------------------------------------------------ one poll

    async def _restore(self, text: Any) -> dict[int, GpuHealth]:
        loaded = health.load_health(text if isinstance(text, str) else None)
        if loaded.error is not None:
            log.warning("node %s: %s", self.settings.node, loaded.error)
            await self.writer.event(HISTORY_LOST_REASON, loaded.error, True)
        return dict(loaded.gpus)

    async def poll(self) -> None:
        """One poll; never raises but for cancellation (each failure is logged, retried next poll)."""
        self.polls += 1
        now = self.clock.now()
        try:
            if self.state is None or now >= self._next_node_read:
                node = await self.writer.read()
                self._next_node_read = now + self.settings.node_sync_s
                if node is None:
                    log.warning("node %s does not exist (yet)", self.settings.node)
                    return
                if self.state is None:
                    self.state = await self._restore(_meta_map(node, "annotations").get(health.ANNOTATION_GPU_HEALTH))
        except ApiError as err:
            log.warning("cannot read node %s: %s", self.settings.node, err)
            return
        assert self.state is not None
        events: list[tuple[str, str, bool]] = []
        consumed: dict[str, str] = {}
        reader = self._ensure_reader(now)
        if reader is not None:
            gpus = None
            try:
                if now >= self._next_discovery:
                    self._next_discovery = now + self.settings.discovery_s
                    gpus = reader.read()
                readings = reader.health()
                xids = reader.xid_events()
            except Exception as err:  # a broken library's answer: the GPUs' health is unknown
                self._reader_failed(_problem(err), now)
            else:
                if gpus is not None and gpus != self._gpus:
                    self._metadata = discovery.node_gpu_metadata(gpus, feature_labels=self.settings.feature_labels)
                    self._gpus = gpus
                uncordoned = self._uncordon_request(consumed)
                stepped = health.step(self.state, readings, xids, uncordoned, now, self.settings.policy)
                self.state = {gpu.index: gpu for gpu in stepped.gpus}
                self._unhealthy = health.unhealthy_indices(stepped.gpus)
                self.metrics.observe(xids, readings, stepped.gpus)
                events = [*map(change_event, stepped.changes), *self._new_notices(stepped.notices, now)]
        desired = self._desired()
        if self.writer.pending(desired, consumed):
            try:
                await self.writer.apply(desired, consumed)
            except ApiError as err:
                log.warning("cannot write node %s (again next poll): %s", self.settings.node, err)
                self._next_node_read = now  # read it again before the next try
        for reason, note, warning in events:
            log.log(logging.WARNING if warning else logging.INFO, "%s: %s", reason, note)
            await self.writer.event(reason, note, warning)
        if reader is not None and self.reader is not None and self.usage is not None:
            self._feed_usage(reader, now)

    def _new_notices(self, notices: Sequence[GpuNotice], now: float) -> list[tuple[str, str, bool]]:
        self._told = {note: at for note, at in self._told.items() if now - at < NOTICE_REPEAT_S}
        out = []
        for reason, note, warning in dict.fromkeys(map(_notice_event, notices)):  # a burst: told once
            if note not in self._told:
                self._told[note] = now
                out.append((reason, note, warning))
        return out

    def _uncordon_request(self, consumed: dict[str, str]) -> frozenset[int]:
        text = _meta_map(self.writer.node, "annotations").get(health.ANNOTATION_GPU_UNCORDON)
        if not isinstance(text, str):
            return frozenset()
        consumed[health.ANNOTATION_GPU_UNCORDON] = text  # removed once written, whether it was readable or not
        try:
            indices = health.parse_uncordon(text)
        except ValueError as err:
            log.warning("node %s: ignoring the uncordon request: %s", self.settings.node, err)
            return frozenset()
        log.info("node %s: the operator uncordons GPUs %s", self.settings.node, health.format_gpu_indices(indices))
        return indices

    def _desired(self) -> DesiredNode:
        labels: dict[str, str | None] = {}
        annotations: dict[str, str | None] = {}
        if self._metadata is not None:  # discovery's keys set, and those it owns but no longer wants removed
            patch = discovery.metadata_patch(self._metadata, _meta_map(self.writer.node, "labels"),
                                             _meta_map(self.writer.node, "annotations"),
                                             feature_labels=self.settings.feature_labels)
            labels = {**self._metadata.labels, **patch.labels}
            annotations = {**self._metadata.annotations, **patch.annotations}
        if self._unhealthy is not None:
            annotations[ANNOTATION_UNHEALTHY_GPUS] = health.format_gpu_indices(self._unhealthy) or None
        if self.state is not None and self.reader is not None:
            annotations[health.ANNOTATION_GPU_HEALTH] = health.dump_health(self.state.values())
        state = self.state.values() if self.state is not None else ()
        condition = health.node_condition(state, self.reader_problem if self.reader is None else None)
        return DesiredNode(labels=labels, annotations=annotations, condition=condition)

    def _feed_usage(self, reader: GpuReader, now: float) -> None:
        assert self.usage is not None
        try:
            gpus, processes = reader.utilisation()
        except Exception as err:  # the usage is best effort; health is what matters
            log.debug("no utilisation this poll: %s", err)
            self.usage.clear(now)
            return
        self.usage.update(gpus, processes, self._gpus or (), self.pods(), now)

    # ------------------------------------------------------------------------------ running

    async def run(self) -> None:
        """Poll until cancelled; closes the reader."""
        try:
            while True:
                started = self.clock.now()
                try:
                    await self.poll()
                except Exception:  # a bug must not become a crash loop on every GPU node: logged, next poll
                    log.exception("the poll failed; polling again in %g s", self.settings.interval_s)
                await self.clock.sleep(self.settings.interval_s - (self.clock.now() - started))
        finally:
            if self.reader is not None:
                self.reader.close()
                self.reader = None


async def print_write(what: str, body: Mapping[str, Any]) -> None:
    """The dry run's echo: what would be written, one JSON line each."""
    print(f"{what}: {json.dumps(body, sort_keys=True)}", flush=True)
    await asyncio.sleep(0)
