"""openb (Alibaba GPU 2023): the real files, checked against the figures their README states."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpufleet.adapters.traces import (
    TraceJob,
    bundled_openb_nodes,
    bundled_openb_tasks,
    load_nodes,
    load_trace,
)

OPENB = "alibaba-gpu-v2023-openb"
BUNDLED = Path(__file__).resolve().parents[3] / "src" / "gpufleet" / "data" / "openb"


def _shape(job: TraceJob) -> tuple[int, int, int, int]:  # what a task asks for (names are renumbered)
    return (job.cpu_milli, job.memory_mib, job.num_gpu, job.gpu_milli)


def test_default_task_list_matches_the_readme(traces: Path) -> None:
    jobs, report = load_trace(traces / OPENB / "openb_pod_list_default.csv")
    assert report.rows == len(jobs) == 8152 and report.skipped == 0 and report.kind == "openb-pods"
    sizes = Counter(j.num_gpu for j in jobs)
    assert sizes == {0: 1088, 1: 6989, 2: 16, 4: 15, 8: 44}
    assert sum(j.fractional for j in jobs) == 3078
    assert sum(j.gpu_request_milli for j in jobs) == 6_086_800  # 6086.8 GPUs
    assert round(sum(j.cpu_milli for j in jobs) / 1000) == 85_436
    assert len({j.gpu_milli for j in jobs if j.num_gpu}) == 21
    assert all(j.gpu_models == () for j in jobs)  # gpu_spec is empty in every row of default
    assert Counter(j.attrs["qos"] for j in jobs) == {"LS": 4647, "BE": 3398, "Burstable": 100, "Guaranteed": 7}
    pending = [j for j in jobs if j.attrs["pod_phase"] == "Pending"]
    assert len(pending) == 897
    assert all(j.attrs["duration_from"] == "creation" and "wait_s" not in j.attrs for j in pending)
    assert max(j.submit_s + (j.duration_s or 0) for j in jobs) == 12_902_960  # ~149 days


def test_exact_rows(traces: Path) -> None:
    jobs = {j.name: j for j in load_trace(traces / OPENB / "openb_pod_list_default.csv")[0]}
    first = jobs["openb-pod-0000"]  # 12000,16384,1,1000,,LS,Running,0,12537496,0
    assert (first.cpu_milli, first.memory_mib, first.num_gpu, first.gpu_milli) == (12000, 16384, 1, 1000)
    assert (first.submit_s, first.duration_s) == (0.0, 12_537_496.0)
    second = jobs["openb-pod-0001"]  # 6000,12288,1,460,,LS,Running,427061,12902960,427061
    assert second.fractional and second.gpu_milli == 460
    assert (second.submit_s, second.duration_s) == (427_061.0, 12_902_960.0 - 427_061)
    assert second.attrs == {"qos": "LS", "pod_phase": "Running", "wait_s": "0", "duration_from": "scheduled"}
    pending = jobs["openb-pod-0061"]  # 11908,47104,1,1000,,BE,Pending,10001278,10001403,
    assert (pending.submit_s, pending.duration_s, pending.cpu_milli) == (10_001_278.0, 125.0, 11908)


def test_every_pod_list_variant_loads(traces: Path) -> None:
    default = load_trace(traces / OPENB / "openb_pod_list_default.csv")[0]
    gpu_tasks = Counter(_shape(j) for j in default if j.num_gpu)
    files = sorted((traces / OPENB).glob("openb_pod_list_*.csv"))
    assert len(files) == 20  # the default list and 19 variants (four more are held aside)
    counts = {}
    for path in files:
        jobs, report = load_trace(path)
        counts[path.stem] = report.rows
        lines = path.read_text().count("\n") - 1
        assert report.rows == lines and report.skipped == 0, path.name
        if path.stem.startswith("openb_pod_list_cpu"):
            # "GPU tasks identical to default; CPU-only tasks resampled"
            assert Counter(_shape(j) for j in jobs if j.num_gpu) == gpu_tasks, path.name
        if path.stem.startswith(("openb_pod_list_gpushare", "openb_pod_list_gpuspec")):
            assert report.rows == 8152, path.name
    assert (counts["openb_pod_list_cpu0"], counts["openb_pod_list_cpu300"]) == (7064, 10094)  # "7064–10094"
    multi = (counts["openb_pod_list_multigpu20"], counts["openb_pod_list_multigpu30"], counts["openb_pod_list_multigpu40"])
    assert multi == (8324, 8508, 8746) and all(8324 <= n <= 9061 for n in multi)  # "8324–9061"


def test_multigpu_lists_have_five_columns_and_no_times(traces: Path) -> None:
    jobs, _ = load_trace(traces / OPENB / "openb_pod_list_multigpu20.csv")
    assert all(j.submit_s == 0.0 and j.duration_s is None and not j.attrs for j in jobs)
    assert all(j.gpu_milli == 1000 for j in jobs if j.num_gpu > 1)


def test_gpu_spec_becomes_gpu_models(traces: Path) -> None:
    jobs, _ = load_trace(traces / OPENB / "openb_pod_list_gpuspec25.csv")
    models = Counter(j.gpu_models for j in jobs)
    assert models[()] == 6393 and models[("T4",)] == 906
    # "V100M16|V100M32|V100M32" (23 rows) and "V100M16|V100M32" (126 rows): repeats dropped
    assert models[("V100M16", "V100M32")] == 149
    assert models[("A10", "G2", "P100", "T4", "V100M16", "V100M32")] == 3


def test_gpu_node_list(traces: Path) -> None:
    nodes, report = load_nodes(traces / OPENB / "openb_node_list_gpu_node.csv")
    assert report.rows == 1213 and report.kind == "openb-nodes"
    assert sum(n.gpus for n in nodes) == 6212
    assert sum(n.cpu_milli for n in nodes) == 107_018_000
    mix = Counter((n.gpu_model, n.gpus) for n in nodes)
    assert mix[("G2", 8)] == 549 and mix[("T4", 2)] == 387 and mix[("G3", 8)] == 39
    assert mix[("T4", 4)] == 17 and mix[("A10", 1)] == 2
    by_model = Counter(n.gpu_model for n in nodes)
    assert (by_model["P100"], by_model["V100M16"], by_model["V100M32"]) == (134, 55, 30)
    memory = {n.gpu_model: n.gpu_memory_mib for n in nodes}
    assert memory == {"P100": 16384, "T4": 16384, "V100M16": 16384, "V100M32": 32768, "A10": 24576, "G2": 0, "G3": 0}
    first = nodes[0]  # openb-node-0000,64000,262144,2,P100
    assert (first.name, first.cpu_milli, first.memory_mib, first.gpus) == ("openb-node-0000", 64000, 262144, 2)


def test_all_node_list_has_cpu_only_nodes(traces: Path) -> None:
    nodes, report = load_nodes(traces / OPENB / "openb_node_list_all_node.csv")
    assert report.rows == 1523
    cpu_only = [n for n in nodes if n.gpus == 0]
    assert len(cpu_only) == 310 and all(n.gpu_model == "" and n.gpu_memory_mib == 0 for n in cpu_only)
    assert sum(n.gpus for n in nodes) == 6212


# --------------------------------------------------------------------------------- bundled copies


def test_bundled_files_are_byte_identical_to_the_shared_copies(traces: Path) -> None:
    for name in ("openb_pod_list_default.csv", "openb_node_list_gpu_node.csv"):
        assert (BUNDLED / name).read_bytes() == (traces / OPENB / name).read_bytes(), name


def test_bundled_data_equals_the_shared_copy_when_loaded(traces: Path) -> None:
    assert bundled_openb_tasks() == load_trace(traces / OPENB / "openb_pod_list_default.csv")[0]
    assert bundled_openb_nodes() == load_nodes(traces / OPENB / "openb_node_list_gpu_node.csv")[0]


@pytest.mark.parametrize("name", ["openb", "openb-default"])
def test_bundled_names(name: str) -> None:
    jobs, report = load_trace(name)
    assert report.rows == len(jobs) == 8152 and report.path == "openb_pod_list_default.csv (bundled)"
    nodes, report = load_nodes(name)
    assert report.rows == len(nodes) == 1213 and sum(n.gpus for n in nodes) == 6212
    assert load_nodes("openb-gpu-nodes")[0] == nodes


def test_bundled_data_needs_nothing_outside_the_package(tmp_path: Path) -> None:
    """Loaded in a fresh interpreter that refuses to open anything under a "shared" folder."""
    script = (
        "import sys\n"
        "def hook(event, args):\n"
        "    if event == 'open' and isinstance(args[0], str) and '/shared/' in args[0]:\n"
        "        raise PermissionError('opened ' + args[0])\n"
        "sys.addaudithook(hook)\n"
        "from gpufleet.adapters.traces import bundled_openb_tasks, bundled_openb_nodes\n"
        "print(len(bundled_openb_tasks()), sum(n.gpus for n in bundled_openb_nodes()))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8152", "6212"]
