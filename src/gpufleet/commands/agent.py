"""``gpufleet agent``: the node agent that keeps its Node true to its GPUs (docs/agent.md): GPU
discovery labels, per-GPU health (``gpufleet.dev/unhealthy-gpus``, the ``GPUHealthy`` condition,
Events) and the usage export on ``/metrics``. Needs the ``agent`` extra for NVML:
``pip install 'gpufleet[agent]'``; without NVML it keeps running and says GPUHealthy=Unknown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING

import click

from gpufleet.agent.health import HealthPolicy
from gpufleet.commands.base import Command, CommandError, FiniteFloatRange, cancel_on_signals
from gpufleet.commands.logs import configure_logging, log_format_option, log_level_option

if TYPE_CHECKING:
    from gpufleet.agent.gpus import GpuReader
    from gpufleet.agent.service import AgentLoop
    from gpufleet.agent.service.pods import PodsOnNode

__all__ = ["agent"]

AGENT_CONTROLLER = "gpufleet.dev/agent"  # the Events' reportingController


def _open_nvml() -> GpuReader:
    from gpufleet.agent.gpus.nvml import open_nvml

    return open_nvml()


async def _serve(loop: AgentLoop, pods: PodsOnNode | None, metrics_host: str, metrics_port: int) -> None:
    from gpufleet.kube import serve_http

    cancel_on_signals()
    log = logging.getLogger(__name__)
    runner = None
    tasks: list[asyncio.Task[None]] = []
    try:
        if metrics_port:
            runner = await serve_http(loop.metrics, lambda: loop.polls > 0, metrics_host, (metrics_port,))
        if pods is not None:
            tasks.append(asyncio.create_task(pods.run()))
        await loop.run()
    except asyncio.CancelledError:
        log.info("stopping")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if runner is not None:
            await runner.cleanup()
        await loop.writer.api.close()


_DEFAULTS = HealthPolicy()  # the flags default to the health rules' own defaults (one place)

@click.command(cls=Command)
@click.option("--node-name", envvar="NODE_NAME", default="", show_envvar=True,
              help="This node's name; in the DaemonSet: the downward API's spec.nodeName.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="Kubeconfig file; default: in-cluster service account, then $KUBECONFIG, ~/.kube/config.")
@click.option("--server", "api_server", default=None, help="A plain API server URL instead of a kubeconfig.")
@click.option("--interval", type=FiniteFloatRange(min=0.05, max=3600), default=1.0, show_default=True,
              help="Seconds between two polls of the GPUs.")
@click.option("--clean-period", type=FiniteFloatRange(min=1, max=30 * 86400), default=_DEFAULTS.clean_period_s,
              show_default=True,
              help="Seconds without a new error after which an unhealthy GPU is used again "
                   "(sooner: gpufleet gpu uncordon NODE/INDEX).")
@click.option("--retired-pages-limit", type=click.IntRange(min=1), default=_DEFAULTS.retired_pages_threshold,
              show_default=True,
              help="Retired pages at or over this make a GPU unhealthy (pre-Ampere GPUs).")
@click.option("--feature-labels/--no-feature-labels", default=True, show_default=True,
              help="Write the nvidia.com/gpu.* labels (off where NVIDIA's GPU feature discovery writes them).")
@click.option("--usage-export/--no-usage-export", default=True, show_default=True,
              help="Export utilisation per GPU and per pod on /metrics (watches this node's pods).")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=9402, show_default=True,
              help="Port of /metrics (the usage export) and /healthz; 0: none.")
@click.option("--metrics-host", default="0.0.0.0", show_default=True, help="Address /metrics listens on.")
@click.option("--proc-root", type=click.Path(file_okay=False), default="/proc", show_default=True,
              help="The host's /proc (hostPID, or mounted read-only): a GPU process's cgroup names its pod.")
@click.option("--dry-run", is_flag=True, help="Read the GPUs and the Node, print what would be written, write nothing.")
@log_level_option
@log_format_option
def agent(node_name: str, kubeconfig: str | None, api_server: str | None, interval: float, clean_period: float,
          retired_pages_limit: int, feature_labels: bool, usage_export: bool, metrics_port: int,
          metrics_host: str, proc_root: str, dry_run: bool, log_level: str, log_format: str = "text") -> None:
    """Watch this node's GPUs and write what the scheduler needs on its Node: discovery labels, the
    unhealthy GPUs, the GPUHealthy condition and Events; export utilisation per pod on /metrics."""
    if not node_name.strip():
        raise CommandError("--node-name (or $NODE_NAME) must name this node")
    if kubeconfig is not None and not os.path.isfile(kubeconfig):
        raise CommandError(f"--kubeconfig: no such file: {kubeconfig}")
    if usage_export and not os.path.isdir(proc_root):
        raise CommandError(f"--proc-root: no such directory: {proc_root}")
    from gpufleet.agent.service import AgentLoop, AgentSettings, NodeWriter, print_write
    from gpufleet.agent.service.pods import PodsOnNode
    from gpufleet.agent.service.wiring import agent_parts
    from gpufleet.kube import ClusterAccessError, RealClock, connect
    from gpufleet.kube.controller.events import EventRecorder

    configure_logging(log_level, log_format)
    try:
        api = connect(kubeconfig, server=api_server, field_manager="gpufleet-agent")
    except ClusterAccessError as err:
        raise CommandError(f"cannot use the cluster configuration: {err}", exit_code=err.exit_code) from None
    clock = RealClock()
    metrics, usage = agent_parts(node_name, proc_root, export_usage=usage_export)
    events = EventRecorder(api, clock, identity=node_name, reporting_controller=AGENT_CONTROLLER)
    writer = NodeWriter(api, node_name, clock, events, echo=print_write if dry_run else None)
    # The pods on the node are for the usage export only: without one, no pod is watched.
    pods = PodsOnNode(api, node_name, clock) if usage is not None and not dry_run else None
    policy = HealthPolicy(clean_period_s=clean_period, retired_pages_threshold=retired_pages_limit)
    settings = AgentSettings(node=node_name, interval_s=interval, policy=policy, feature_labels=feature_labels)
    loop = AgentLoop(settings, _open_nvml, writer, clock, metrics=metrics, usage=usage,
                     pods=pods if pods is not None else tuple)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(loop, pods, metrics_host, metrics_port if not dry_run else 0))
