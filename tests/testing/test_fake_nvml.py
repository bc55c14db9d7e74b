"""The fake NVML against the real protocol: every function, constant, error class and result field the
fake provides exists in nvidia-ml-py's ``pynvml`` with the same signature, value and name, and the NVML
reader uses nothing else. No GPU is needed: the module's definitions are compared, nothing is called."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

import gpufleet.agent.gpus.nvml as adapter
from gpufleet.testing import fake_nvml
from gpufleet.testing.fake_nvml import ERROR_CLASSES, ERROR_CODES, NVML_FUNCTIONS, STRUCTURES, FakeNvml

pynvml = pytest.importorskip("pynvml")  # the dev extra installs nvidia-ml-py


@pytest.mark.parametrize("name", NVML_FUNCTIONS)
def test_each_function_has_pynvmls_signature(name: str) -> None:
    real = inspect.signature(getattr(pynvml, name))
    fake = inspect.signature(getattr(FakeNvml(), name))
    real_parameters = list(real.parameters.values())
    fake_parameters = list(fake.parameters.values())
    assert [(p.name, p.kind) for p in fake_parameters] == [(p.name, p.kind) for p in real_parameters[:len(fake_parameters)]]
    assert all(p.default is not inspect.Parameter.empty for p in real_parameters[len(fake_parameters):])
    for mine, theirs in zip(fake_parameters, real_parameters, strict=False):
        assert mine.default == theirs.default, f"{name}({mine.name}=...)"


def test_each_constant_has_pynvmls_value() -> None:
    constants = {name: value for name, value in vars(FakeNvml).items()
                 if name.startswith(("NVML_", "nvmlEventType")) and isinstance(value, int)}
    assert len(constants) > 15
    assert {name: getattr(pynvml, name) for name in constants} == constants


def test_each_error_class_has_pynvmls_name_and_code() -> None:
    assert {name: getattr(pynvml, name) for name in ERROR_CODES} == ERROR_CODES
    for name, made in ERROR_CLASSES.items():
        real = getattr(pynvml, name)
        assert issubclass(real, pynvml.NVMLError)
        assert made().value == real().value
        assert type(fake_nvml.NVMLError(made().value)) is made  # NVMLError(code) builds the subclass, as pynvml's
    assert type(pynvml.NVMLError(15)).__name__ == type(fake_nvml.NVMLError(15)).__name__ == "NVMLError_GpuIsLost"


@pytest.mark.parametrize("structure", STRUCTURES, ids=lambda s: s.__name__)
def test_each_result_has_pynvmls_field_names(structure: type) -> None:
    real = getattr(pynvml, structure.__name__)
    assert [f.name for f in dataclasses.fields(structure)] == [f[0] for f in real._fields_]


def _names_the_adapter_reads() -> set[str]:
    """Every ``nvml.X`` the NVML reader's source names (in every branch, run or not)."""
    tree = ast.parse(Path(adapter.__file__).read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "nvml") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "_nvml"):
                names.add(node.attr)
    return names


def test_the_adapter_names_only_what_both_the_fake_and_pynvml_have() -> None:
    names = _names_the_adapter_reads()
    assert "nvmlDeviceGetRemappedRows" in names and "NVMLError" in names
    fake = FakeNvml()
    assert {n for n in names if not hasattr(fake, n)} == set()
    assert {n for n in names if not hasattr(pynvml, n)} == set()


def test_the_adapters_whole_surface_calls_every_fake_function_and_nothing_else() -> None:
    nvml = FakeNvml.with_gpus(4)
    nvml.connect(0, 1)
    nvml.nvswitch([2, 3])
    nvml.set_mig(3, ["3g.40gb", "3g.40gb"])
    nvml.add_process(0, 100, 50, 1000, 1)
    reader = adapter.open_nvml(nvml)
    reader.read()
    reader.health()
    nvml.queue_xid(1, 79)
    reader.xid_events()
    reader.utilisation()

    async def wait_for_a_change() -> None:
        nvml.queue_xid(0, 48)
        await asyncio.wait_for(reader.changed(), 10)

    asyncio.run(wait_for_a_change())
    reader.close()
    assert set(nvml.calls) == set(NVML_FUNCTIONS)


def test_the_fake_refuses_what_it_does_not_have() -> None:
    with pytest.raises(AttributeError, match="the fake NVML has no 'nvmlDeviceGetFanSpeed'"):
        FakeNvml().nvmlDeviceGetFanSpeed  # noqa: B018
    with pytest.raises(KeyError):
        FakeNvml().fail("nvmlDeviceGetFanSpeed", 3)


def test_the_fake_needs_nvml_initialised_first() -> None:
    nvml: Any = FakeNvml.with_gpus(1)
    with pytest.raises(FakeNvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    assert nvml.nvmlDeviceGetCount() == 1
