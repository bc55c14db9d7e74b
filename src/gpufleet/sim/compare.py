"""Run settings, and ``--compare`` variants of them.

A variant is a list of ``key=value`` settings that override the command's own options::

    --compare placement=binpack --compare placement=spread
    --compare "placement=binpack,placement=spread"      # a key set twice starts a new variant
    --compare "queues=a.yaml;queues=b.yaml,checkpoint=10m"   # ';' separates variants too

Keys: ``placement``, ``config``, ``queues``, ``queue-by``, ``queue-map``, ``cycle-interval``,
``cycle-mode``, ``checkpoint``, ``seed``. A variant's label is its settings as written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.adapters.errors import InputError
from gpufleet.domain import Placement
from gpufleet.sim.failures import parse_duration
from gpufleet.sim.queue_mapping import QueueBy
from gpufleet.sim.timeline import CycleMode

__all__ = ["COMPARE_KEYS", "RunSettings", "Variant", "apply_variant", "parse_compare"]

COMPARE_KEYS = (
    "placement", "config", "queues", "queue-by", "queue-map", "cycle-interval", "cycle-mode", "checkpoint", "seed",
)


@dataclass(frozen=True, slots=True)
class RunSettings:
    """Everything that may differ between the runs of one command."""

    placement: Placement | None = None  # None: the config's
    config_file: str | None = None
    queues_file: str | None = None
    queue_by: QueueBy | None = None  # None: the map file's, else vc when the trace has VCs, else none
    queue_map_file: str | None = None
    cycle_interval_s: float = 60.0
    cycle_mode: CycleMode = CycleMode.EVENTS
    checkpoint_s: float = 1800.0
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Variant:
    label: str
    settings: tuple[tuple[str, str], ...]


def parse_compare(values: Sequence[str]) -> list[Variant]:
    """Variants from the ``--compare`` values (each checked: unknown keys are errors)."""
    variants: list[Variant] = []
    for value in values:
        for chunk in value.split(";"):
            current: list[tuple[str, str]] = []
            for item in (part.strip() for part in chunk.split(",")):
                if not item:
                    continue
                key, sep, raw = item.partition("=")
                key = key.strip()
                if not sep or key not in COMPARE_KEYS:
                    keys = ", ".join(COMPARE_KEYS)
                    raise InputError(f"--compare: {item!r}: expected key=value with key one of {keys}")
                if any(k == key for k, _ in current):
                    variants.append(_variant(current))
                    current = []
                current.append((key, raw.strip()))
            if current:
                variants.append(_variant(current))
    labels = [v.label for v in variants]
    for label in labels:
        if labels.count(label) > 1:
            raise InputError(f"--compare: variant {label!r} is given twice")
    return variants


def _variant(settings: list[tuple[str, str]]) -> Variant:
    variant = Variant(",".join(f"{k}={v}" for k, v in settings), tuple(settings))
    apply_variant(RunSettings(), variant)  # fail early on bad values
    return variant


def apply_variant(base: RunSettings, variant: Variant) -> RunSettings:
    """``base`` with the variant's settings applied; InputError for a bad value."""
    changes: dict[str, object] = {}
    for key, raw in variant.settings:
        where = f"--compare {variant.label}: {key}"
        if key == "placement":
            try:
                changes["placement"] = Placement(raw)
            except ValueError:
                options = ", ".join(p.value for p in Placement)
                raise InputError(f"{where}: unknown placement {raw!r} (expected {options})") from None
        elif key == "config":
            changes["config_file"] = raw
        elif key == "queues":
            changes["queues_file"] = raw
        elif key == "queue-map":
            changes["queue_map_file"] = raw
        elif key == "queue-by":
            try:
                changes["queue_by"] = QueueBy(raw)
            except ValueError:
                raise InputError(f"{where}: expected one of {', '.join(q.value for q in QueueBy)}") from None
        elif key == "cycle-interval":
            changes["cycle_interval_s"] = parse_duration(raw, where)
        elif key == "cycle-mode":
            try:
                changes["cycle_mode"] = CycleMode(raw)
            except ValueError:
                raise InputError(f"{where}: expected one of {', '.join(m.value for m in CycleMode)}") from None
        elif key == "checkpoint":
            changes["checkpoint_s"] = parse_duration(raw, where)
        else:  # seed
            if not raw.isdigit():
                raise InputError(f"{where}: expected an integer >= 0, got {raw!r}")
            changes["seed"] = int(raw)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
