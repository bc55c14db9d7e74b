"""Philly, DLRM, PAI, spot, Helios and Acme: the real files, checked against their READMEs."""

from __future__ import annotations

import statistics
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.traces import (
    load_nodes,
    load_summary_table,
    load_trace,
    load_vc_gpu_counts,
    suggest_vc_quotas,
)

PHILLY = "philly-atc19/philly_jobs_pollux_processed.csv"


def _seconds_between(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def test_philly_matches_the_readme(traces: Path) -> None:
    jobs, report = load_trace(traces / PHILLY)
    assert report.rows == len(jobs) == 82_247 and report.kind == "philly" and report.skipped == 0
    sizes = Counter(j.num_gpu for j in jobs)
    assert (sizes[1], sizes[2], sizes[4], sizes[8], sizes[16], sizes[32]) == (76_627, 1_818, 1_870, 1_643, 199, 67)
    assert max(sizes) == 128
    assert len({j.attrs["vc"] for j in jobs}) == 15
    assert min(j.submit_s for j in jobs) == 0.0
    assert max(j.submit_s for j in jobs) == _seconds_between("2017-09-04 10:30:41", "2017-12-22 08:02:11")
    assert statistics.median(j.duration_s or 0 for j in jobs) == 1144
    assert round(sum((j.duration_s or 0) * j.num_gpu for j in jobs) / 3600 / 1000) == 978  # ~978k GPU-hours
    first = jobs[0]  # 2017-10-09 07:01:55,66.0,1,66.0,11cb48
    assert first.name == "philly-00001" and first.duration_s == 66.0 and first.num_gpu == 1
    assert first.submit_s == _seconds_between("2017-09-04 10:30:41", "2017-10-09 07:01:55")
    assert first.attrs == {"vc": "11cb48", "submitted": "2017-10-09 07:01:55"}
    assert all(j.gpu_milli == 1000 and j.cpu_milli == 0 and j.gpu_models == () for j in jobs)


def test_dlrm_instances(traces: Path) -> None:
    jobs, report = load_trace(traces / "alibaba-gpu-v2025-dlrm/disaggregated_DLRM_trace.csv")
    assert report.rows == 23_871 and report.kind == "dlrm"
    assert Counter(j.attrs["role"] for j in jobs) == {"CN": 16_485, "HN": 7_386}
    assert sum(j.num_gpu for j in jobs) == 7_386 and {j.num_gpu for j in jobs} == {0, 1}
    assert len({j.attrs["app"] for j in jobs}) == 156
    present = [j for j in jobs if j.attrs.get("present_at_start") == "true"]
    assert len(present) == 4_677 + 2_603 and all(j.submit_s == 0.0 for j in present)
    assert sum(j.duration_s is None for j in jobs) == 4_677 + 4_201  # no deletion time: outlived the window
    first = jobs[0]  # instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,
    assert (first.name, first.cpu_milli, first.num_gpu, first.memory_mib) == ("instance_0", 12_000, 1, 120 * 1024)
    assert first.attrs["max_instance_per_node"] == "8" and first.attrs["rdma_percent"] == "25"
    by_name = {j.name: j for j in jobs}
    # instance_7281,CN,app_88,64,...,320.0,...,creation 610.0, scheduled 683.0, deletion 91730.0
    job = by_name["instance_7281"]
    assert (job.submit_s, job.duration_s, job.num_gpu, job.cpu_milli) == (610.0, 91_730.0 - 683.0, 0, 64_000)


def test_pai_machine_spec_has_no_header(traces: Path) -> None:
    nodes, report = load_nodes(traces / "alibaba-pai-gpu-v2020/pai_machine_spec.csv")
    assert report.kind == "pai-machines"
    # The README says 1896 rows, but its own mix adds up to 1897, which is what the file holds.
    assert report.rows == 1_897 and sum(n.gpus for n in nodes) == 6_742
    mix = Counter((n.gpu_model, n.gpus, n.cpu_milli // 1000, n.memory_mib // 1024) for n in nodes)
    assert mix[("P100", 2, 64, 512)] == 798 and mix[("T4", 2, 96, 512)] == 497
    assert mix[("MISC", 8, 96, 512)] == 280 and mix[("V100M32", 8, 96, 384)] == 135
    assert mix[("V100", 8, 96, 384)] + mix[("V100", 8, 96, 512)] == 104 and mix[("", 0, 96, 512)] == 83
    first = nodes[0]  # 7399a758eb02bae1a3621236,CPU,96,512,0
    assert (first.name, first.gpu_model, first.gpus) == ("7399a758eb02bae1a3621236", "", 0)


def test_spot_node_list(traces: Path) -> None:
    nodes, report = load_nodes(traces / "alibaba-spot-gpu-v2026/node_info_df.csv")
    assert report.rows == 4_278 and report.kind == "spot-nodes" and sum(n.gpus for n in nodes) == 10_412
    by_model = Counter(n.gpu_model for n in nodes)
    assert by_model == {
        "A10": 2_494,
        "GPU-series-1": 989,
        "A100-SXM4-80GB": 432,
        "H800": 219,
        "GPU-series-2": 122,
        "A800-SXM4-80GB": 22,
    }
    assert all(n.memory_mib == 0 for n in nodes)  # the file has no memory column
    first = nodes[0]  # GPU-series-1,4,192,0
    assert (first.name, first.gpu_model, first.gpus, first.cpu_milli) == ("0", "GPU-series-1", 4, 192_000)
    assert {n.gpu_memory_mib for n in nodes if n.gpu_model == "H800"} == {80 * 1024}


@pytest.mark.parametrize(("cluster", "first_total", "last_total"), [("Venus", 968, 1080), ("Earth", 784, 1208)])
def test_helios_vc_gpu_counts(traces: Path, cluster: str, first_total: int, last_total: int) -> None:
    counts, report = load_vc_gpu_counts(traces / f"helios-sc21/{cluster}_cluster_gpu_number.csv")
    assert report.rows == len(counts.dates) == 181 and len(counts.vcs) == 25
    assert (counts.dates[0], counts.dates[-1]) == ("2020-04-01", "2020-09-28")
    assert sum(counts.on("2020-04-01").values()) == first_total
    quotas = suggest_vc_quotas(counts)
    assert sum(quotas.values()) == last_total and all(v > 0 for v in quotas.values())
    with pytest.raises(InputError, match="not in the table"):
        counts.on("2021-01-01")


def test_venus_quotas_exact(traces: Path) -> None:
    counts, _ = load_vc_gpu_counts(traces / "helios-sc21/Venus_cluster_gpu_number.csv")
    quotas = suggest_vc_quotas(counts)
    assert len(quotas) == 16 and quotas["vcJsw"] == 256 and quotas["vcEwI"] == 72


def test_summary_tables(traces: Path) -> None:
    helios = load_summary_table(traces / "helios-sc21/helios_cluster_summary.csv")
    assert list(helios) == ["Venus", "Earth", "Saturn", "Uranus", "total"]
    assert helios["Venus"]["gpu_num"] == 1022 and helios["total"]["job_num"] == 3_362_981
    acme = load_summary_table(traces / "acme-nsdi24/cluster_summary.csv")
    assert {"Seren", "Kalos", "Philly"} <= set(acme)
    assert acme["Philly"]["job_num"] == 112_956 and acme["Philly"]["avg_run_time_cpu"] is None


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("helios-sc21/Venus_cluster_gpu_number.csv", "per-VC GPU count table"),
        ("acme-nsdi24/cluster_summary.csv", "per-cluster summary table"),
        ("alibaba-spot-gpu-v2026/node_info_df.csv", "not a job trace"),
    ],
)
def test_tables_that_are_not_job_traces_say_so(traces: Path, relative: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as err:
        load_trace(traces / relative)
    assert str(err.value).startswith(f"{traces / relative}:1: header: ")
