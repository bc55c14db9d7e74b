"""scripts/bench_interference.py without a GPU: its arguments, its plan (the MPS limits are the webhook's),
its summary, and the whole orchestration on the CPU stand-in (``--backend numpy``)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.scripts.load import SCRIPTS, load_script

from gpufleet.kube.webhook.annotations import mps_memory_limit

SCRIPT = SCRIPTS / "bench_interference.py"


bench = load_script("bench_interference")


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def _plan(*args: str, memory: int = 81559) -> object:
    return bench.make_plan(bench.build_parser().parse_args(list(args)), memory, False, "/pipe")


def test_the_plan_measures_alone_then_each_count_under_time_slicing_then_mps() -> None:
    plan = _plan()
    assert [(run.name, run.aggressors) for run in plan.runs] == [
        ("alone", 0), ("time-slicing", 1), ("time-slicing", 3), ("time-slicing", 7),
        ("mps-alone", 1), ("mps", 1), ("mps-alone", 3), ("mps", 3), ("mps-alone", 7), ("mps", 7)]
    assert all(len(run.processes) == run.aggressors + 1 for run in plan.runs if run.name != "mps-alone")


def test_mps_processes_get_the_webhooks_limits_for_an_even_split() -> None:
    plan = _plan("--aggressors", "3", "--modes", "mps")
    run = next(r for r in plan.runs if r.name == "mps")
    for process in run.processes:
        assert process.blocks == 25
        assert process.env == {"CUDA_MPS_PIPE_DIRECTORY": "/pipe", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                               "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": mps_memory_limit(25, 81559)}
    assert all(p.env == {} for r in plan.runs if not r.mps for p in r.processes)


def test_block_overrides_and_their_bounds() -> None:
    plan = _plan("--aggressors", "1", "--modes", "mps", "--victim-blocks", "70", "--aggressor-blocks", "30")
    victim, aggressor = next(r for r in plan.runs if r.name == "mps").processes
    assert (victim.blocks, aggressor.blocks) == (70, 30)
    with pytest.raises(bench.PlanError, match=r"--victim-blocks: must be 1\.\.100"):
        _plan("--modes", "mps", "--victim-blocks", "0")


@pytest.mark.parametrize(("args", "message"), [
    (["--aggressors", "1,x"], "--aggressors: must be counts such as 1,3,7, got '1,x'"),
    (["--aggressors", "0"], "--aggressors: each count must be 1..48, got '0'"),
    (["--modes", "mig"], "--modes: must be among time-slicing, mps, got 'mig'"),
    (["--seconds", "0"], "--seconds must be positive"),
    (["--gpu-memory-mib", "-5"], "--gpu-memory-mib: must be positive, got -5"),
])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = _run("--dry-run", *args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"bench_interference: {message}")
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_dry_run_prints_the_plan_and_the_daemons_commands() -> None:
    result = _run("--dry-run", "--aggressors", "7", "--gpu-memory-mib", "81559")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "nvidia-cuda-mps-control -d" in out and "echo quit |" in out
    assert f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=12 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={mps_memory_limit(12, 81559)}" in out
    assert "... and 6 more aggressors like it" in out
    assert out.index("run time-slicing") < out.index("start MPS") < out.index("run mps with")


def test_a_kernel_without_torch_or_cupy_says_so() -> None:
    if importlib.util.find_spec("torch") or importlib.util.find_spec("cupy"):
        pytest.skip("a GPU library is installed here")
    result = _run("--role", "victim", "--seconds", "0.1")
    assert result.returncode == 2
    assert result.stderr.startswith("bench_interference: neither torch nor cupy is installed")


def test_summary_ratios() -> None:
    plan = _plan("--aggressors", "1")
    samples = {("alone", 0): [100.0], ("time-slicing", 1): [50.0], ("mps-alone", 1): [60.0], ("mps", 1): [54.0]}
    summary = bench.summarise(plan, samples)
    (ratio,) = summary["interference_ratio"]
    assert ratio["slowdown_time_slicing"] == pytest.approx(2.0)
    assert ratio["slowdown_mps"] == pytest.approx(60 / 54)
    assert ratio["interference_ratio"] == pytest.approx(0.5 / 0.1)  # 50 % lost against 10 %
    assert "time-slicing / MPS interference: 5.00x" in bench.table(summary)


def test_the_orchestration_runs_end_to_end_on_the_cpu_stand_in(tmp_path: Path) -> None:
    output = tmp_path / "out.json"
    result = _run("--backend", "numpy", "--dtype", "float32", "--size", "64", "--modes", "time-slicing",
                  "--aggressors", "1", "--seconds", "0.2", "--warmup", "0", "--repeats", "1",
                  "--output", str(output))
    assert result.returncode == 0, result.stderr
    summary = json.loads(output.read_text())
    assert [(row["run"], row["aggressors"]) for row in summary["runs"]] == [("alone", 0), ("time-slicing", 1)]
    assert all(row["matmuls_per_s"] > 0 for row in summary["runs"])
    assert "time-slicing      1" in result.stderr


def test_mps_without_the_control_daemon_stops_before_measuring() -> None:
    if bench.shutil.which("nvidia-cuda-mps-control"):
        pytest.skip("the MPS tools are installed here")
    result = _run("--backend", "numpy", "--modes", "mps", "--aggressors", "1", "--gpu-memory-mib", "1000")
    assert result.returncode == 2
    assert "nvidia-cuda-mps-control is not on the PATH" in result.stderr
    assert "matmul/s" not in result.stderr
