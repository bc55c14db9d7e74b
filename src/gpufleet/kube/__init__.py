"""Kubernetes integration, in rooms that change for different reasons:

- :mod:`~gpufleet.kube.client`: the one port over the Kubernetes API, its lightkube adapter and
  the fast calls (the only place that knows lightkube);
- :mod:`~gpufleet.kube.controller`: the controller's loop, informers, binder, events, statuses,
  leader election, conversion to the domain, metrics, and the lifecycles of its work;
- :mod:`~gpufleet.kube.webhook`: the admission webhook that gives fractional pods their MPS setup;
- :mod:`~gpufleet.kube.inspect`: ``gpufleet snapshot`` and ``gpufleet explain`` on a live cluster;
- :mod:`~gpufleet.kube.install`: the CRDs, RBAC rules and manifests that install gpufleet.

Rooms depend downwards only (install > controller > inspect | webhook > client; an import-linter
contract says so). This module is the face the commands and :mod:`gpufleet.testing` use. The port's
names are imported at once (the standard library only); the rest on first use, so that a command
pays only for the room it runs (lightkube, aiohttp and prometheus-client are not cheap).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet._lazy import lazy_exports
from gpufleet.kube.client.port import (
    ApiError,
    Clock,
    ClusterAccessError,
    ClusterApi,
    FieldSelector,
    Kind,
    ObjectList,
    RealClock,
    WatchEvent,
    access_error,
    object_key,
)

if TYPE_CHECKING:
    from gpufleet.kube.client.lightkube_api import LightkubeApi, connect
    from gpufleet.kube.controller.convert import label_selector_matches
    from gpufleet.kube.controller.leader import LeaseConfig
    from gpufleet.kube.controller.loop import Controller, ControllerConfig
    from gpufleet.kube.controller.metrics import ControllerMetrics
    from gpufleet.kube.controller.serving import serve_http
    from gpufleet.kube.inspect.explain import Explanation, explain_in_cluster
    from gpufleet.kube.inspect.snapshot import ClusterSnapshot, read_cluster
    from gpufleet.kube.install.manifests import (
        DEFAULT_IMAGE,
        DEFAULT_NAMESPACE,
        LEDGER_VOLUMES,
        InstallOptions,
        LedgerInstall,
        controller_rbac_rules,
        render_crds,
        render_manifests,
        write_chart_files,
    )
    from gpufleet.kube.webhook.mutation import DEFAULT_MPS_HOST_DIR, MutationSettings
    from gpufleet.kube.webhook.server import ServerSettings, run_server, tls_context

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_MPS_HOST_DIR",
    "DEFAULT_NAMESPACE",
    "LEDGER_VOLUMES",
    "ApiError",
    "Clock",
    "ClusterAccessError",
    "ClusterApi",
    "ClusterSnapshot",
    "Controller",
    "ControllerConfig",
    "ControllerMetrics",
    "Explanation",
    "FieldSelector",
    "InstallOptions",
    "Kind",
    "LeaseConfig",
    "LedgerInstall",
    "LightkubeApi",
    "MutationSettings",
    "ObjectList",
    "RealClock",
    "ServerSettings",
    "WatchEvent",
    "access_error",
    "connect",
    "controller_rbac_rules",
    "explain_in_cluster",
    "label_selector_matches",
    "object_key",
    "read_cluster",
    "render_crds",
    "render_manifests",
    "run_server",
    "serve_http",
    "tls_context",
    "write_chart_files",
]

_CLIENT, _CONTROLLER = "gpufleet.kube.client", "gpufleet.kube.controller"
__getattr__ = lazy_exports(__name__, {
    "LightkubeApi": f"{_CLIENT}.lightkube_api",
    "connect": f"{_CLIENT}.lightkube_api",
    "label_selector_matches": f"{_CONTROLLER}.convert",
    "LeaseConfig": f"{_CONTROLLER}.leader",
    "Controller": f"{_CONTROLLER}.loop",
    "ControllerConfig": f"{_CONTROLLER}.loop",
    "ControllerMetrics": f"{_CONTROLLER}.metrics",
    "serve_http": f"{_CONTROLLER}.serving",
    "Explanation": "gpufleet.kube.inspect.explain",
    "explain_in_cluster": "gpufleet.kube.inspect.explain",
    "ClusterSnapshot": "gpufleet.kube.inspect.snapshot",
    "read_cluster": "gpufleet.kube.inspect.snapshot",
    **dict.fromkeys(("DEFAULT_IMAGE", "DEFAULT_NAMESPACE", "InstallOptions", "LEDGER_VOLUMES", "LedgerInstall",
                     "controller_rbac_rules", "render_crds", "render_manifests", "write_chart_files"),
                   "gpufleet.kube.install.manifests"),
    "DEFAULT_MPS_HOST_DIR": "gpufleet.kube.webhook.mutation",
    "MutationSettings": "gpufleet.kube.webhook.mutation",
    "ServerSettings": "gpufleet.kube.webhook.server",
    "run_server": "gpufleet.kube.webhook.server",
    "tls_context": "gpufleet.kube.webhook.server",
})
