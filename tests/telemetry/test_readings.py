"""dcgm-exporter pages and Prometheus answers, as recorded in tests/telemetry/data, to per-pod usage."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.telemetry import (
    GPU_UTIL,
    PodKey,
    PodLabels,
    TelemetryError,
    decode_query_answer,
    parse_exporter_text,
    pod_usage,
    readings_from_samples,
    wanted_lines,
)

from .helpers import DATA, data

TRAIN = PodKey("ml-research", "llama-finetune-0")
NOTEBOOK = PodKey("team-vision", "notebook-ana-7c9f4")
SERVING = PodKey("serving", "embed-api-5d8b7c6f9-xk2lp")


def test_exporter_page_gives_each_pod_its_gpus_means_and_summed_memory() -> None:
    readings = parse_exporter_text(data("dcgm-exporter-node.txt"), "node-017")
    assert len(readings) == 8  # every GPU of the node, the free one too
    usage = pod_usage(readings, at=100.0)
    assert set(usage) == {TRAIN, NOTEBOOK, SERVING}  # the free GPU has no pod labels: nobody's
    train = usage[TRAIN]
    assert train.at == 100.0
    assert len(train.gpus) == 4 and train.gpus == tuple(sorted(train.gpus))
    assert train.gpu_util_percent == pytest.approx((97 + 95 + 98 + 96) / 4)
    assert train.sm_active == pytest.approx((0.912344 + 0.897101 + 0.921877 + 0.905512) / 4)
    assert train.fb_used_mib == 71234 + 70998 + 71402 + 71176
    assert train.hostnames == ("gpu-node-017",)
    assert usage[NOTEBOOK].gpu_util_percent == 0.0 and usage[NOTEBOOK].fb_used_mib == 1843
    assert usage[SERVING].gpu_util_percent == pytest.approx(39.5)
    models = {r.model for r in readings}
    assert models == {"NVIDIA H100 80GB HBM3"}


def test_older_exporter_empty_pod_labels_mean_no_pod() -> None:
    readings = parse_exporter_text(data("dcgm-exporter-node-legacy.txt"), "node-102")
    assert [r.pod for r in readings] == [PodKey("team-vision", "vit-sweep-3"), None]
    assert set(pod_usage(readings, 0.0)) == {PodKey("team-vision", "vit-sweep-3")}


def test_newest_exporter_lowercase_hostname_and_pod_uid() -> None:
    (usage,) = pod_usage(parse_exporter_text(data("dcgm-exporter-node-uid.txt"), "node-203"), 0.0).values()
    assert usage.hostnames == ("gpu-node-203",)
    assert usage.pod_uid == "0c9e2f4a-6b1d-48e3-a7f5-3d2b9c1e8a60"


def test_malformed_exposition_text_is_one_line_naming_the_source() -> None:
    with pytest.raises(TelemetryError) as caught:
        parse_exporter_text(data("dcgm-exporter-malformed.txt"), "http://node-017:9400/metrics")
    line = str(caught.value)
    assert line.startswith("http://node-017:9400/metrics: malformed exposition text: ")
    assert "\n" not in line and len(line) < 300


def test_other_families_and_nan_are_left_out() -> None:
    text = (
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",pod="p",namespace="n"} 50\n'
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",pod="p",namespace="n"} NaN\n'
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",pod="p",namespace="n"} 10\n'
    )
    (usage,) = pod_usage(parse_exporter_text(text, "t"), 0.0).values()
    assert usage.gpu_util_percent is None and usage.sm_active is None and usage.fb_used_mib == 10


def test_mig_instances_of_one_gpu_are_separate_devices() -> None:
    samples = [(GPU_UTIL, {"UUID": "GPU-a", "GPU_I_ID": gi, "pod": "p", "namespace": "n"}, 10.0 * int(gi))
               for gi in ("1", "2")]
    (usage,) = pod_usage(readings_from_samples(samples), 0.0).values()
    assert usage.gpus == ("GPU-a/gi1", "GPU-a/gi2") and usage.gpu_util_percent == 15.0


def test_prometheus_vector_names_the_workload_pod_by_its_exported_labels() -> None:
    samples, warnings = decode_query_answer((DATA / "prometheus-query-vector.json").read_bytes(), "prom")
    assert warnings == []
    assert len(samples) == 24
    direct = pod_usage(parse_exporter_text(data("dcgm-exporter-node.txt"), "node"), 0.0)
    through = pod_usage(readings_from_samples(samples), 0.0)
    for key in (TRAIN, NOTEBOOK, SERVING):
        assert through[key] == direct[key]
    # without honor_labels the free GPU shows the exporter's own pod (it holds no GPU allocation) ...
    assert PodKey("gpu-operator", "nvidia-dcgm-exporter-7xk2q") in through
    # ... unless only the exported labels are read
    only_exported = PodLabels(pod=("exported_pod",), namespace=("exported_namespace",))
    assert set(pod_usage(readings_from_samples(samples, only_exported), 0.0)) == {TRAIN, NOTEBOOK, SERVING}


def test_prometheus_extra_fields_are_tolerated_and_warnings_kept() -> None:
    answer = {
        "status": "success", "warnings": ["PromQL info: partial data"], "infos": ["x"], "stats": {"timings": {}},
        "data": {"resultType": "vector", "analysis": {}, "result": [
            {"metric": {"__name__": GPU_UTIL, "UUID": "GPU-a", "exported_pod": "p", "exported_namespace": "n"},
             "value": [1.5, "NaN"]},
            {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", "UUID": "GPU-a", "exported_pod": "p",
                        "exported_namespace": "n"}, "value": [1.5, "512"], "extra": True},
            {"metric": {"__name__": "some_histogram"}, "histogram": [1.5, {"count": "1"}]},
        ]},
    }
    samples, warnings = decode_query_answer(json.dumps(answer).encode(), "prom")
    assert warnings == ["PromQL info: partial data"]
    (usage,) = pod_usage(readings_from_samples(samples), 0.0).values()
    assert usage.key == PodKey("n", "p") and usage.gpu_util_percent is None and usage.fb_used_mib == 512


@pytest.mark.parametrize(("body", "expected"), [
    ((DATA / "prometheus-query-error.json").read_bytes(),
     'prom: query failed: bad_data: invalid parameter "query": 1:22: parse error:'),
    (b'{"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}',
     "prom: expected an instant vector, got resultType 'scalar'"),
    (b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": 3}]}}',
     "prom: malformed answer: data.result: "),
    (b'{"status": "success"', "prom: malformed answer: "),
    (b'<html>502</html>', "prom: malformed answer: "),
    (b'{"status": "success"}', "prom: malformed answer: no data"),
])
def test_prometheus_failures_are_one_line(body: bytes, expected: str) -> None:
    with pytest.raises(TelemetryError) as caught:
        decode_query_answer(body, "prom")
    assert str(caught.value).startswith(expected)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["dcgm-exporter-node.txt", "dcgm-exporter-node-legacy.txt",
                                  "dcgm-exporter-node-uid.txt"])
def test_parsing_the_wanted_lines_reads_what_the_whole_page_reads(name: str) -> None:
    page = data(name)
    assert parse_exporter_text(page, "t") == parse_exporter_text(page, "t", select=False)
    kept = wanted_lines(page).splitlines()
    assert len(kept) == 3 * 2 + 3 * page.count('DCGM_FI_DEV_GPU_UTIL{')  # HELP and TYPE, a sample a GPU


def test_only_the_wanted_lines_are_checked() -> None:
    page = data("dcgm-exporter-node.txt").replace("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"", "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"\"")
    assert len(parse_exporter_text(page, "t")) == 8
    with pytest.raises(TelemetryError):
        parse_exporter_text(page, "t", select=False)


@settings(max_examples=200)
@given(st.lists(st.sampled_from([
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",pod="p",namespace="n"} 5',
    'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",pod="p"', "DCGM_FI_PROF_SM_ACTIVE 0.5 12 extra",
    'DCGM_FI_DEV_FB_USED{UUID="\\q"} 1', "# TYPE DCGM_FI_DEV_FB_USED counter", "DCGM_FI_DEV_GPU_UTIL{} x",
    "", "#", 'DCGM_FI_DEV_GPU_UTIL{a="b",} 1', "DCGM_FI_DEV_GPU_UTIL{=} 1",
]) | st.text(max_size=30).map(lambda s: "DCGM_FI_DEV_GPU_UTIL" + s), max_size=8))
def test_any_page_gives_readings_or_one_line(lines: list[str]) -> None:
    try:
        readings = parse_exporter_text("\n".join(lines) + "\n", "fuzz")
    except TelemetryError as err:
        assert str(err).startswith("fuzz: malformed exposition text: ") and "\n" not in str(err)
    else:
        assert all(r.gpu_id for r in readings)
