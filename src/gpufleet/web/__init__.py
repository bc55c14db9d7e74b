"""gpufleet's web dashboard (``gpufleet dashboard``): the cluster, the queues, why each job waits and
what it all costs, from a snapshot file or a live cluster, with an optional usage ledger.

A service layer: it reads the domain, the engine, the adapters, the ledger, the simulator and
``gpufleet.kube``'s client and inspect rooms; nothing but the CLI imports it. Its dependencies
(Starlette, Jinja2, uvicorn) are the optional extra ``web``.
"""

from __future__ import annotations

from gpufleet.web.access import EVERYTHING, Authorizer, Visibility
from gpufleet.web.app import create_app
from gpufleet.web.source import ClusterSource, DashboardSource, SnapshotSource

__all__ = ["EVERYTHING", "Authorizer", "ClusterSource", "DashboardSource", "SnapshotSource", "Visibility", "create_app"]
