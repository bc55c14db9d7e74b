"""``gpufleet controller``: schedule the pods of ``schedulerName: gpufleet`` in a live cluster."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

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

__all__ = ["LedgerFlags", "controller", "ledger_flags"]

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
@click.option("--group-workloads/--no-group-workloads", default=True, show_default=True,
              help="The pod-grouper: PodGroups and pod-group labels derived from workload owners (Job, JobSet, "
                   "PyTorchJob, MPIJob, TrainJob, RayCluster, RayJob, LeaderWorkerSet, Deployment, StatefulSet).")
@click.option("--database", default=None, metavar="URL",
              help="The usage ledger: an SQLite file path (or sqlite:///FILE) or postgresql+psycopg://...; "
                   "default: no ledger.")
@click.option("--cost-centre-labels", "--cost-center-labels", "cost_centre_labels", default="", metavar="KEYS",
              help="Pod label keys (comma-separated) copied onto each ledger interval, e.g. team,cost-center.")
@click.option("--ledger-buffer", type=click.IntRange(1), default=200_000, show_default=True,
              help="Ledger events held in memory while the database cannot be written.")
@click.option("--telemetry-exporters", default=None, metavar="URLS",
              help="dcgm-exporter /metrics URLs (comma-separated) read for the ledger's GPU utilisation.")
@click.option("--telemetry-prometheus", default=None, metavar="URL",
              help="Or a Prometheus server (base URL) asked for the dcgm-exporter series.")
@click.option("--telemetry-interval", type=FiniteFloatRange(min=1), default=30.0, show_default=True,
              help="Seconds between telemetry reads.")
@log_level_option
@log_format_option
def controller(kubeconfig: str | None, server: str | None, namespace: str, lease_name: str, identity: str | None,
               leader_elect: bool, min_interval: float, metrics_port: int, health_port: int | None,
               concurrency: int, annotate_via: str, http_engine: str, log_level: str,
               log_format: str = "text", database: str | None = None, cost_centre_labels: str = "",
               ledger_buffer: int = 200_000, telemetry_exporters: str | None = None,
               telemetry_prometheus: str | None = None, telemetry_interval: float = 30.0,
               group_workloads: bool = True) -> None:
    """Run the scheduler controller: bind pods of schedulerName gpufleet with the engine's decisions.

    See docs/controller.md.
    """
    from gpufleet.kube import connect

    configure_logging(log_level, log_format)
    ledger = _ledger(database, cost_centre_labels, ledger_buffer, telemetry_exporters, telemetry_prometheus,
                     telemetry_interval, (namespace, identity or _default_identity()))
    if kubeconfig is not None and not os.path.isfile(kubeconfig):
        raise CommandError(f"--kubeconfig: no such file: {kubeconfig}")
    try:
        api = connect(kubeconfig, server=server, fast_http=http_engine == "aiohttp", concurrency=concurrency)
    except ClusterAccessError as err:
        raise CommandError(f"cannot use the cluster configuration: {err}") from None
    name = identity or _default_identity()
    lease = LeaseConfig(namespace=namespace, name=lease_name, identity=name) if leader_elect else None
    config = ControllerConfig(identity=name, lease=lease, min_interval=min_interval, concurrency=concurrency,
                              annotate_via=annotate_via, group_workloads=group_workloads)
    ports = tuple(p for p in (metrics_port, health_port) if p)
    try:
        asyncio.run(_serve(Controller(api, RealClock(), config, ControllerMetrics(), **ledger), "0.0.0.0", ports))
    except OSError as err:
        raise CommandError(f"cannot serve on ports {ports}: {err.strerror or err}", exit_code=1) from None


def _ledger(database: str | None, labels: str, buffer: int, exporters: str | None, prometheus: str | None,
            interval: float, pod: tuple[str, str]) -> dict[str, Any]:
    """The Controller's ledger arguments from the options (none without --database); bad ones: exit 2."""
    flags = ledger_flags(database, labels, exporters, prometheus)
    if database is None:
        return {}
    keys = flags.cost_centre_labels
    from gpufleet.kube.controller.accounting import AccountingConfig
    from gpufleet.ledger import open_ledger

    store = open_ledger(database, connect=False)  # a bad URL: exit 2; an unreachable database: buffered
    telemetry: Any = None
    clock = RealClock()
    if flags.exporters:
        from gpufleet.telemetry import ExporterScrape

        telemetry = ExporterScrape(list(flags.exporters), now=clock.now)
    elif flags.prometheus:
        from gpufleet.telemetry import PrometheusQuery

        telemetry = PrometheusQuery(flags.prometheus, now=clock.now)
    config = AccountingConfig(cost_centre_labels=keys, buffer_capacity=buffer, telemetry_interval=interval,
                              event_pod=pod)
    return {"ledger": store, "accounting": config, "telemetry": telemetry}


@dataclass(frozen=True)
class LedgerFlags:
    """The ledger's flags read: cost-centre label keys, dcgm-exporter URLs, a Prometheus URL."""

    cost_centre_labels: tuple[str, ...] = ()
    exporters: tuple[str, ...] = ()
    prometheus: str = ""


def ledger_flags(database: str | None, labels: str, exporters: str | None, prometheus: str | None) -> LedgerFlags:
    """The ledger's flags as the controller reads them (``gpufleet manifests`` renders them under the same
    rules); bad ones: :class:`CommandError` (one line, exit 2)."""
    keys = tuple(k.strip() for k in labels.split(",") if k.strip())
    if database is None:
        for flag, value in (("--cost-centre-labels", keys), ("--telemetry-exporters", exporters),
                            ("--telemetry-prometheus", prometheus)):
            if value:
                raise CommandError(f"{flag}: needs --database (the usage ledger is off without it)")
        return LedgerFlags()
    if exporters and prometheus:
        raise CommandError("--telemetry-exporters and --telemetry-prometheus: give one of them")
    return LedgerFlags(keys, tuple(_urls("--telemetry-exporters", exporters)) if exporters else (),
                       _urls("--telemetry-prometheus", prometheus)[0] if prometheus else "")


def _urls(flag: str, text: str) -> list[str]:
    urls = [u.strip() for u in text.split(",") if u.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise CommandError(f"{flag}: {url!r} is not an http:// or https:// URL")
    if not urls:
        raise CommandError(f"{flag}: no URL given")
    return urls
