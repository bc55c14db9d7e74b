"""``gpufleet replay``: scheduling cycles over a saved cluster state (YAML or JSON), decisions as JSON or a
table."""

from __future__ import annotations

from dataclasses import replace

import click

from gpufleet.adapters.devices import resolve_devices
from gpufleet.adapters.k8s_yaml import load_config_file, load_snapshot_file
from gpufleet.adapters.output import render_json, render_table
from gpufleet.adapters.times import parse_when
from gpufleet.commands.base import Command
from gpufleet.engine import schedule

__all__ = ["replay"]


@click.command(cls=Command)
@click.argument("snapshot", type=click.Path(dir_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="A SchedulerConfig document, YAML or JSON (wins over one inside the snapshot).")
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="json", show_default=True)
@click.option("--now", "now_text", default=None, metavar="TIME",
              help="The snapshot's time (ISO 8601, UTC unless it has an offset); wins over the config's "
              "spec.now. Rules that need a time (ages, runtimes) are off without one.")
def replay(snapshot: str, config_path: str | None, fmt: str, now_text: str | None) -> None:
    """Run scheduling cycles over a saved cluster state until nothing changes.

    SNAPSHOT is Kubernetes YAML or JSON (what `gpufleet snapshot` or `kubectl get -o yaml|json` writes):
    JSON for a .json file or one that begins with { or [, else YAML."""
    config = load_config_file(config_path) if config_path else None
    now = parse_when(now_text, "--now") if now_text is not None else None
    snap = load_snapshot_file(snapshot, config=config)
    if now is not None:
        snap = replace(snap, config=replace(snap.config, now=now))
    view = resolve_devices(snap)  # DRA: devices as GPUs, claims as requests (docs/semantics-notes.md)
    decisions = view.attach(schedule(view.snapshot))
    if view.warnings:
        decisions = replace(decisions, warnings=view.warnings + decisions.warnings)
    if fmt == "json":
        for warning in decisions.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(render_json(decisions), nl=False)
    else:
        click.echo(render_table(decisions), nl=False)
