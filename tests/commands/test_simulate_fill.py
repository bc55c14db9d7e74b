"""``gpufleet simulate fill`` end to end on tiny files: JSON and table output, bad input -> one line, exit 2."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main

NODES = """sn,cpu_milli,memory_mib,gpu,model
n1,32000,131072,4,T4
n2,16000,65536,2,T4
n3,64000,262144,8,G2
"""
PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
p1,4000,8192,1,1000
p2,2000,4096,1,500
p3,8000,16384,2,1000
p4,1000,2048,0,0
p5,2000,4096,1,300
p6,4000,8192,4,1000
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODES)
    pods.write_text(PODS)
    return str(nodes), str(pods)


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["simulate", "fill", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_output(files: tuple[str, str]) -> None:
    nodes, pods = files
    code, out, err = invoke("--nodes", nodes, "--pods", pods, "--policy", "fgd", "--seeds", "1-2", "--format", "json")
    assert code == 0, err
    body = json.loads(out)
    assert body["policy"] == "fgd" and body["seeds"] == [1, 2] and body["nodes"] == 3 and body["tasks"] == 6
    assert body["gpus"] == 14
    # buckets 0..130 (tasks here are several % of capacity each: some buckets have no event)
    assert set(body["alloc_pct_at"]) <= {str(x) for x in range(131)} and "0" in body["alloc_pct_at"]
    assert set(body["frag_amount_pct_at"]) == set(body["alloc_pct_at"]) == set(body["frag_ratio_pct_at"])
    assert set(body["failed_tasks"]["per_seed"]) == {"1", "2"}
    assert [s["seed"] for s in body["per_seed"]] == [1, 2]
    assert all(0 <= v <= 100 for v in body["alloc_pct_at"].values())
    assert max(body["alloc_pct_at"].values()) > 50
    assert body["seconds"] >= 0
    assert "tasks in 2 run(s)" in err


def test_compare_and_table_and_report(files: tuple[str, str], tmp_path: Path) -> None:
    nodes, pods = files
    report = tmp_path / "fill.html"
    code, out, err = invoke("--nodes", nodes, "--pods", pods, "--seeds", "3", "--compare", "bestfit,random",
                            "--report", str(report))
    assert code == 0, err
    assert "gpufleet" in out and "bestfit" in out and "random" in out and "@100" in out
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "bestfit" in html
    assert (f"<code>gpufleet {importlib.metadata.version('gpufleet')}: gpufleet simulate fill --nodes {nodes} "
            f"--pods {pods} --seeds 3 --compare bestfit,random --report {report}</code>") in html
    code, out, _ = invoke("--nodes", nodes, "--pods", pods, "--seeds", "3", "--compare", "bestfit", "--format", "json",
                          "--jobs", "2")
    assert code == 0
    runs = json.loads(out)["runs"]
    assert [r["policy"] for r in runs] == ["gpufleet", "bestfit"]


def test_bundled_openb_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only check that the bundled files are found; a tiny inflation keeps it fast.
    code, out, err = invoke("--seeds", "1", "--inflate", "0.02", "--policy", "bestfit", "--format", "json")
    assert code == 0, err
    body = json.loads(out)
    assert body["nodes"] == 1213 and body["gpus"] == 6212 and body["tasks"] == 8152


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--nodes", "missing.csv"], "missing.csv"),
        (["--pods", "missing.csv"], "missing.csv"),
        (["--seeds", "5-3"], "--seeds"),
        (["--seeds", "x"], "--seeds"),
        (["--policy", "magic"], "magic"),
        (["--compare", "bestfit,magic"], "magic"),
        (["--inflate", "0"], "--inflate"),
        (["--jobs", "0"], "--jobs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(files: tuple[str, str], args: list[str], needle: str) -> None:
    nodes, pods = files
    base = ["--nodes", nodes, "--pods", pods, "--seeds", "1"]
    code, out, err = invoke(*base, *args)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err
    assert "Traceback" not in err


def test_bad_rows_are_one_line_and_exit_2(tmp_path: Path, files: tuple[str, str]) -> None:
    nodes, _ = files
    pods = tmp_path / "bad.csv"
    pods.write_text(PODS + "p7,1000,1024,2,500\n")  # a fraction on 2 GPUs
    code, _, err = invoke("--nodes", nodes, "--pods", str(pods), "--seeds", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "bad.csv" in err
    cpu_only = tmp_path / "cpu.csv"
    cpu_only.write_text("sn,cpu_milli,memory_mib,gpu,model\nc1,8000,1024,0,\n")
    code, _, err = invoke("--nodes", str(cpu_only), "--pods", files[1], "--seeds", "1")
    assert code == 2 and "no node has a GPU" in err


def test_skip_bad_rows_counts_them_and_runs_the_rest(tmp_path: Path, files: tuple[str, str]) -> None:
    nodes, _ = files
    pods = tmp_path / "bad.csv"
    pods.write_text(PODS + "p7,1000,1024,2,500\n")  # a fraction on 2 GPUs: line 8
    code, out, err = invoke("--nodes", nodes, "--pods", str(pods), "--seeds", "1", "--format", "json",
                            "--skip-bad-rows")
    assert code == 0, err
    assert json.loads(out)["tasks"] == 6  # p1..p6; p7 skipped
    assert "skipped 1 bad row" in err and "bad.csv:8" in err


def test_a_line_per_finished_run_when_stderr_is_not_a_terminal(files: tuple[str, str]) -> None:
    nodes, pods = files
    code, _out, err = invoke("--nodes", nodes, "--pods", pods, "--seeds", "3,4", "--format", "json")
    assert code == 0, err
    done = [line.split(" (")[0] for line in err.splitlines() if " done: " in line]
    assert done == ["gpufleet simulate fill: run 1/2 done: gpufleet, seed 3",
                    "gpufleet simulate fill: run 2/2 done: gpufleet, seed 4"]
