"""The ``gpufleet`` command."""

from __future__ import annotations

import importlib
import json
import sys

import click

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import load_config_file, load_snapshot_file
from gpufleet.adapters.output import render_json, render_table
from gpufleet.engine import schedule


class LazyGroup(click.Group):
    """A group whose sub-commands named in LAZY_COMMANDS are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = LAZY_COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup)
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


# Command groups that live in gpufleet.commands.* are imported only when invoked (see LazyGroup),
# so `gpufleet replay` does not pay for the controller's, the webhook's or the simulator's imports.
# --- registered command groups (keep one per line) ---
LAZY_COMMANDS: dict[str, str] = {
    "simulate": "gpufleet.commands.simulate:simulate",
    "webhook": "gpufleet.commands.webhook:webhook",
    "snapshot": "gpufleet.commands.cluster_tools:snapshot",
    "explain": "gpufleet.commands.cluster_tools:explain",
    "manifests": "gpufleet.commands.manifests:manifests",
    "controller": "gpufleet.commands.controller:controller",
}
# --- end of registered command groups ---


if __name__ == "__main__":
    main()
