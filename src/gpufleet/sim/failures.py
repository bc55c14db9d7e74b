"""Node failures and spot reclaims: seeded random models and explicit outage lists.

``--failures`` takes either ``key=value`` pairs (comma separated) or the path of a YAML file of
explicit outages; it may be given several times and the parts add up::

    --failures mtbf=30d,repair=4h              # every node fails on average every 30 days
    --failures spot-rate=0.02,spot-down=10m    # each spot node is reclaimed 0.02 times an hour
    --failures outages.yaml                    # outages: [{node: n1, at: 2h, for: 30m, kind: failure}]
    --failures spot-rate=0.02,spot-notice=2m   # each reclaim is announced 2 minutes ahead: its gangs drain
    --failures spot-notice=30s,grace=60s       # a job needs 60 s to write its checkpoint: 30 s is too short

A spot reclaim with a notice (``spot-notice``, default 0: none) drains its node the way the controller
does (``gpufleet.policy.drain_plan``; docs/semantics-notes.md, "Draining nodes and failed GPUs"): at the
notice the node takes no new job and its gangs are stopped and requeued at their original position; a
job keeps its work up to the notice when its grace period (``grace``, default 30 s) fits in the notice,
else up to its last periodic checkpoint. The node goes at the end of the notice.

Durations are seconds or a number with a unit ``s``, ``m``, ``h`` or ``d``. Random times are
exponential (a Poisson process per node) drawn from a NumPy generator seeded with
``(seed, node index, stream)``, so a node's failures do not depend on the jobs, the policy or the
other nodes: variants of one ``--compare`` see the same outages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpufleet.adapters.errors import InputError, describe
from gpufleet.domain.units import duration_seconds

__all__ = ["FailureModel", "NodeOutage", "OutageKind", "OutageStreams", "parse_duration", "parse_failures"]


class OutageKind(str, Enum):
    FAILURE = "failure"
    SPOT = "spot"


@dataclass(frozen=True, slots=True)
class NodeOutage:
    node: str
    at_s: float
    for_s: float
    kind: OutageKind = OutageKind.FAILURE


@dataclass(frozen=True, slots=True)
class FailureModel:
    mtbf_s: float | None = None  # mean time between failures of one node; None: no random failures
    repair_s: float = 4 * 3600.0
    spot_rate_per_hour: float | None = None  # reclaims per hour of one spot node; None: none
    spot_down_s: float = 600.0  # until a replacement spot node is back
    spot_notice_s: float = 0.0  # a reclaim's notice before the node goes; 0: none (the node goes at once)
    grace_s: float = 30.0  # a drained job's grace period: it checkpoints on SIGTERM when this fits the notice
    outages: tuple[NodeOutage, ...] = ()

    @property
    def empty(self) -> bool:
        return self.mtbf_s is None and self.spot_rate_per_hour is None and not self.outages


def parse_duration(text: object, where: str) -> float:
    """Seconds from a duration (``domain.units.duration_seconds``: ``90``, ``90s``, ``15m``, ``1h30m``,
    ``30d``); raises InputError naming ``where``."""
    try:
        return duration_seconds(text)
    except ValueError as e:
        raise InputError(f"{where}: {e}, got {describe(text)}") from None


class _Outage(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    node: str
    at: float | str
    for_: float | str = Field(alias="for")
    kind: OutageKind = OutageKind.FAILURE

    @field_validator("node")
    @classmethod
    def _node(cls, v: str) -> str:
        if not v:
            raise ValueError("must not be empty")
        return v


class _OutageFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    outages: list[_Outage]


def _load_outages(path: str) -> tuple[NodeOutage, ...]:
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"--failures {path}: cannot read: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: malformed YAML: {str(err).splitlines()[0]}") from None
    try:
        spec = _OutageFile.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise InputError(f"{path}: {where}: {first['msg']}") from None
    out = []
    for i, o in enumerate(spec.outages):
        at = parse_duration(o.at, f"{path}: outages.{i}.at")
        dur = parse_duration(o.for_, f"{path}: outages.{i}.for")
        out.append(NodeOutage(o.node, at, dur, o.kind))
    return tuple(out)


_KEYS = {"mtbf", "repair", "spot-rate", "spot-down", "spot-notice", "grace"}


def parse_failures(values: Sequence[str]) -> FailureModel:
    """A model from ``--failures`` values (key=value lists or outage files)."""
    fields: dict[str, float] = {}
    outages: list[NodeOutage] = []
    for value in values:
        if "=" not in value:
            outages.extend(_load_outages(value))
            continue
        for part in value.split(","):
            key, sep, raw = part.strip().partition("=")
            if not sep or key not in _KEYS:
                raise InputError(
                    f"--failures: unknown setting {part.strip()!r} (expected {', '.join(sorted(_KEYS))}, or a file)"
                )
            if key == "spot-rate":
                try:
                    rate = float(raw)
                except ValueError:
                    raise InputError(f"--failures: spot-rate: {raw!r} is not a number (reclaims per hour)") from None
                if not math.isfinite(rate) or rate < 0:
                    raise InputError(f"--failures: spot-rate: must be >= 0, got {raw!r}")
                fields[key] = rate
            else:
                fields[key] = parse_duration(raw, f"--failures: {key}")
    if fields.get("mtbf") == 0:
        raise InputError("--failures: mtbf: must be more than 0")
    base = FailureModel()
    return FailureModel(
        mtbf_s=fields.get("mtbf"),
        repair_s=fields.get("repair", base.repair_s),
        spot_rate_per_hour=fields.get("spot-rate") or None,
        spot_down_s=fields.get("spot-down", base.spot_down_s),
        spot_notice_s=fields.get("spot-notice", base.spot_notice_s),
        grace_s=fields.get("grace", base.grace_s),
        outages=tuple(sorted(outages, key=lambda o: (o.at_s, o.node))),
    )


class OutageStreams:
    """Per-node seeded random streams for the failure and spot models."""

    FAILURE_STREAM = 0
    SPOT_STREAM = 1

    def __init__(self, seed: int) -> None:
        self._rngs: dict[tuple[int, int], np.random.Generator] = {}
        self.seed = seed

    def _rng(self, node: int, stream: int) -> np.random.Generator:
        key = (node, stream)
        rng = self._rngs.get(key)
        if rng is None:
            rng = self._rngs[key] = np.random.default_rng([self.seed, node, stream])
        return rng

    def next_gap(self, node: int, stream: int, mean_s: float) -> float:
        """Seconds until the node's next random outage of ``stream`` (exponential with mean ``mean_s``)."""
        return float(self._rng(node, stream).exponential(mean_s))
