"""The kubelet device plugin API (v1beta1), as generated at build time from ``proto/api.proto``.

The only module that imports the generated code (``_generated``, written by setup.py's build hook
with grpcio-tools, typed by mypy-protobuf's stubs); the rest of the plugin uses these names.
"""

from __future__ import annotations

try:
    from gpufleet.agent.deviceplugin._generated import api_pb2 as pb
    from gpufleet.agent.deviceplugin._generated import api_pb2_grpc as pb_grpc
except ImportError as err:  # a source tree that was never built
    raise ImportError(
        "gpufleet's device plugin API modules were not generated (they are built from "
        f"gpufleet/agent/deviceplugin/proto/api.proto on install): reinstall gpufleet, e.g. pip install -e . ({err})"
    ) from err

__all__ = ["API_VERSION", "HEALTHY", "KUBELET_SOCKET", "UNHEALTHY", "pb", "pb_grpc"]

# k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/constants.go
API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"  # in the device plugins directory, /var/lib/kubelet/device-plugins
