"""Kubernetes quantities ("8", "500m", "80Gi") as integer milli-units."""

from __future__ import annotations

import decimal
import re

from lightkube.utils.quantity import parse_quantity

from gpufleet.adapters.errors import describe

__all__ = ["MAX_MILLI", "QuantityError", "to_milli"]

# Quantities are kept in int64 NumPy arrays by the engine: leave room for sums (2**62 milli is
# about 4.6e15 units, i.e. 4 PiB of memory).
MAX_MILLI = 2**62

# lightkube matches a prefix and looks the rest up as a suffix; it never sees whitespace or control
# characters, which its regular expression would otherwise silently cut at.
_ALLOWED = re.compile(r"[0-9A-Za-z.+-]+")

_cache: dict[str, int] = {}


class QuantityError(ValueError):
    """A malformed, negative or oversized quantity; ``str()`` is a short message."""


def _parse(text: str) -> int:
    if not _ALLOWED.fullmatch(text):
        raise QuantityError(f"malformed quantity {describe(text)}")
    # Kubernetes reads "+.5" as "+0.5"; lightkube's expression misses a sign before the point.
    number = text[0] + "0" + text[1:] if text[:2] in ("+.", "-.") and text[2:3].isdigit() else text
    try:
        value = parse_quantity(number)
    except (ValueError, ArithmeticError) as err:
        # lightkube says "Invalid numerical value" when the exact milli value exceeds the
        # decimal context (the regular expression has already accepted the number).
        if "numerical" in str(err) and not text.startswith("-"):
            raise QuantityError(f"quantity too large {describe(text)}") from err
        if "numerical" in str(err):
            raise QuantityError(f"negative quantity {describe(text)}") from err
        raise QuantityError(f"malformed quantity {describe(text)}") from err
    if value is None or not value.is_finite():
        raise QuantityError(f"malformed quantity {describe(text)}")
    if value < 0:
        raise QuantityError(f"negative quantity {describe(text)}")
    try:
        # lightkube has already rounded up to the milli (ROUND_UP); this is exact.
        milli = int((value * 1000).to_integral_value(rounding=decimal.ROUND_CEILING))
    except (ValueError, ArithmeticError) as err:
        raise QuantityError(f"malformed quantity {describe(text)}") from err
    if milli > MAX_MILLI:
        raise QuantityError(f"quantity too large {describe(text)}")
    return milli


def to_milli(value: object) -> int:
    """A quantity (string, or a YAML int/float) in milli-units of its resource, rounded up.

    Raises :class:`QuantityError` for anything malformed, negative or too large.
    """
    if isinstance(value, str):
        text = value
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, float):
        text = repr(value)
    else:
        raise QuantityError(f'must be a quantity such as "8", "500m" or "80Gi", got {describe(value)}')
    cached = _cache.get(text)
    if cached is not None:
        return cached
    milli = _parse(text)
    if len(_cache) < 65536:
        _cache[text] = milli
    return milli
