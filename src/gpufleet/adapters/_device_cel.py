"""DRA device selectors (CEL) evaluated with cel-python: the one place that imports ``celpy``.

Kubernetes evaluates a selector against one device at a time, with the variable ``device``:
``device.driver``, ``device.attributes[<domain>].<name>`` and ``device.capacity[<domain>].<name>``.
Evaluating CEL in Python costs about a millisecond, and a cluster has tens of thousands of devices
that differ mostly in attributes no selector reads (uuid, pcieBusID). So each expression's result is
remembered per value of the device fields it mentions (found by a pattern over its text; an
expression that reaches ``device`` any other way is remembered per whole device).

Kubernetes' extension functions that NVIDIA's examples use are provided: ``quantity(s)`` with
``compareTo``, ``isGreaterThan``, ``isLessThan``, ``asInteger`` (quantities as integer milli-units),
``semver(s)`` with ``compareTo`` (versions as major/minor/patch, pre-release ignored; a version
attribute, kept as its string, is read as a version when compared with one) and
``lowerAscii``/``upperAscii``. A device for which an expression fails to evaluate (an attribute it
lacks) does not match, as in Kubernetes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes
from celpy.celparser import CELParseError

from gpufleet.adapters.quantity import QuantityError, to_milli
from gpufleet.domain import AttributeValue, Device

__all__ = ["Selector", "SelectorError", "device_key"]

# device.attributes['gpu.nvidia.com'].productName / device.capacity["gpu.nvidia.com"].memory
_REF = re.compile(
    r"""device\s*\.\s*(attributes|capacity)\s*\[\s*(['"])([^'"]+)\2\s*\]\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)"""
)
_DRIVER = re.compile(r"device\s*\.\s*driver\b")
_SEMVER = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[-+].*)?")
_VERSION_BASE = 1 << 20  # each of major, minor, patch below 2**20

DeviceKey = tuple[object, ...]


class SelectorError(ValueError):
    """An expression gpufleet cannot compile; ``str()`` is a short message."""


def _semver_value(text: str) -> int:
    m = _SEMVER.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a version: {text!r}")
    major, minor, patch = (int(g) if g else 0 for g in m.groups()[:3])
    return (major * _VERSION_BASE + minor) * _VERSION_BASE + patch


def _quantity(text: Any) -> celtypes.IntType:
    try:
        return celtypes.IntType(to_milli(str(text)))
    except QuantityError as err:
        raise ValueError(str(err)) from err


class _Version(celtypes.IntType):
    """A ``semver()`` value. Version attributes reach CEL as strings (the snapshot keeps them so);
    comparing one with a _Version reads the string as a version."""


def _comparable(a: Any, b: Any) -> tuple[Any, Any]:
    if isinstance(a, _Version) and isinstance(b, str):
        return a, _semver_value(b)
    if isinstance(b, _Version) and isinstance(a, str):
        return _semver_value(a), b
    return a, b


def _compare(a: Any, b: Any) -> celtypes.IntType:
    a, b = _comparable(a, b)
    return celtypes.IntType((a > b) - (a < b))


def _greater(a: Any, b: Any) -> celtypes.BoolType:
    a, b = _comparable(a, b)
    return celtypes.BoolType(a > b)


def _less(a: Any, b: Any) -> celtypes.BoolType:
    a, b = _comparable(a, b)
    return celtypes.BoolType(a < b)


_FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "compareTo": _compare,
    "isGreaterThan": _greater,
    "isLessThan": _less,
    "asInteger": lambda a: celtypes.IntType(int(a) // 1000),
    "semver": lambda s: _Version(_semver_value(str(s))),
    "isSemver": lambda s: celtypes.BoolType(_SEMVER.fullmatch(str(s).strip()) is not None),
    "lowerAscii": lambda s: celtypes.StringType(str(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(str(s).upper()),
}


def _attribute(value: AttributeValue) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    return celtypes.StringType(value)


def _split(qualified: str) -> tuple[str, str]:
    domain, _, name = qualified.rpartition("/")
    return domain, name


def device_key(driver: str, device: Device) -> DeviceKey:
    """Everything an expression can read of a device (the memo key of expressions that read it all)."""
    return (driver, tuple(sorted(device.attributes.items())), tuple(sorted(device.capacity.items())))


@dataclass
class Selector:
    """One compiled CEL selector, remembering its result per value of what it reads."""

    expression: str

    def __post_init__(self) -> None:
        env = celpy.Environment()
        try:
            ast = env.compile(self.expression)
        except CELParseError as err:
            raise SelectorError(" ".join(str(err).split())) from err
        self._program = env.program(ast, functions=_FUNCTIONS)
        refs = _REF.findall(self.expression)
        rest = _DRIVER.sub("", _REF.sub("", self.expression))
        self._whole = "device" in rest
        self._refs: tuple[tuple[str, str], ...] = tuple(
            sorted({(kind, f"{domain}/{name}") for kind, _q, domain, name in refs})
        )
        self._memo: dict[DeviceKey, bool | str] = {}
        self._key = self._keyer()

    def _keyer(self) -> Callable[[str, Device], DeviceKey]:
        """The memo key of a device: the values of what the expression reads (tens of thousands of
        devices per call, so the common one-attribute form gets its own small function)."""
        if self._whole:
            return device_key
        attributes = tuple(name for kind, name in self._refs if kind == "attributes")
        capacity = tuple(name for kind, name in self._refs if kind == "capacity")
        if len(attributes) == 1 and not capacity:
            (only,) = attributes
            return lambda driver, device: (driver, device.attributes.get(only))
        return lambda driver, device: (
            driver, *[device.attributes.get(n) for n in attributes], *[device.capacity.get(n) for n in capacity]
        )

    def reads_only_type(self, driver: str) -> bool:
        """Whether the expression reads of a device of ``driver`` nothing but ``device.driver`` and
        its ``type`` attribute (as device classes do): then it says the same of every GPU device
        of that driver."""
        return not self._whole and all(ref == ("attributes", f"{driver}/type") for ref in self._refs)

    def evaluate_all(self, devices: Iterable[tuple[str, Device]]) -> list[bool | str]:
        """``evaluate`` for each (driver, device), in one call (a node's devices at a time)."""
        key, memo = self._key, self._memo
        out: list[bool | str] = []
        for driver, device in devices:
            k = key(driver, device)
            got = memo.get(k)
            if got is None:
                got = self._evaluate(driver, device)
                memo[k] = got
            out.append(got)
        return out

    def evaluate(self, driver: str, device: Device) -> bool | str:
        """True or False, or the error text when it cannot be evaluated on this device (no match)."""
        key = self._key(driver, device)
        got = self._memo.get(key)
        if got is None:
            got = self._evaluate(driver, device)
            self._memo[key] = got
        return got

    def _evaluate(self, driver: str, device: Device) -> bool | str:
        attributes: dict[str, dict[str, Any]] = {}
        for qualified, value in device.attributes.items():
            domain, name = _split(qualified)
            attributes.setdefault(domain, {})[name] = _attribute(value)
        capacity: dict[str, dict[str, Any]] = {}
        for qualified, text in device.capacity.items():
            domain, name = _split(qualified)
            try:
                capacity.setdefault(domain, {})[name] = _quantity(text)
            except ValueError:
                continue
        activation = {"device": celtypes.MapType({
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): celtypes.MapType({
                celtypes.StringType(d): celtypes.MapType({celtypes.StringType(k): v for k, v in names.items()})
                for d, names in attributes.items()}),
            celtypes.StringType("capacity"): celtypes.MapType({
                celtypes.StringType(d): celtypes.MapType({celtypes.StringType(k): v for k, v in names.items()})
                for d, names in capacity.items()}),
        })}
        try:
            result = self._program.evaluate(activation)
        except Exception as err:
            return " ".join(str(err).split()) or type(err).__name__
        if isinstance(result, celtypes.BoolType):
            return bool(result)
        if isinstance(result, Exception):
            return " ".join(str(result).split()) or type(result).__name__
        return f"evaluates to {type(result).__name__}, not a bool"
