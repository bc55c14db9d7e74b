"""``gpufleet simulate fill``: the FGD paper's experiment (tasks arrive, never leave) for one or more policies."""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import click

from gpufleet.adapters.text import progress_bar, step_done
from gpufleet.adapters.traces import BUNDLED_TASK_NAMES, load_nodes, load_trace
from gpufleet.adapters.traces.records import TraceJob, TraceNode
from gpufleet.commands.base import Command, CommandError, FiniteFloatRange
from gpufleet.commands.extras import require_reports_extra
from gpufleet.commands.invocation import made_by
from gpufleet.sim.fill import POLICIES, PaperResults, SeedCurves, parse_seeds, run_fill, summarize, table

__all__ = ["fill"]

# Where the FGD artifact's summary sits when the shared trace folder is beside the repository (CI).
PAPER_SUMMARY_CANDIDATES = (Path("../shared/traces/fgd-atc23-results/summary_by_workload_policy.csv"),)


def _workload_name(pods: str) -> str:
    return "openb_pod_list_default" if pods in BUNDLED_TASK_NAMES else Path(pods).stem


def _paper(path: str | None) -> PaperResults:
    if path is not None:
        try:
            return PaperResults.load(Path(path))
        except (OSError, KeyError, UnicodeDecodeError) as err:
            raise CommandError(f"{path}: cannot read the paper's summary: {err}") from None
    for candidate in PAPER_SUMMARY_CANDIDATES:
        if candidate.is_file():
            try:
                return PaperResults.load(candidate)
            except (OSError, KeyError, UnicodeDecodeError):
                break
    return PaperResults.builtin()


# -- running (in this process or in workers) ----------------------------------------------------

_NODES: Sequence[TraceNode] = ()
_JOBS: Sequence[TraceJob] = ()


def _init_worker(nodes: Sequence[TraceNode], jobs: Sequence[TraceJob]) -> None:
    global _NODES, _JOBS
    _NODES, _JOBS = nodes, jobs


def _one_run(policy: str, seed: int, inflate: float, memory: bool,
             progress: Callable[[int], None] | None = None) -> SeedCurves:
    start = time.perf_counter()
    run = run_fill(policy, _NODES, _JOBS, seed, inflate, memory, progress=progress)
    return SeedCurves.of(run, time.perf_counter() - start)


def _run_in_worker(args: tuple[str, int, float, bool]) -> SeedCurves:
    return _one_run(*args)


@click.command("fill", cls=Command)
@click.option("--nodes", "nodes_arg", default="openb", show_default=True,
              help="Node list CSV, or 'openb' (the bundled openb GPU node list: 1213 nodes, 6212 GPUs).")
@click.option("--pods", "pods_arg", default="openb", show_default=True,
              help="Task list CSV (openb pod list or any trace gpufleet reads), or 'openb' (the bundled default).")
@click.option("--policy", type=click.Choice(POLICIES), default="gpufleet", show_default=True,
              help="gpufleet (the engine's defrag placement), binpack, spread, or one of the paper's baselines.")
@click.option("--seeds", "seeds_arg", default="42-51", show_default=True, help="Seeds: 42-51, 42,45 or 42.")
@click.option("--inflate", type=FiniteFloatRange(min=0, min_open=True), default=1.3, show_default=True,
              help="Add tasks until their GPU request reaches this multiple of the GPU capacity.")
@click.option("--compare", default=None, help="More policies to run on the same seeds: P1,P2,...")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--report", "report_file", type=click.Path(dir_okay=False), default=None,
              help="Write a self-contained HTML report here.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs in parallel worker processes.")
@click.option("--no-memory", is_flag=True, help="Ignore memory requests (the paper's simulator checks them).")
@click.option("--skip-bad-rows", is_flag=True,
              help="Skip malformed trace rows (counted on stderr) instead of failing.")
@click.option("--paper", "paper_file", type=click.Path(dir_okay=False), default=None,
              help="The FGD artifact's summary_by_workload_policy.csv to compare with (found by itself when "
                   "../shared is beside the repository; else the paper's default-trace numbers are built in).")
def fill(nodes_arg: str, pods_arg: str, policy: str, seeds_arg: str, inflate: float, compare: str | None, fmt: str,
         report_file: str | None, jobs: int, no_memory: bool, skip_bad_rows: bool, paper_file: str | None) -> None:
    """Fill an empty cluster with tasks that never leave; GPU allocation by arrived workload (FGD, ATC'23)."""
    if report_file:
        require_reports_extra("--report")  # before the run, not after it
    wall = time.perf_counter()
    try:
        seeds = parse_seeds(seeds_arg)
    except ValueError as err:
        raise CommandError(f"--seeds: {err}") from None
    policies = [policy]
    for name in (compare or "").split(","):
        name = name.strip()
        if not name:
            continue
        if name not in POLICIES:
            raise CommandError(f"--compare: unknown policy {name!r} (expected one of {', '.join(POLICIES)})")
        if name not in policies:
            policies.append(name)
    nodes, node_report = load_nodes(nodes_arg, skip_bad_rows=skip_bad_rows)
    tasks, task_report = load_trace(pods_arg, skip_bad_rows=skip_bad_rows)
    for report in (node_report, task_report):
        if report.skipped:
            click.echo(f"{report.path}: skipped {report.skipped} bad row(s); first: {report.first_errors[0]}",
                       err=True)
    if not any(n.gpus for n in nodes):
        raise CommandError(f"{nodes_arg}: no node has a GPU")
    if not tasks:
        raise CommandError(f"{pods_arg}: no tasks")
    paper = _paper(paper_file)
    memory = not no_memory
    _init_worker(nodes, tasks)
    results: list[dict[str, Any]] = []
    runs: dict[str, list[SeedCurves]] = {p: [] for p in policies}
    seconds: dict[str, float] = dict.fromkeys(policies, 0.0)
    work = [(p, s) for p in policies for s in seeds]
    if jobs > 1 and len(work) > 1:
        with progress_bar(len(work), "runs") as bar, ProcessPoolExecutor(
                max_workers=jobs, initializer=_init_worker, initargs=(nodes, tasks)) as pool:
            for n, ((p, s), curves) in enumerate(zip(
                    work, pool.map(_run_in_worker, [(p, s, inflate, memory) for p, s in work]), strict=True), 1):
                runs[p].append(curves)
                seconds[p] += curves.seconds
                if bar is not None:
                    bar.advance()
                step_done(f"gpufleet simulate fill: run {n}/{len(work)} done: {p}, seed {s} ({curves.seconds:.1f} s)")
    else:
        estimate = int(len(tasks) * max(inflate, 1.0) * 1.35) * len(work)
        with progress_bar(estimate, "tasks") as bar:
            for n, (p, s) in enumerate(work, 1):
                curves = _one_run(p, s, inflate, memory, bar.advance if bar else None)
                runs[p].append(curves)
                seconds[p] += curves.seconds
                step_done(f"gpufleet simulate fill: run {n}/{len(work)} done: {p}, seed {s} ({curves.seconds:.1f} s)")
    for p in policies:
        results.append(summarize(p, runs[p], len(nodes), len(tasks), seconds[p], inflate))
    workload = _workload_name(pods_arg)
    if fmt == "json":
        body: dict[str, Any] = results[0] if len(results) == 1 else {"runs": results}
        click.echo(json.dumps(body, indent=1))
    else:
        click.echo(table(results, workload, paper), nl=False)
    if report_file:
        from gpufleet.sim.fill.report import fill_report  # matplotlib: only when a report is asked for

        try:
            Path(report_file).write_text(fill_report(results, workload, paper, made_by=made_by()), encoding="utf-8")
        except OSError as err:
            raise CommandError(f"{report_file}: cannot write: {err.strerror or err}") from None
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = sum(r.tasks for rs in runs.values() for r in rs)
    click.echo(f"{total:,} tasks in {len(work)} run(s) in {time.perf_counter() - wall:.1f} s, "
               f"peak RSS {peak_mib:.0f} MiB", err=True)

