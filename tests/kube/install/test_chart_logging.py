"""The chart's ``logFormat``: ``--log-format=json`` on the controller, the webhook and the device plugin."""

from __future__ import annotations

from typing import Any

import pytest

from .test_chart import CHART, helm, render

ALL_ON = {"webhook": {"enabled": True}, "mps": {"enabled": True}, "devicePlugin": {"enabled": True}}


def _args(docs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The first container's args of each Deployment and DaemonSet running `gpufleet <command>`."""
    out = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet"):
            container = doc["spec"]["template"]["spec"]["containers"][0]
            if container.get("args") and "--log-level" in " ".join(container["args"]):
                out[doc["metadata"]["name"]] = container["args"]
    return out


def test_text_is_the_default_and_adds_no_flag() -> None:
    args = _args(render(ALL_ON))
    assert sorted(args) == ["gpufleet-controller", "gpufleet-device-plugin", "gpufleet-webhook"]
    assert not [a for each in args.values() for a in each if a.startswith("--log-format")]


def test_json_reaches_every_long_running_command() -> None:
    args = _args(render({**ALL_ON, "logFormat": "json"}))
    assert sorted(args) == ["gpufleet-controller", "gpufleet-device-plugin", "gpufleet-webhook"]
    for name, each in args.items():
        assert each.count("--log-format=json") == 1, name
        assert each.index("--log-format=json") == next(i for i, a in enumerate(each) if a.startswith("--log-level")) + 1


def test_the_values_schema_refuses_another_format() -> None:
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"logFormat": "xml"})
