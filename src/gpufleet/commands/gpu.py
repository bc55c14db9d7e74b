"""``gpufleet gpu``: the operator's view of the node agent's GPU health (docs/agent.md).

- ``gpufleet gpu uncordon NODE/INDEX[,INDEX]``: ask the node's agent to use those GPUs again before
  their clean period ends (the ``gpufleet.dev/gpu-uncordon`` annotation; the agent consumes it);
- ``gpufleet gpu list [NODE]``: the unhealthy GPUs and why, from the Nodes' annotations.

Exit status: 0 done; 2 bad input (a malformed NODE/INDEX, a node that does not exist); 1 the
cluster could not be reached.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from typing import Any

import click

from gpufleet.commands import subcommands
from gpufleet.commands.base import Command, CommandError, LazyGroup
from gpufleet.commands.cluster_tools import context_option, kubeconfig_option, with_api
from gpufleet.kube import ClusterAccessError, ClusterApi

__all__ = ["gpu", "list_gpus", "parse_target", "uncordon"]

_TARGET = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)/([^/]+)")


@click.group(cls=LazyGroup, lazy_commands=subcommands("gpu"))
def gpu() -> None:
    """The GPUs the node agents found unhealthy, and taking them back."""


def parse_target(text: str) -> tuple[str, frozenset[int]]:
    """ "node-1/3" -> ("node-1", {3}); "node-1/1,3" -> ("node-1", {1, 3}); CommandError otherwise."""
    from gpufleet.agent.health import HealthAnnotationError, parse_gpu_indices

    match = _TARGET.fullmatch(text.strip())
    indices: frozenset[int] = frozenset()
    if match is not None:
        with contextlib.suppress(HealthAnnotationError):  # the agent's own grammar: one parser
            indices = parse_gpu_indices(match.group(3), "NODE/INDEX")
    if match is None or not indices:
        raise CommandError(f'NODE/INDEX: expected a node name and GPU indices such as "gpu-node-1/3" '
                           f'or "gpu-node-1/1,3", got {text!r}')
    return match.group(1), indices


def _annotations(node: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = node.get("metadata") or {}
    got = meta.get("annotations") if isinstance(meta, Mapping) else None
    return got if isinstance(got, Mapping) else {}


def _indices(text: Any) -> set[int]:
    """The GPU indices of an index-list annotation as the agent reads it; none when unreadable."""
    from gpufleet.agent.health import HealthAnnotationError, parse_gpu_indices

    if not isinstance(text, str):
        return set()
    try:
        return set(parse_gpu_indices(text, "annotation"))
    except HealthAnnotationError:
        return set()


def _fail(err: Exception) -> CommandError:
    if isinstance(err, ClusterAccessError):
        return CommandError(str(err), exit_code=err.exit_code)
    return CommandError(str(err), exit_code=1)


@click.command(cls=Command)
@click.argument("target", metavar="NODE/INDEX")
@kubeconfig_option
@context_option
def uncordon(target: str, kubeconfig: str | None, context: str | None) -> None:
    """Use GPU INDEX of NODE again at once (its agent takes the request within seconds)."""
    from gpufleet.agent.health import ANNOTATION_GPU_UNCORDON, ANNOTATION_UNHEALTHY_GPUS, merge_uncordon
    from gpufleet.agent.service import patch_node
    from gpufleet.kube import ApiError

    name, indices = parse_target(target)

    async def work(api: ClusterApi) -> tuple[str, set[int]]:
        def compute(node: dict[str, Any]) -> dict[str, Any] | None:
            annotations = _annotations(node)
            existing = annotations.get(ANNOTATION_GPU_UNCORDON)
            wanted = merge_uncordon(existing if isinstance(existing, str) else None, indices)
            if annotations.get(ANNOTATION_GPU_UNCORDON) == wanted:
                return None
            rv = str((node.get("metadata") or {}).get("resourceVersion") or "")
            return {"metadata": {"resourceVersion": rv, "annotations": {ANNOTATION_GPU_UNCORDON: wanted}}}

        try:
            node, _ = await patch_node(api, name, compute)
        except ApiError as err:
            raise ClusterAccessError(f"{api.server}: patch node {name}: {err}") from None
        if node is None:
            raise ClusterAccessError(f"node {name} does not exist", exit_code=2)
        annotations = _annotations(node)
        return str(annotations.get(ANNOTATION_GPU_UNCORDON, "")), _indices(annotations.get(ANNOTATION_UNHEALTHY_GPUS))

    try:
        request, unhealthy = with_api(kubeconfig, context, work)
    except (ClusterAccessError, OSError) as err:
        raise _fail(err) from None
    healthy_already = sorted(indices - unhealthy)
    note = f" (GPU {','.join(map(str, healthy_already))} not marked unhealthy now)" if healthy_already else ""
    click.echo(f"node {name}: {ANNOTATION_GPU_UNCORDON}={request}: its agent will use GPU "
               f"{','.join(map(str, sorted(indices)))} again{note}")


@click.command("list", cls=Command)
@click.argument("node", required=False)
@kubeconfig_option
@context_option
def list_gpus(node: str | None, kubeconfig: str | None, context: str | None) -> None:
    """The unhealthy GPUs of every node (or NODE) and why, as the node agents wrote them."""
    from gpufleet.agent.health import (
        ANNOTATION_GPU_HEALTH,
        ANNOTATION_GPU_UNCORDON,
        ANNOTATION_UNHEALTHY_GPUS,
        load_health,
    )
    from gpufleet.kube import ApiError, Kind

    async def work(api: ClusterApi) -> list[dict[str, Any]]:
        try:
            if node is not None:
                one = await api.get(Kind.NODE, "", node)
                if one is None:
                    raise ClusterAccessError(f"node {node} does not exist", exit_code=2)
                return [one]
            return (await api.list(Kind.NODE)).items
        except ApiError as err:
            raise ClusterAccessError(f"{api.server}: read nodes: {err}") from None

    try:
        nodes = with_api(kubeconfig, context, work)
    except (ClusterAccessError, OSError) as err:
        raise _fail(err) from None
    rows = []
    for obj in sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name"))):
        name = str((obj.get("metadata") or {}).get("name"))
        annotations = _annotations(obj)
        saved = annotations.get(ANNOTATION_GPU_HEALTH)
        history = load_health(saved if isinstance(saved, str) else None).gpus  # unreadable: no reasons
        pending = _indices(annotations.get(ANNOTATION_GPU_UNCORDON))
        for index in sorted(_indices(annotations.get(ANNOTATION_UNHEALTHY_GPUS))):
            record = history.get(index)
            why, uuid = (record.reason, record.uuid) if record is not None else ("", "")
            rows.append((name, str(index), uuid or "-", why or "-", "uncordon requested" if index in pending else ""))
    if not rows:
        click.echo("no unhealthy GPUs" + (f" on node {node}" if node else ""))
        return
    widths = [max(len(r[i]) for r in [("NODE", "GPU", "UUID", "REASON", ""), *rows]) for i in range(4)]
    for row in [("NODE", "GPU", "UUID", "REASON", ""), *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + f"  {row[4]}".rstrip())
