"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

A candidate takes the Lease when nobody holds it, or when the holder's record has not changed for
``lease_duration`` seconds *as this candidate observed it* (its own clock measures how long it
has seen the same record, so clock skew between replicas does not matter). Every write goes
through a replace carrying the resourceVersion that was read: of two candidates racing for the
same Lease, one gets 409 Conflict and stays a follower.

The leader renews every ``retry_period``. :meth:`LeaderElector.is_leader` is true only until
``renew_deadline`` after the last successful renewal: with ``renew_deadline < lease_duration``,
a leader that cannot renew stops acting before any other replica can take the Lease over, so two
replicas never bind at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpufleet.kube.client.port import ApiError, Clock, ClusterApi, Kind

if TYPE_CHECKING:  # prometheus-client and the controller's metrics: not for the node agent's import
    from gpufleet.kube.controller.metrics import ControllerMetrics

__all__ = ["LeaderElector", "LeaseConfig", "micro_time"]

log = logging.getLogger(__name__)


def micro_time(seconds: float) -> str:
    """A metav1.MicroTime: RFC 3339 with exactly six fractional digits, in UTC."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs 0 < retry period < renew deadline < lease duration")


class LeaderElector:
    def __init__(
        self,
        api: ClusterApi,
        clock: Clock,
        config: LeaseConfig,
        on_change: Callable[[bool], None] | None = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.api = api
        self.clock = clock
        self.config = config
        self.on_change = on_change
        self.metrics = metrics
        self._leading = False
        self._valid_until = 0.0
        self._observed: tuple[Any, ...] | None = None  # the last record seen (holder, renewTime, ...)
        self._observed_at = 0.0

    def is_leader(self) -> bool:
        """True while this replica may act as the leader (fenced by the renew deadline)."""
        return self._leading and self.clock.now() < self._valid_until

    def _set_leading(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            log.info("%s %s leadership of lease %s/%s", self.config.identity, "acquired" if leading else "lost",
                     self.config.namespace, self.config.name)
            if self.metrics is not None:
                self.metrics.leader.set(1 if leading else 0)
            if self.on_change is not None:
                self.on_change(leading)

    async def run(self) -> None:
        """Acquire, then keep renewing, until cancelled."""
        while True:
            await self.step()
            await self.clock.sleep(self.config.retry_period)

    async def step(self) -> bool:
        """One attempt to acquire or renew; returns whether this replica leads afterwards."""
        started = self.clock.now()
        try:
            renewed = await self._try_acquire_or_renew(started)
        except ApiError as err:
            if self.metrics is not None:
                self.metrics.api_error("lease", err.status)
            log.warning("lease %s/%s: %s", self.config.namespace, self.config.name, err)
            renewed = False
        if renewed:
            self._valid_until = started + self.config.renew_deadline
            self._set_leading(True)
        elif self._leading and self.clock.now() >= self._valid_until:
            self._set_leading(False)
        return self.is_leader()

    def _record(self, spec: dict[str, Any]) -> tuple[Any, ...]:
        return (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("acquireTime"),
                spec.get("leaseTransitions"), spec.get("leaseDurationSeconds"))

    def _spec(self, now: float, previous: dict[str, Any] | None) -> dict[str, Any]:
        mine = previous is not None and previous.get("holderIdentity") == self.config.identity
        transitions = int((previous or {}).get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": round(self.config.lease_duration),
            "acquireTime": (previous or {}).get("acquireTime") if mine else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions if mine or previous is None else transitions + 1,
        }

    async def _try_acquire_or_renew(self, now: float) -> bool:
        cfg = self.config
        lease = await self.api.get(Kind.LEASE, cfg.namespace, cfg.name)
        if lease is None:
            first = self._spec(now, None)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": first,
            }
            try:
                await self.api.create(Kind.LEASE, body)
            except ApiError as err:
                if err.status == 409:  # another candidate created it first
                    return False
                raise
            self._observed, self._observed_at = self._record(first), now
            return True
        raw_spec = lease.get("spec")
        spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
        record = self._record(spec)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration)
        if holder and holder != cfg.identity and now < self._observed_at + duration:
            return False  # held by another replica that renewed within the lease duration
        new_spec = {**spec, **self._spec(now, spec)}
        try:
            await self.api.replace(Kind.LEASE, {**lease, "spec": new_spec})
        except ApiError as err:
            if err.status == 409:  # somebody else wrote the Lease since we read it
                return False
            raise
        self._observed, self._observed_at = self._record(new_spec), now
        return True

    async def release(self) -> None:
        """Give the Lease up (on shutdown) so that another replica need not wait for it to expire."""
        if not self._leading:
            return
        self._set_leading(False)
        cfg = self.config
        try:
            lease = await self.api.get(Kind.LEASE, cfg.namespace, cfg.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != cfg.identity:
                return
            spec = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1,
                    "renewTime": micro_time(self.clock.now())}
            await self.api.replace(Kind.LEASE, {**lease, "spec": spec})
        except ApiError as err:
            log.warning("could not release lease %s/%s: %s", cfg.namespace, cfg.name, err)
