"""``gpufleet snapshot`` and ``gpufleet explain``: read a live cluster, replay it, explain a pod.

Exit status: 0 done; 2 the user's input is wrong (a kubeconfig path that does not exist or does
not parse, a pod that does not exist); 1 the cluster could not be read (unreachable, an API error,
objects the scheduler cannot read). Every failure is one line on stderr (see ``commands.base``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import click

from gpufleet.adapters import InputError, dump_documents_json, load_snapshot_text
from gpufleet.commands.base import Command, CommandError
from gpufleet.kube import ClusterApi, ClusterSnapshot, Explanation, explain_in_cluster, read_cluster

__all__ = ["api_factory", "context_option", "explain", "kubeconfig_option", "snapshot", "with_api"]

T = TypeVar("T")

# Tests swap this for a function returning an in-memory client; (kubeconfig, context) -> the API.
ApiFactory = Callable[[str | None, str | None], ClusterApi]


def _lightkube_api(kubeconfig: str | None, context: str | None) -> ClusterApi:
    from gpufleet.kube import connect  # lightkube's import cost only for these commands

    return connect(kubeconfig, context=context, timeout=10.0)


api_factory: ApiFactory = _lightkube_api


def with_api(kubeconfig: str | None, context: str | None, work: Callable[[ClusterApi], Awaitable[T]]) -> T:
    """``work`` on a client of the cluster, in an event loop of its own; the client is closed after."""

    async def run() -> T:
        api = api_factory(kubeconfig, context)
        try:
            return await work(api)
        finally:
            await api.close()

    return asyncio.run(run())


kubeconfig_option = click.option("--kubeconfig", type=str, default=None,
                                 help="Kubeconfig file (default: in-cluster, $KUBECONFIG, ~/.kube/config).")
context_option = click.option("--context", type=str, default=None,
                              help="Kubeconfig context (default: the current one).")


@click.command(cls=Command)
@kubeconfig_option
@context_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the snapshot here (default: stdout).")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default=None,
              help="yaml: one document per object; json: one List (as kubectl get -o json prints), which "
              "replay loads faster. Default: json for an --output ending in .json, else yaml.")
def snapshot(kubeconfig: str | None, context: str | None, output: str | None, fmt: str | None = None) -> None:
    """Write the live cluster's state as a snapshot that `gpufleet replay` reads."""
    snap: ClusterSnapshot = with_api(kubeconfig, context, read_cluster)
    if fmt is None:
        fmt = "json" if output is not None and output.lower().endswith(".json") else "yaml"
    text = dump_documents_json(snap.documents) if fmt == "json" else snap.to_yaml()
    for warning in snap.warnings:
        click.echo(f"warning: {warning}", err=True)
    try:  # the file is written either way (it is what the cluster holds), but say if replay will reject it
        load_snapshot_text(text, output or "<stdout>", json=fmt == "json")
    except InputError as err:
        click.echo(f"warning: gpufleet replay will reject this snapshot: {err}", err=True)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as err:
        raise CommandError(f"{output}: cannot write: {err.strerror or err}") from None
    click.echo(f"wrote {len(snap.documents)} objects to {output}", err=True)


@click.command(cls=Command)
@click.argument("pod")
@click.option("-n", "--namespace", type=str, default=None,
              help="The pod's namespace (default: the context's; POD may also be NAMESPACE/NAME).")
@kubeconfig_option
@context_option
@click.option("-o", "--output", "output_format", type=click.Choice(["text", "json", "yaml"]), default="text",
              show_default=True, help="text: plain words; json or yaml: the documented schema "
              "(gpufleet.dev/explain/v1), with the pod's position in its queue.")
def explain(pod: str, namespace: str | None, kubeconfig: str | None, context: str | None,
            output_format: str = "text") -> None:
    """Explain what the scheduler would do with POD now: bind it where, keep it pending and why,
    or evict it (or others) for whom."""
    if "/" in pod:
        prefix, _, pod = pod.partition("/")
        if namespace is not None and namespace != prefix:
            raise CommandError(f"the pod names namespace {prefix!r} but -n says {namespace!r}")
        namespace = prefix
    if not pod or namespace == "":
        raise CommandError("POD must be NAME or NAMESPACE/NAME")
    explanation: Explanation = with_api(
        kubeconfig, context,
        lambda api: explain_in_cluster(api, namespace or api.default_namespace, pod, now=time.time()),
    )
    for warning in explanation.warnings:
        click.echo(f"warning: {warning}", err=True)
    if output_format == "json":
        click.echo(json.dumps(explanation.report, indent=2))
    elif output_format == "yaml":
        import yaml

        click.echo(yaml.safe_dump(explanation.report, sort_keys=False), nl=False)
    else:
        for line in explanation.lines:
            click.echo(line)
