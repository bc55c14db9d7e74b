"""``gpufleet simulate run``: a workload trace on a modelled cluster, in virtual time, through the engine."""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.text import ProgressBar, progress_bar, step_done, text_table
from gpufleet.adapters.traces import BUNDLED_TASK_NAMES, JOB_KINDS, load_trace
from gpufleet.commands.base import Command, CommandError
from gpufleet.commands.extras import require_reports_extra
from gpufleet.commands.invocation import made_by
from gpufleet.domain import Placement
from gpufleet.ledger.errors import LedgerUnavailableError, LedgerUrlError
from gpufleet.sim import (
    CycleMode,
    Progress,
    QueueBy,
    RunSettings,
    SimResult,
    Variant,
    Workload,
    apply_variant,
    check_invariants,
    compute_metrics,
    load_cluster,
    parse_compare,
    parse_duration,
    parse_failures,
    prepare,
    queue_by_warning,
    select_jobs,
    simulate,
    summary_rows,
)
from gpufleet.sim.ledger_export import DEFAULT_ORIGIN, DEFAULT_ORIGIN_S, ledger_intervals, parse_origin

if TYPE_CHECKING:
    from gpufleet.ledger import LedgerEvent, LedgerStore

__all__ = ["run"]


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value, param.opts[0] if param.opts else str(param.name))
    except InputError as err:
        raise click.BadParameter(str(err)) from None


@click.command(cls=Command)
@click.option("--trace", default="openb", show_default=True,
              help="Job trace: a CSV file, or 'openb' (the bundled openb default task list).")
@click.option("--kind", type=click.Choice(sorted(JOB_KINDS)), default=None,
              help="Trace format; recognised from the header when not given.")
@click.option("--cluster", "cluster_arg", default="openb", show_default=True,
              help="A ClusterSpec YAML, a node-list CSV, 'openb' (the bundled openb GPU nodes) or "
                   "'openb-small' (a bundled 48-GPU cluster sized to the openb trace).")
@click.option("--queues", "queues_file", type=click.Path(dir_okay=False), default=None,
              help="YAML of Queue objects (the Queue CRD). Default: derived from the trace (see --queue-by).")
@click.option("--queue-by", type=click.Choice([q.value for q in QueueBy]), default=None,
              help="Job attribute that names the queue. Default: none (one default queue).")
@click.option("--queue-map", "queue_map_file", type=click.Path(dir_okay=False), default=None,
              help="YAML {queueBy, map: {value: queue}, default}: explicit attribute-to-queue mapping.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="A SchedulerConfig YAML document.")
@click.option("--placement", type=click.Choice([p.value for p in Placement]), default=None,
              help="Override the config's placement.")
@click.option("--cycle-interval", default="60", show_default=True, callback=_duration,
              help="Minimum virtual time between cycles (events mode) or the period (fixed mode); 30s, 5m, ...")
@click.option("--cycle-mode", type=click.Choice([m.value for m in CycleMode]), default="events", show_default=True)
@click.option("--checkpoint", default="30m", show_default=True, callback=_duration,
              help="Checkpoint interval of jobs that do not set one; 0: never (an interruption loses everything).")
@click.option("--failures", multiple=True,
              help="Outages: mtbf=30d,repair=4h / spot-rate=0.05,spot-down=10m,spot-notice=2m,grace=30s / an outage "
                   "YAML file. Repeatable.")
@click.option("--until", default=None, callback=_duration, help="Stop at this virtual time; later jobs are dropped.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N jobs (by submission).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the outage models.")
@click.option("--skip-bad-rows", is_flag=True, help="Skip malformed trace rows (counted) instead of failing.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--report", "report_file", type=click.Path(dir_okay=False), default=None,
              help="Write a self-contained HTML report here.")
@click.option("--compare", multiple=True,
              help="A variant to run side by side: key=value[,key=value] (placement, config, queues, queue-by, "
                   "queue-map, cycle-interval, cycle-mode, checkpoint, seed). Repeatable.")
@click.option("--ledger", "ledger_url", default=None,
              help="Write every allocation interval of the run to this usage ledger: a file path (SQLite) or a "
                   "database URL (sqlite:///FILE, postgresql+psycopg://...). One run: not with --compare.")
@click.option("--ledger-origin", default=None,
              help="The epoch date-time of simulated time 0 in the ledger (ISO-8601, e.g. 2026-11-01T00:00:00Z). "
                   f"Default: the trace's own start when its times are absolute, else {DEFAULT_ORIGIN}.")
def run(
    trace: str, kind: str | None, cluster_arg: str, queues_file: str | None, queue_by: str | None,
    queue_map_file: str | None, config_file: str | None, placement: str | None, cycle_interval: float,
    cycle_mode: str, checkpoint: float, failures: tuple[str, ...], until: float | None, limit: int | None,
    seed: int, skip_bad_rows: bool, fmt: str, report_file: str | None, compare: tuple[str, ...],
    ledger_url: str | None, ledger_origin: str | None,
) -> None:
    """Run a workload trace through the scheduler on a modelled cluster, in virtual time."""
    if report_file:
        require_reports_extra("--report")  # before the run, not after it
    if ledger_origin is not None and ledger_url is None:
        raise CommandError("--ledger-origin: only with --ledger")
    if ledger_url is not None and compare:
        raise CommandError("--ledger: one run per ledger; not with --compare (run each variant with its own --ledger)")
    origin_s = parse_origin(ledger_origin) if ledger_origin is not None else None
    store = _open_ledger(ledger_url) if ledger_url is not None else None  # a bad URL fails before the run
    wall = time.perf_counter()
    cpu = time.process_time()
    base = RunSettings(
        placement=Placement(placement) if placement else None,
        config_file=config_file,
        queues_file=queues_file,
        queue_by=QueueBy(queue_by) if queue_by else None,
        queue_map_file=queue_map_file,
        cycle_interval_s=cycle_interval,
        cycle_mode=CycleMode(cycle_mode),
        checkpoint_s=checkpoint,
        seed=seed,
    )
    # With --compare, the run as the other options say comes first, as simulate fill shows its policy
    # beside the compared ones: each variant is read against it.
    variants = [Variant("baseline", ()), *parse_compare(compare)] if compare else [Variant("", ())]
    model = parse_failures(failures)
    jobs, report = load_trace(trace, kind=kind, skip_bad_rows=skip_bad_rows)
    if report.skipped:
        click.echo(f"warning: {report.path}: skipped {report.skipped} bad rows (first: "
                   f"{report.first_errors[0] if report.first_errors else '?'})", err=True)
    cluster = load_cluster(cluster_arg, skip_bad_rows=skip_bad_rows)
    workload = Workload(select_jobs(jobs, until, limit), cluster, model, until)
    settings = [apply_variant(base, v) for v in variants]
    for by in dict.fromkeys(s.queue_by for s in settings):  # once per rule, in order
        warning = queue_by_warning(workload.trace, by)
        if warning:
            click.echo(f"warning: {warning}", err=True)
    prepared = [prepare(workload, s) for s in settings]
    if not workload.trace:
        raise CommandError(f"{trace}: no jobs to simulate (after --until/--limit)")

    outputs: list[tuple[str, SimResult, dict[str, Any]]] = []
    engine_s = 0.0
    for n, (variant, (setup, options)) in enumerate(zip(variants, prepared, strict=True), 1):
        started = time.perf_counter()
        with progress_bar(len(setup.jobs), variant.label or "simulating", show_pos=True) as bar:
            result = simulate(setup, options, progress=_finished_jobs(bar))
        step_done(f"gpufleet simulate run: run {n}/{len(variants)} done: {variant.label or 'run'} "
                  f"({time.perf_counter() - started:.1f} s)")
        engine_s += result.engine_seconds
        problems = check_invariants(result)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise CommandError(f"simulator invariant broken: {problems[0]}{more}", exit_code=1)
        for warning in result.warnings:
            click.echo(f"warning: {warning}", err=True)
        outputs.append((variant.label, result, compute_metrics(result, variant.label)))

    inputs = {
        "trace": trace if trace in BUNDLED_TASK_NAMES else Path(trace).name,
        "trace_kind": report.kind,
        "cluster": cluster_arg if not Path(cluster_arg).suffix else Path(cluster_arg).name,
        "jobs": len(workload.trace),
        "nodes": len(cluster.nodes),
        "gpus": cluster.total_gpus,
    }
    if store is not None:
        started = time.perf_counter()
        with store:
            written = _write_ledger(store, outputs[0][1], origin_s if origin_s is not None else (
                report.start_epoch_s if report.start_epoch_s is not None else DEFAULT_ORIGIN_S),
                _run_key(inputs, base, failures, until, limit))
        click.echo(f"ledger: {written:,} allocation intervals written to {store.shown_url} "
                   f"({time.perf_counter() - started:.1f} s)", err=True)
    if fmt == "json":
        click.echo(json.dumps({"inputs": inputs, "runs": [m for _, _, m in outputs]}, indent=1, sort_keys=False))
    else:
        click.echo(_table([m for _, _, m in outputs], inputs), nl=False)
    if report_file:
        from gpufleet.sim import RunOutput, build_report  # matplotlib: only when a report is asked for

        page = build_report([RunOutput(label or "run", r, m) for label, r, m in outputs],
                            f"gpufleet simulate run: {inputs['trace']} on {inputs['cluster']}", inputs)
        page.made_by = made_by()
        html = page.render()
        try:
            Path(report_file).write_text(html, encoding="utf-8")
        except OSError as err:
            raise CommandError(f"{report_file}: cannot write: {err.strerror or err}") from None
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    click.echo(
        f"simulated {len(workload.trace):,} jobs x {len(outputs)} run(s) in {time.perf_counter() - wall:.1f} s "
        f"(cpu {time.process_time() - cpu:.1f} s, engine {engine_s:.1f} s), peak RSS {peak_mib:.0f} MiB",
        err=True,
    )


def _open_ledger(url: str) -> LedgerStore:
    from gpufleet.ledger import open_ledger  # SQLAlchemy: only when a ledger is asked for

    try:
        return open_ledger(url)
    except LedgerUrlError as err:
        raise CommandError(str(err).replace("--database", "--ledger", 1)) from None
    except LedgerUnavailableError as err:
        raise CommandError(str(err), exit_code=1) from None


def _run_key(inputs: dict[str, Any], settings: RunSettings, failures: tuple[str, ...], until: float | None,
             limit: int | None) -> str:
    """What names the run in its pods' UIDs: the command's inputs and settings (the same command, the same UIDs)."""
    return json.dumps({"inputs": inputs, "settings": repr(settings), "failures": failures, "until": until,
                       "limit": limit}, sort_keys=True)


LEDGER_BATCH = 10_000  # intervals per transaction


def _write_ledger(store: LedgerStore, result: SimResult, origin_s: float, run_key: str) -> int:
    """Write the run's intervals in batches (each one transaction); returns how many."""
    written = 0
    batch: list[LedgerEvent] = []
    try:
        for interval in ledger_intervals(result, origin_s=origin_s, run_key=run_key):
            batch.append(interval)
            if len(batch) == LEDGER_BATCH:
                store.write(batch)
                written += len(batch)
                batch = []
        if batch:
            store.write(batch)
            written += len(batch)
    except LedgerUnavailableError as err:
        raise CommandError(str(err), exit_code=1) from None
    return written


def _table(metrics: Sequence[dict[str, Any]], inputs: dict[str, Any]) -> str:
    lines = [" ".join(f"{k}={v}" for k, v in inputs.items()), ""]
    headers, rows = summary_rows(metrics)
    lines += text_table(headers, rows, numbers_right=True)
    for m in metrics:
        lines.append("")
        lines.append(f"QUEUES{' (' + m['label'] + ')' if m['label'] else ''}")
        q_rows = [
            [name, str(q["jobs"]), "-" if q["quota_gpus"] is None else f"{q['quota_gpus']:g}",
             f"{q['mean_usage_gpus']:g}", _pct(q["time_above_quota"]), f"{q['wait_s']['p95']:g}",
             f"{q['gpu_hours']:,.0f}", f"{q['cost']:,.0f}"]
            for name, q in m["queues"].items()
        ]
        lines += text_table(["queue", "jobs", "quota", "mean gpus", "above quota", "wait p95 s", "gpu-h", "cost"],
                            q_rows, numbers_right=True)
    return "\n".join(lines) + "\n"


def _finished_jobs(bar: ProgressBar | None) -> Progress | None:
    """The timeline reports (virtual time, jobs finished so far); the bar counts finished jobs."""
    if bar is None:
        return None
    return lambda _t, finished: bar.reach(finished)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"

