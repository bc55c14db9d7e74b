"""A prices file (YAML) for the usage reports: what a GPU-hour, a core-hour and a GiB-hour cost.

::

    currency: USD
    gpus:                          # per GPU model (the node's nvidia.com/gpu.product), per GPU-hour
      H100-80GB: {onDemand: 4.10, spot: 1.60, reserved: 2.70}
      A100-80GB: {onDemand: 2.20}  # spot and reserved default to the onDemand rate
    default: {onDemand: 3.00}      # a model not listed above, or not known
    cpuPerCoreHour: 0.031
    memoryPerGiBHour: 0.004

Every field is checked (unknown fields are refused) and every problem is one :class:`InputError` line
naming the file and the field: ``prices.yaml: gpus.H100-80GB.spot: must be >= 0, got -1``. A fractional
pod pays pro rata: the ledger already counts B blocks as B/100 GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from gpufleet.adapters._documents import one_document
from gpufleet.adapters.k8s_yaml import _read_text

__all__ = ["GpuRates", "PriceList", "load_prices_file", "load_prices_text"]

Rate = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]


@dataclass(frozen=True, slots=True)
class GpuRates:
    """What one GPU-hour costs on on-demand, spot and reserved capacity."""

    on_demand: float
    spot: float
    reserved: float

    def rate(self, capacity_type: str | None) -> float:
        """The rate of ``capacity_type`` (``on-demand``, ``spot``, ``reserved``; None is on-demand)."""
        if capacity_type == "spot":
            return self.spot
        if capacity_type == "reserved":
            return self.reserved
        return self.on_demand


@dataclass(frozen=True, slots=True)
class PriceList:
    """Rates per hour: per GPU model (``gpus``; ``default`` for any other model), per CPU core and per GiB."""

    currency: str
    default: GpuRates
    gpus: Mapping[str, GpuRates] = field(default_factory=lambda: MappingProxyType({}))
    cpu_per_core_hour: float = 0.0
    memory_per_gib_hour: float = 0.0

    def gpu_rates(self, model: str | None) -> GpuRates:
        return self.default if model is None else self.gpus.get(model, self.default)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class _Rates(_Model):
    onDemand: Rate  # the file spells it so
    spot: Rate | None = None
    reserved: Rate | None = None

    def rates(self) -> GpuRates:
        return GpuRates(
            on_demand=self.onDemand,
            spot=self.onDemand if self.spot is None else self.spot,
            reserved=self.onDemand if self.reserved is None else self.reserved,
        )


class _PricesFile(_Model):
    currency: Annotated[StrictStr, Field(min_length=1, max_length=16)]
    default: _Rates
    gpus: dict[Annotated[StrictStr, Field(min_length=1)], _Rates] = Field(default_factory=dict)
    cpuPerCoreHour: Rate = 0.0
    memoryPerGiBHour: Rate = 0.0


def load_prices_text(text: str, source: str = "<prices>") -> PriceList:
    """The price list of one YAML document; :class:`InputError` naming ``source`` and the field."""
    doc = one_document(text, source, _PricesFile, "prices", "a mapping (currency, default, gpus, ...)")
    return PriceList(
        currency=doc.currency,
        default=doc.default.rates(),
        gpus=MappingProxyType({model: rates.rates() for model, rates in doc.gpus.items()}),
        cpu_per_core_hour=doc.cpuPerCoreHour,
        memory_per_gib_hour=doc.memoryPerGiBHour,
    )


def load_prices_file(path: str | Path) -> PriceList:
    """:func:`load_prices_text` of a file; a file that cannot be read is one :class:`InputError` line."""
    return load_prices_text(_read_text(path), str(path))
