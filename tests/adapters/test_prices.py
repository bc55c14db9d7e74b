"""The prices file of ``gpufleet report usage --prices``: rates per model and capacity type, and bad files as
one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.prices import GpuRates, load_prices_file, load_prices_text


def test_rates_default_to_on_demand_and_unknown_models_to_the_default() -> None:
    prices = load_prices_text("currency: USD\ngpus:\n  H100: {onDemand: 4, spot: 1.5}\ndefault: {onDemand: 3, "
                              "reserved: 2}\ncpuPerCoreHour: 0.03\nmemoryPerGiBHour: 0.004\n")
    assert prices.gpus["H100"] == GpuRates(on_demand=4.0, spot=1.5, reserved=4.0)
    assert prices.gpu_rates("H100").rate("spot") == 1.5
    assert prices.gpu_rates("B200") == prices.gpu_rates(None) == GpuRates(3.0, 3.0, 2.0)
    assert prices.gpu_rates("B200").rate(None) == 3.0
    assert (prices.currency, prices.cpu_per_core_hour, prices.memory_per_gib_hour) == ("USD", 0.03, 0.004)


@pytest.mark.parametrize(("text", "message"), [
    ("currency: USD\n", "p.yaml: default: required field missing"),
    ("default: {onDemand: 1}\n", "p.yaml: currency: required field missing"),
    ("currency: USD\ndefault: {onDemand: -1}\n", "p.yaml: default.onDemand: must be >= 0, got -1"),
    ("currency: USD\ndefault: {onDemand: 1}\ngpus: {H100: {spot: 1}}\n", "p.yaml: gpus.H100.onDemand: required"),
    ("currency: USD\ndefault: {onDemand: 1, od: 2}\n", "p.yaml: default.od: unknown field"),
    ("currency: USD\ndefault: {onDemand: .nan}\n", "p.yaml: default.onDemand: must be a finite number"),
    ("currency: USD\ndefault: {onDemand: '1'}\n", "p.yaml: default.onDemand: must be a number"),
    ("currency: USD\ndefault: {onDemand: 1}\ncpuPerCoreHour: x\n", "p.yaml: cpuPerCoreHour: must be a number"),
    ("currency: USD\ndefault: {onDemand: 1}\nextra: 1\n", "p.yaml: extra: unknown field"),
    ("- 1\n", "p.yaml: expected a mapping"),
    ("a: [\n", "p.yaml: line 2: malformed YAML"),
    ("", "p.yaml: expected one prices document, got 0"),
])
def test_bad_price_files(text: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        load_prices_text(text, "p.yaml")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.yaml: cannot read: No such file or directory"):
        load_prices_file(tmp_path / "nope.yaml")
