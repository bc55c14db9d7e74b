#!/usr/bin/env python
"""Interference on one GPU: a victim kernel's throughput alone, then beside 1, 3 and 7 aggressors, under
time-slicing and under MPS with the limits gpufleet's webhook and device plugin set.

The issue's check of the seeds' headline claim ("8.15x less interference" for spatial partitioning
than for time-slicing). Every process (victim and aggressors) runs the same kernel, a square matrix
multiplication in a loop: PyTorch if it is importable, else CuPy, else the script says neither is
installed (exit 2). Runs, each repeated ``--repeats`` times (the median is reported):

- ``alone``: the victim by itself on the whole GPU;
- ``time-slicing`` with N aggressors: N + 1 processes on the GPU with no MPS, as the NVIDIA device
  plugin's time-slicing shares one (the driver switches contexts between them);
- ``mps-alone``: the victim by itself as an MPS client with its block limits;
- ``mps`` with N aggressors: every process an MPS client with the limits a pod of that many blocks
  gets: ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = its blocks (a block is 1/100 of a GPU) and
  ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` = ``mps_memory_limit(blocks, GPU memory)``, the webhook's own
  function. By default the N + 1 processes split the GPU's 100 blocks evenly (``--victim-blocks``
  and ``--aggressor-blocks`` override). The MPS control daemon is started for these runs in a
  temporary pipe directory (``nvidia-cuda-mps-control -d``) and stopped after (``echo quit``).

Reported per run: the victim's matmuls per second, its slowdown against ``alone`` (and, for MPS,
against ``mps-alone``: what the partition costs by itself is not interference), and its
interference, 1 - shared / alone (the throughput the neighbours took). Per aggressor count, the
ratio of time-slicing's interference to MPS's is "how many times less interference". Output: a
table, and JSON with every sample (``--output``).

    .venv/bin/python scripts/bench_interference.py --dry-run
    python scripts/bench_interference.py --aggressors 1,3,7 --seconds 20 --output interference.json

Needs an NVIDIA GPU, its driver (nvidia-smi, nvidia-cuda-mps-control for the MPS runs) and PyTorch or
CuPy; the GPU should be otherwise idle and in the Default compute mode. ``--dry-run`` prints the plan
(runs, each process's environment, the daemon's commands) and touches no GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("gpufleet") is None:  # run from a checkout without installing it
    sys.path.insert(0, str(ROOT / "src"))

from gpufleet.domain import BLOCKS_PER_GPU  # noqa: E402
from gpufleet.kube.webhook.annotations import mps_memory_limit  # noqa: E402

BACKENDS = ("torch", "cupy")
CPU_STAND_IN = "numpy"  # --backend numpy: the orchestration on a CPU, for the script's tests; measures nothing
MODES = ("time-slicing", "mps")
ASSUMED_MEMORY_MIB = 81559  # an H100 80GB, for a dry run where nvidia-smi cannot say


class PlanError(Exception):
    """A bad argument or a missing tool: one line, exit 2."""


# ---------------------------------------------------------------------------------------- the plan

@dataclass(frozen=True)
class Process:
    role: str  # "victim" or "aggressor"
    blocks: int | None  # MPS: the pod's blocks; None under time-slicing
    env: dict[str, str]  # what this process gets on top of the parent's environment


@dataclass(frozen=True)
class Run:
    name: str  # alone | time-slicing | mps-alone | mps
    aggressors: int
    mps: bool
    processes: tuple[Process, ...] = field(default=())


@dataclass(frozen=True)
class Plan:
    device: int
    backend: str
    size: int
    dtype: str
    seconds: float
    warmup: float
    repeats: int
    gpu_memory_mib: int
    memory_assumed: bool
    runs: tuple[Run, ...]


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise PlanError(f"--aggressors: must be counts such as 1,3,7, got {text!r}") from None
    if not counts or any(n < 1 or n > 48 for n in counts):
        raise PlanError(f"--aggressors: each count must be 1..48, got {text!r}")
    return tuple(sorted(set(counts)))


def _modes(text: str) -> tuple[str, ...]:
    modes = tuple(part.strip() for part in text.split(","))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise PlanError(f"--modes: must be among {', '.join(MODES)}, got {text!r}")
    return modes


def _mps_env(blocks: int, memory_mib: int, pipe_dir: str) -> dict[str, str]:
    """What gpufleet's device plugin gives a fractional pod's container (agent.deviceplugin.service)."""
    return {
        "CUDA_MPS_PIPE_DIRECTORY": pipe_dir,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(blocks),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": mps_memory_limit(blocks, memory_mib),
    }


def _shares(aggressors: int, victim_blocks: int | None, aggressor_blocks: int | None) -> tuple[int, int]:
    even = BLOCKS_PER_GPU // (aggressors + 1)
    victim = victim_blocks if victim_blocks is not None else even
    aggressor = aggressor_blocks if aggressor_blocks is not None else even
    for name, value in (("--victim-blocks", victim), ("--aggressor-blocks", aggressor)):
        if not 1 <= value <= BLOCKS_PER_GPU:
            raise PlanError(f"{name}: must be 1..{BLOCKS_PER_GPU}, got {value} (with {aggressors} aggressors)")
    return victim, aggressor


def make_plan(args: argparse.Namespace, gpu_memory_mib: int, memory_assumed: bool, pipe_dir: str) -> Plan:
    counts, modes = _counts(args.aggressors), _modes(args.modes)
    if args.seconds <= 0 or args.warmup < 0 or args.repeats < 1 or args.size < 64:
        raise PlanError("--seconds must be positive, --warmup not negative, --repeats at least 1, --size at least 64")
    victim = Process("victim", None, {})
    runs = [Run("alone", 0, False, (victim,))]
    if "time-slicing" in modes:
        runs += [Run("time-slicing", n, False, (victim,) + (Process("aggressor", None, {}),) * n) for n in counts]
    if "mps" in modes:
        for n in counts:
            v_blocks, a_blocks = _shares(n, args.victim_blocks, args.aggressor_blocks)
            mps_victim = Process("victim", v_blocks, _mps_env(v_blocks, gpu_memory_mib, pipe_dir))
            aggressor = Process("aggressor", a_blocks, _mps_env(a_blocks, gpu_memory_mib, pipe_dir))
            runs.append(Run("mps-alone", n, True, (mps_victim,)))
            runs.append(Run("mps", n, True, (mps_victim,) + (aggressor,) * n))
    return Plan(args.device, args.backend, args.size, args.dtype, args.seconds, args.warmup, args.repeats,
                gpu_memory_mib, memory_assumed, tuple(runs))


def describe(plan: Plan, pipe_dir: str) -> str:
    try:
        backend = _backend(plan.backend)
    except PlanError as err:
        backend = f"{plan.backend}: {err}"
    lines = [
        f"GPU {plan.device}: {plan.gpu_memory_mib} MiB" + (" (assumed: nvidia-smi did not answer)"
                                                            if plan.memory_assumed else ""),
        f"kernel: {plan.size}x{plan.size} {plan.dtype} matmul in a loop ({backend}); victim measured "
        f"{plan.seconds:g} s after {plan.warmup:g} s of warm-up; each run {plan.repeats} times, median reported",
    ]
    mps_started = False
    for run in plan.runs:
        if run.mps and not mps_started:
            lines.append(f"start MPS: CUDA_MPS_PIPE_DIRECTORY={pipe_dir} CUDA_MPS_LOG_DIRECTORY={pipe_dir}/log "
                         "nvidia-cuda-mps-control -d")
            mps_started = True
        if run.name == "mps-alone":
            lines.append(f"run mps-alone: the victim alone in its partition for {run.aggressors} aggressors:")
        else:
            lines.append(f"run {run.name} with {run.aggressors} aggressors:")
        for process in run.processes[:2]:
            env = " ".join(f"{k}={v}" for k, v in sorted(process.env.items())) or "(no MPS)"
            lines.append(f"  {process.role}: {env}")
        if len(run.processes) > 2:
            lines.append(f"  ... and {len(run.processes) - 2} more aggressors like it")
    if mps_started:
        lines.append(f"stop MPS: echo quit | CUDA_MPS_PIPE_DIRECTORY={pipe_dir} nvidia-cuda-mps-control")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ the kernel (a child)

def _backend(name: str) -> str:
    if name == CPU_STAND_IN:
        return name
    order = BACKENDS if name == "auto" else (name,)
    for candidate in order:
        if importlib.util.find_spec(candidate) is not None:
            return candidate
    raise PlanError(f"neither {' nor '.join(order)} is installed: pip install torch (or cupy-cuda12x) on the GPU "
                    "machine, or pass --backend")


def _kernel(backend: str, size: int, dtype: str) -> tuple[Any, Any]:
    """A step function (one matmul) and a synchronize function, on the process's GPU."""
    if backend == CPU_STAND_IN:
        import numpy

        m = numpy.ones((size, size), dtype=dtype)
        return (lambda: m @ m), (lambda: None)
    if backend == "torch":
        import torch

        kind = {"float16": torch.float16, "float32": torch.float32}[dtype]
        a = torch.randn(size, size, device="cuda", dtype=kind)
        b = torch.randn(size, size, device="cuda", dtype=kind)
        return (lambda: torch.matmul(a, b)), torch.cuda.synchronize
    import cupy

    a = cupy.random.standard_normal((size, size)).astype(dtype)
    b = cupy.random.standard_normal((size, size)).astype(dtype)
    return (lambda: a @ b), cupy.cuda.Device().synchronize


def _loop(run_step: Any, sync: Any, until: float) -> int:
    done = 0
    while time.monotonic() < until:
        for _ in range(8):  # a few kernels per check, so the clock and the host do not pace the GPU
            run_step()
        sync()
        done += 8
    return done


def child(args: argparse.Namespace) -> int:
    run_step, sync = _kernel(_backend(args.backend), args.size, args.dtype)
    run_step()
    sync()
    if args.role == "aggressor":
        stop = {"now": False}
        signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
        Path(args.ready_file).touch()
        while not stop["now"]:
            _loop(run_step, sync, time.monotonic() + 0.2)
        return 0
    _loop(run_step, sync, time.monotonic() + args.warmup)
    start = time.monotonic()
    done = _loop(run_step, sync, start + args.seconds)
    elapsed = time.monotonic() - start
    flops = 2.0 * args.size**3 * done / elapsed
    print(json.dumps({"matmuls_per_s": done / elapsed, "tflops": flops / 1e12, "seconds": elapsed}))
    return 0


# --------------------------------------------------------------------------- running the plan

def _gpu_memory_mib(device: int) -> tuple[int, bool]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ASSUMED_MEMORY_MIB, True
    out = subprocess.run([smi, f"--id={device}", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30)
    try:
        return int(out.stdout.strip().splitlines()[0]), False
    except (ValueError, IndexError):
        return ASSUMED_MEMORY_MIB, True


@contextlib.contextmanager
def mps_daemon(pipe_dir: str, device: int) -> Iterator[None]:
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        raise PlanError("nvidia-cuda-mps-control is not on the PATH: the MPS runs need the driver's MPS tools")
    Path(pipe_dir).mkdir(parents=True, exist_ok=True)
    log_dir = Path(pipe_dir) / "log"
    log_dir.mkdir(exist_ok=True)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(device), "CUDA_MPS_PIPE_DIRECTORY": pipe_dir,
           "CUDA_MPS_LOG_DIRECTORY": str(log_dir)}
    subprocess.run([control, "-d"], env=env, check=True, timeout=60)
    try:
        yield
    finally:
        subprocess.run([control], input="quit\n", text=True, env=env, timeout=60, check=False)


def _spawn(args: argparse.Namespace, plan: Plan, process: Process, extra: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(plan.device), **process.env}
    command = [sys.executable, str(Path(__file__).resolve()), "--role", process.role, "--backend", plan.backend,
               "--size", str(plan.size), "--dtype", plan.dtype, "--seconds", str(plan.seconds),
               "--warmup", str(plan.warmup), *extra]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def measure(args: argparse.Namespace, plan: Plan, run: Run, work: Path) -> float:
    """The victim's matmuls per second for one repetition of ``run``."""
    aggressors: list[subprocess.Popen[str]] = []
    try:
        for i, process in enumerate(run.processes[1:]):
            ready = work / f"ready-{i}"
            ready.unlink(missing_ok=True)
            aggressors.append(_spawn(args, plan, process, ["--ready-file", str(ready)]))
        deadline = time.monotonic() + 120
        while not all((work / f"ready-{i}").exists() for i in range(len(aggressors))):
            if time.monotonic() > deadline or any(p.poll() is not None for p in aggressors):
                raise PlanError(f"{run.name}: an aggressor did not start (see its output above)")
            time.sleep(0.1)
        victim = _spawn(args, plan, run.processes[0], [])
        out, _ = victim.communicate(timeout=plan.warmup + plan.seconds + 300)
        if victim.returncode != 0:
            raise PlanError(f"{run.name}: the victim failed (exit {victim.returncode})")
        return float(json.loads(out.strip().splitlines()[-1])["matmuls_per_s"])
    finally:
        for p in aggressors:
            p.terminate()
        for p in aggressors:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def summarise(plan: Plan, samples: dict[tuple[str, int], list[float]]) -> dict[str, Any]:
    median = {key: statistics.median(values) for key, values in samples.items()}
    alone = median[("alone", 0)]
    rows = []
    for run in plan.runs:
        value = median[(run.name, run.aggressors)]
        row: dict[str, Any] = {"run": run.name, "aggressors": run.aggressors, "victim_blocks": run.processes[0].blocks,
                               "matmuls_per_s": value, "samples": samples[(run.name, run.aggressors)],
                               "slowdown": alone / value, "interference": 1 - value / alone}
        if run.name == "mps":
            own = median[("mps-alone", run.aggressors)]
            row["slowdown_vs_partition_alone"] = own / value
            row["interference_vs_partition_alone"] = 1 - value / own
        rows.append(row)
    ratios = []
    for n in sorted({run.aggressors for run in plan.runs if run.aggressors}):
        ts, mps = median.get(("time-slicing", n)), median.get(("mps", n))
        if ts is None or mps is None:
            continue
        own = median[("mps-alone", n)]
        ts_loss, mps_loss = 1 - ts / alone, 1 - mps / own
        ratios.append({"aggressors": n, "slowdown_time_slicing": alone / ts, "slowdown_mps": own / mps,
                       "interference_ratio": ts_loss / mps_loss if mps_loss > 0 else None})
    return {"plan": asdict(plan), "runs": rows, "interference_ratio": ratios}


def table(summary: dict[str, Any]) -> str:
    lines = [f"{'run':<14}{'aggr':>5}{'blocks':>8}{'matmul/s':>11}{'slowdown':>10}{'interference':>14}"]
    for row in summary["runs"]:
        blocks = "-" if row["victim_blocks"] is None else str(row["victim_blocks"])
        lines.append(f"{row['run']:<14}{row['aggressors']:>5}{blocks:>8}{row['matmuls_per_s']:>11.1f}"
                     f"{row['slowdown']:>9.2f}x{row['interference']:>13.1%}")
    for ratio in summary["interference_ratio"]:
        value = ("n/a (MPS showed none)" if ratio["interference_ratio"] is None
                 else f"{ratio['interference_ratio']:.2f}x")
        lines.append(f"{ratio['aggressors']} aggressors: time-slicing slows the victim "
                     f"{ratio['slowdown_time_slicing']:.2f}x, "
                     f"MPS {ratio['slowdown_mps']:.2f}x (against its partition alone); "
                     f"time-slicing / MPS interference: {value}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--aggressors", default="1,3,7", help="aggressor counts, e.g. 1,3,7")
    parser.add_argument("--modes", default="time-slicing,mps", help="time-slicing, mps or both")
    parser.add_argument("--device", type=int, default=0, help="the GPU's index")
    parser.add_argument("--backend", choices=("auto", *BACKENDS, CPU_STAND_IN), default="auto",
                        help=f"auto: {' if importable, else '.join(BACKENDS)}; {CPU_STAND_IN}: a CPU stand-in "
                             "for the tests")
    parser.add_argument("--size", type=int, default=4096, help="the matrices' side")
    parser.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the victim is measured")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--victim-blocks", type=int, default=None,
                        help="MPS: the victim's blocks (default: the GPU's 100 split evenly)")
    parser.add_argument("--aggressor-blocks", type=int, default=None, help="MPS: each aggressor's blocks")
    parser.add_argument("--gpu-memory-mib", type=int, default=None, help="default: nvidia-smi's answer")
    parser.add_argument("--output", type=Path, default=None, help="write the JSON there (default: stdout)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; touch no GPU")
    parser.add_argument("--role", choices=("victim", "aggressor"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ready-file", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.role is not None:
            return child(args)
        if args.gpu_memory_mib is not None:
            if args.gpu_memory_mib <= 0:
                raise PlanError(f"--gpu-memory-mib: must be positive, got {args.gpu_memory_mib}")
            memory, assumed = args.gpu_memory_mib, False
        else:
            memory, assumed = _gpu_memory_mib(args.device)
        with tempfile.TemporaryDirectory(prefix="gpufleet-mps-") as work:
            pipe_dir = str(Path(work) / "pipe")
            plan = make_plan(args, memory, assumed, pipe_dir)
            if args.dry_run:
                print(describe(plan, pipe_dir))
                return 0
            plan = replace(plan, backend=_backend(args.backend))
            if any(run.mps for run in plan.runs) and shutil.which("nvidia-cuda-mps-control") is None:
                raise PlanError("nvidia-cuda-mps-control is not on the PATH: the MPS runs need the driver's MPS "
                                "tools (or pass --modes time-slicing)")
            samples: dict[tuple[str, int], list[float]] = {}
            with contextlib.ExitStack() as stack:
                mps_running = False
                for run in plan.runs:  # the MPS runs come last: one daemon serves them all
                    if run.mps and not mps_running:
                        stack.enter_context(mps_daemon(pipe_dir, plan.device))
                        mps_running = True
                    for _ in range(plan.repeats):
                        value = measure(args, plan, run, Path(work))
                        samples.setdefault((run.name, run.aggressors), []).append(value)
                        print(f"{run.name} with {run.aggressors} aggressors: {value:.1f} matmul/s", file=sys.stderr)
        summary = summarise(plan, samples)
    except PlanError as err:
        print(f"bench_interference: {err}", file=sys.stderr)
        return 2
    print(table(summary), file=sys.stderr)
    text = json.dumps(summary, indent=2)
    if args.output is None:
        print(text)
    else:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
