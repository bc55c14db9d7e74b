"""The ``gpufleet`` command."""

from __future__ import annotations

import json
import sys

import click

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import load_config_file, load_snapshot_file
from gpufleet.adapters.output import render_json, render_table
from gpufleet.engine import schedule


@click.group()
@click.version_option(package_name="gpufleet")
def main() -> None:
    """gpufleet: a gang-aware, quota-aware GPU scheduler for shared Kubernetes clusters."""


@main.command()
@click.argument("snapshot", type=click.Path(dir_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="A SchedulerConfig YAML document (wins over one inside the snapshot).")
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="json", show_default=True)
def replay(snapshot: str, config_path: str | None, fmt: str) -> None:
    """Run scheduling cycles over a saved cluster state until nothing changes."""
    try:
        config = load_config_file(config_path) if config_path else None
        snap = load_snapshot_file(snapshot, config=config)
    except InputError as err:
        click.echo(str(err), err=True)
        sys.exit(2)
    decisions = schedule(snap)
    if fmt == "json":
        for warning in decisions.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(render_json(decisions), nl=False)
    else:
        click.echo(render_table(decisions), nl=False)


@main.command()
@click.option("--shape", type=click.Choice(["basic", "gang-small", "gang-large", "preemption", "topology"]),
              required=True)
@click.option("--scale", type=float, default=1.0, show_default=True, help="Shrink the shape (tests).")
@click.option("--repeat", type=int, default=1, show_default=True, help="Runs; the median is reported.")
@click.option("--format", "fmt", type=click.Choice(["json"]), default="json")
@click.option("--replay-cost", is_flag=True,
              help="Instead: compare the full replay of the shape written as YAML with bare YAML parsing.")
def bench(shape: str, scale: float, repeat: int, fmt: str, replay_cost: bool) -> None:
    """Time the engine on a synthetic cluster shape (mirrors Kubernetes' scheduler_perf)."""
    from gpufleet.bench.runner import replay_vs_parse, run_bench

    if replay_cost:
        click.echo(json.dumps(replay_vs_parse(scale=scale, repeat=repeat)))
        return
    click.echo(json.dumps(run_bench(shape, scale=scale, repeat=repeat)))


# Command groups that live in gpufleet.commands.* are registered below, one line each.
# --- registered command groups (keep one per line) ---
from gpufleet.commands.cluster_tools import explain, snapshot  # noqa: E402
from gpufleet.commands.controller import controller  # noqa: E402
from gpufleet.commands.manifests import manifests  # noqa: E402
from gpufleet.commands.simulate import simulate  # noqa: E402
from gpufleet.commands.webhook import webhook  # noqa: E402

main.add_command(simulate)
main.add_command(webhook)
main.add_command(snapshot)
main.add_command(explain)
main.add_command(manifests)
main.add_command(controller)
# --- end of registered command groups ---


if __name__ == "__main__":
    main()
