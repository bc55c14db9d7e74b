"""``gpufleet controller``: schedule the pods of ``schedulerName: gpufleet`` in a live cluster."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

import click

from gpufleet.commands.base import Command, CommandError, FiniteFloatRange, cancel_on_signals
from gpufleet.commands.logs import configure_logging, log_format_option, log_level_option
from gpufleet.kube import (
    ClusterAccessError,
    Controller,
    ControllerConfig,
    ControllerMetrics,
    LeaseConfig,
    RealClock,
    serve_http,
)

__all__ = ["controller"]

DEFAULT_LEASE = "gpufleet-controller"
DEFAULT_NAMESPACE = "gpufleet-system"


def _default_identity() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


async def _serve(controller: Controller, host: str, ports: tuple[int, ...]) -> None:
    runner = await serve_http(controller.metrics, lambda: controller.ready, host, ports) if ports else None
    cancel_on_signals()
    try:
        await controller.run()
    except asyncio.CancelledError:
        logging.getLogger(__name__).info("stopping")
    finally:
        await controller.api.close()
        if runner is not None:
            await runner.cleanup()


@click.command(cls=Command)
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="Kubeconfig file; default: in-cluster service account, then $KUBECONFIG, ~/.kube/config.")
@click.option("--server", default=None, help="A plain API server URL instead of a kubeconfig (kubectl proxy).")
@click.option("--namespace", "--leader-election-namespace", "namespace",
              default=lambda: os.environ.get("POD_NAMESPACE", DEFAULT_NAMESPACE), show_default=DEFAULT_NAMESPACE,
              help="Namespace of the leader-election Lease ($POD_NAMESPACE when set).")
@click.option("--lease-name", "--leader-election-id", "lease_name", default=DEFAULT_LEASE, show_default=True)
@click.option("--identity", default=None, help="This replica's name in the Lease (default: $POD_NAME or host-pid).")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True,
              help="Elect a leader among replicas; without it this replica always acts (run only one).")
@click.option("--min-interval", type=FiniteFloatRange(min=0), default=1.0, show_default=True,
              help="Seconds at least between the starts of two scheduling cycles.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port of /metrics (and /healthz, /readyz); 0: none.")
@click.option("--health-port", type=click.IntRange(0, 65535), default=None,
              help="Another port for /healthz and /readyz (they are on the metrics port too).")
@click.option("--concurrency", type=click.IntRange(1, 1024), default=64, show_default=True,
              help="API calls in flight at once.")
@click.option("--annotate-via", type=click.Choice(["patch", "binding"]), default="patch", show_default=True,
              help="patch: annotate a pod (gpu-index, gpu-blocks), then post its Binding; binding: the Binding "
                   "carries the annotations and the API server writes them with the node (one call per pod).")
@click.option("--http", "http_engine", type=click.Choice(["aiohttp", "httpx"]), default="aiohttp", show_default=True,
              help="HTTP engine under lightkube (httpx honours HTTP proxies).")
@log_level_option
@log_format_option
def controller(kubeconfig: str | None, server: str | None, namespace: str, lease_name: str, identity: str | None,
               leader_elect: bool, min_interval: float, metrics_port: int, health_port: int | None,
               concurrency: int, annotate_via: str, http_engine: str, log_level: str,
               log_format: str = "text") -> None:
    """Run the scheduler controller: bind pods of schedulerName gpufleet with the engine's decisions.

    See docs/controller.md.
    """
    from gpufleet.kube import connect

    configure_logging(log_level, log_format)
    if kubeconfig is not None and not os.path.isfile(kubeconfig):
        raise CommandError(f"--kubeconfig: no such file: {kubeconfig}")
    try:
        api = connect(kubeconfig, server=server, fast_http=http_engine == "aiohttp", concurrency=concurrency)
    except ClusterAccessError as err:
        raise CommandError(f"cannot use the cluster configuration: {err}") from None
    name = identity or _default_identity()
    lease = LeaseConfig(namespace=namespace, name=lease_name, identity=name) if leader_elect else None
    config = ControllerConfig(identity=name, lease=lease, min_interval=min_interval, concurrency=concurrency,
                              annotate_via=annotate_via)
    ports = tuple(p for p in (metrics_port, health_port) if p)
    try:
        asyncio.run(_serve(Controller(api, RealClock(), config, ControllerMetrics()), "0.0.0.0", ports))
    except OSError as err:
        raise CommandError(f"cannot serve on ports {ports}: {err.strerror or err}", exit_code=1) from None
