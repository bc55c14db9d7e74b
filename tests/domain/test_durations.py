"""One grammar for every duration (docs/semantics.md, "Durations"): ``domain.units.duration_seconds``
accepts everything the two parsers it replaced accepted (Go-style ``1h30m`` in the CRDs; ``90``, ``2d``
in the simulator and the ``gpufleet.dev/expected-runtime`` annotation), with the same value, and the
CRDs' pattern is the very same grammar."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.units import DURATION_PATTERN, duration_seconds

_GO_PATTERN = r"^([0-9]+(\.[0-9]+)?(h|m|s))+$|^0$"  # the CRDs' grammar before
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _old_go(text: str) -> float | None:
    if not re.fullmatch(_GO_PATTERN, text):
        return None
    return sum(float(n) * {"h": 3600.0, "m": 60.0, "s": 1.0}[u] for n, u in re.findall(r"([0-9.]+)([hms])", text))


def _old_units(text: str) -> float | None:
    s = text.strip().lower()
    scale = _UNITS.get(s[-1:]) if s else None
    try:
        value = float(s[:-1] if scale else s) * (scale or 1.0)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("15m", 900), ("4h", 14400), ("2d", 172800), ("1.5d", 129600), ("0", 0),
    ("168h", 604800), ("1h30m", 5400), ("1h30m15s", 5415), ("1d12h", 129600), (" 4H ", 14400),
    ("1e3", 1000), ("+5m", 300), (".5h", 1800), (90, 90), (1.5, 1.5), (0, 0),
])
def test_every_form_either_old_grammar_knew(text: str | float, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("bad", ["", " ", "abc", "-5", "-1h", "nan", "inf", "5w", "5ms", "10 minutes", "1h-30m",
                                 "h", "1e999h", True, None, [], {}, -1, float("nan"), float("inf")])
def test_malformed_durations_are_refused_with_a_reason(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^must be a (finite )?duration"):
        duration_seconds(bad)


@given(st.text(alphabet="0123456789.hmsdHMSDe+_ x", max_size=10))
def test_nothing_valid_before_is_refused_now_and_values_agree(text: str) -> None:
    for old in (_old_go(text), _old_units(text)):
        if old is not None:
            assert duration_seconds(text) == pytest.approx(old, rel=1e-12)


@given(st.text(alphabet="0123456789.hmsdHMSDe+-_ x", max_size=10))
def test_the_crd_pattern_is_the_parser_grammar(text: str) -> None:
    """What the API server lets through (the pattern) is what the controller can read, and back (a
    value too large to be finite is the one thing only the parser refuses)."""
    matches = re.fullmatch(DURATION_PATTERN, text) is not None
    try:
        duration_seconds(text)
        parsed = True
    except ValueError as e:
        parsed = False
        assert not matches or "finite" in str(e)
    assert matches or not parsed


def test_the_crds_carry_the_pattern() -> None:
    from gpufleet.kube.install.crds import CRD_KINDS, crd

    text = "\n".join(str(crd(kind)) for kind in CRD_KINDS)
    assert text.count(DURATION_PATTERN.replace("\\", "\\\\")) >= 5  # minRuntime, preemptionDelay, halfLife, after, ...
