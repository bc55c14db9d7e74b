"""``gpufleet device-plugin``: the kubelet device plugin that gives containers the GPUs gpufleet chose
(docs/gpu-assignment.md, "Device plugin path"). Needs the ``agent`` extra: ``pip install 'gpufleet[agent]'``."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

import click

from gpufleet.agent.deviceplugin.paths import DEFAULT_KUBELET_DIR
from gpufleet.commands.base import Command, CommandError, cancel_on_signals
from gpufleet.commands.logs import configure_logging, log_format_option, log_level_option
from gpufleet.domain.wire import MPS_HOST_ROOT

if TYPE_CHECKING:
    from gpufleet.agent.deviceplugin import DevicePlugin

__all__ = ["device_plugin"]

_EXTRA = "install gpufleet with the agent extra: pip install 'gpufleet[agent]'"


async def _serve(plugin: DevicePlugin) -> None:
    cancel_on_signals()
    try:
        await plugin.run()
    except asyncio.CancelledError:
        logging.getLogger(__name__).info("stopping")
    finally:
        await plugin.pods.api.close()


@click.command(cls=Command)
@click.option("--node", required=True, help="This node's name (the pods bound to it are looked up); "
                                             "in a DaemonSet: the downward API's spec.nodeName.")
@click.option("--kubelet-dir", type=click.Path(file_okay=False), default=DEFAULT_KUBELET_DIR,
              show_default=True, help="The kubelet's device plugins directory (kubelet.sock and the plugins' sockets).")
@click.option("--device-list-strategy", type=click.Choice(["cdi", "envvar"]), default="cdi", show_default=True,
              help="cdi: CDI devices nvidia.com/gpu=<UUID> and /dev/nvidia<N> (NVIDIA_VISIBLE_DEVICES=void); "
                   "envvar: NVIDIA_VISIBLE_DEVICES=<UUIDs> for the NVIDIA container runtime.")
@click.option("--mps-host-dir", default=MPS_HOST_ROOT, show_default=True,
              help="The MPS DaemonSet's host directory: <dir>/gpu-<index>/pipe and /shm.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="Kubeconfig file; default: in-cluster service account, then $KUBECONFIG, ~/.kube/config.")
@click.option("--server", "api_server", default=None, help="A plain API server URL instead of a kubeconfig.")
@log_level_option
@log_format_option
def device_plugin(node: str, kubelet_dir: str, device_list_strategy: str, mps_host_dir: str,
                  kubeconfig: str | None, api_server: str | None, log_level: str,
                  log_format: str = "text") -> None:
    """Advertise nvidia.com/gpu and gpufleet.dev/mps-share to the kubelet, and give each container the
    GPUs gpufleet annotated on its pod (refusing any other)."""
    if not node.strip():
        raise CommandError("--node must not be empty")
    if not mps_host_dir.startswith("/"):
        raise CommandError(f"--mps-host-dir must be an absolute path, got {mps_host_dir!r}")
    if kubeconfig is not None and not os.path.isfile(kubeconfig):
        raise CommandError(f"--kubeconfig: no such file: {kubeconfig}")
    if not os.path.isdir(kubelet_dir):
        raise CommandError(f"--kubelet-dir: no such directory: {kubelet_dir} (is this a node with a kubelet?)")
    try:
        from gpufleet.agent.deviceplugin import DevicePlugin, PluginSettings, PollingWatcher
    except ImportError as err:
        if (err.name or "").split(".")[0] in ("grpc", "google"):
            raise CommandError(f"the device plugin needs gRPC ({err.name} is missing): {_EXTRA}", exit_code=1) from None
        raise CommandError(str(err), exit_code=1) from None
    from gpufleet.agent.gpus import GpuReaderError
    from gpufleet.agent.gpus.nvml import open_nvml
    from gpufleet.kube import ClusterAccessError, RealClock, connect

    configure_logging(log_level, log_format)
    try:
        reader = open_nvml()
    except GpuReaderError as err:
        raise CommandError(str(err), exit_code=1) from None
    try:
        api = connect(kubeconfig, server=api_server)
    except ClusterAccessError as err:
        reader.close()
        raise CommandError(f"cannot use the cluster configuration: {err}", exit_code=err.exit_code) from None
    clock = RealClock()
    settings = PluginSettings(node=node, device_list_strategy=device_list_strategy, mps_host_root=mps_host_dir)
    plugin = DevicePlugin(settings, reader, api, clock, PollingWatcher(clock), kubelet_dir)
    try:
        asyncio.run(_serve(plugin))
    finally:
        reader.close()
