"""``gpufleet device-plugin``: a kubelet device plugin that gives containers exactly the GPUs
gpufleet chose (docs/gpu-assignment.md, "Device plugin path").

- :mod:`.api`: the v1beta1 device plugin API, generated at build time from the vendored ``proto/api.proto``;
- :mod:`.lookup`: which pod the kubelet is starting and whether its request matches the annotation (pure);
- :mod:`.pods`: the node's pods of gpufleet's, kept by an informer over the API port;
- :mod:`.service`: the DevicePlugin gRPC service of one resource;
- :mod:`.plugin`: serving, registering with the kubelet and registering again after its restarts.
"""

from typing import TYPE_CHECKING

from gpufleet._lazy import lazy_exports

if TYPE_CHECKING:
    from gpufleet.agent.deviceplugin.lookup import SHARES_PER_GPU, PodRecord, plugin_pod, pod_record
    from gpufleet.agent.deviceplugin.paths import DEFAULT_KUBELET_DIR
    from gpufleet.agent.deviceplugin.plugin import (
        RESOURCES,
        DevicePlugin,
        PathWatcher,
        PollingWatcher,
    )
    from gpufleet.agent.deviceplugin.service import DEVICE_LIST_STRATEGIES, PluginSettings

__all__ = [
    "DEFAULT_KUBELET_DIR",
    "DEVICE_LIST_STRATEGIES",
    "RESOURCES",
    "SHARES_PER_GPU",
    "DevicePlugin",
    "PathWatcher",
    "PluginSettings",
    "PodRecord",
    "PollingWatcher",
    "plugin_pod",
    "pod_record",
]

__getattr__ = lazy_exports(__name__, {
    "SHARES_PER_GPU": "gpufleet.agent.deviceplugin.lookup",
    "PodRecord": "gpufleet.agent.deviceplugin.lookup",
    "plugin_pod": "gpufleet.agent.deviceplugin.lookup",
    "pod_record": "gpufleet.agent.deviceplugin.lookup",
    "DEFAULT_KUBELET_DIR": "gpufleet.agent.deviceplugin.paths",
    "RESOURCES": "gpufleet.agent.deviceplugin.plugin",
    "DevicePlugin": "gpufleet.agent.deviceplugin.plugin",
    "PathWatcher": "gpufleet.agent.deviceplugin.plugin",
    "PollingWatcher": "gpufleet.agent.deviceplugin.plugin",
    "DEVICE_LIST_STRATEGIES": "gpufleet.agent.deviceplugin.service",
    "PluginSettings": "gpufleet.agent.deviceplugin.service",
})
