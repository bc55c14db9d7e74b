"""Adapters: everything gpufleet reads or writes from outside, turned into the domain model.

The public face of the package, for the simulator, the Kubernetes side and the commands: the
snapshot loader (Kubernetes YAML or JSON) and writer, the loader's errors, the converters of single
Kubernetes objects, the CRD spec models, quantities, the cluster spec and the trace readers.
Modules whose names start with ``_`` are this package's own (an import-linter contract says so).

What ``gpufleet replay`` reads anyway (the loader and what it imports) is imported here at once;
the rest (the writer, the output renderers, the cluster spec, the traces) on first use, so that
start-up stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet._lazy import lazy_exports
from gpufleet.adapters._fields import FieldError
from gpufleet.adapters._k8s_core import (
    claim_from_dict,
    namespace_from_dict,
    node_from_dict,
    persistent_volume_from_dict,
    pod_from_dict,
    priority_class_from_dict,
    storage_class_from_dict,
)
from gpufleet.adapters._k8s_dra import (
    claim_template_from_dict,
    device_class_from_dict,
    resource_claim_from_dict,
    resource_slice_from_dict,
)
from gpufleet.adapters._k8s_models import (
    QUANTITY_JSON_SCHEMA,
    PodGroupSpec,
    ProjectModel,
    QueueSpec,
    ResourceFlavorSpec,
    SchedulerConfigSpec,
    pod_group_from_dict,
    project_from_dict,
    project_namespace_names,
    queue_from_dict,
    resource_flavor_from_dict,
    scheduler_config_from_dict,
)
from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import (
    load_config_file,
    load_config_text,
    load_objects_file,
    load_snapshot_documents,
    load_snapshot_file,
    load_snapshot_text,
    reader_for,
    validate_snapshot,
)
from gpufleet.adapters.quantity import to_milli

if TYPE_CHECKING:
    from gpufleet.adapters.cluster_spec import ClusterLayout, cluster_from_trace_nodes, load_cluster_spec_file
    from gpufleet.adapters.devices import DeviceCache, DeviceView, resolve_devices
    from gpufleet.adapters.k8s_yaml_writer import (
        device_config_document,
        dump_documents_json,
        dump_snapshot,
        dump_snapshot_json,
        format_time,
        snapshot_to_documents,
    )
    from gpufleet.adapters.output import decisions_to_dict, render_json, render_table
    from gpufleet.adapters.owners import link_from_dict, owner_from_dict, read_owner
    from gpufleet.adapters.traces import load_nodes, load_trace
    from gpufleet.adapters.traces.records import TraceJob, TraceNode

__all__ = [
    "QUANTITY_JSON_SCHEMA",
    "ClusterLayout",
    "DeviceCache",
    "DeviceView",
    "FieldError",
    "InputError",
    "PodGroupSpec",
    "ProjectModel",
    "QueueSpec",
    "ResourceFlavorSpec",
    "SchedulerConfigSpec",
    "TraceJob",
    "TraceNode",
    "claim_from_dict",
    "claim_template_from_dict",
    "cluster_from_trace_nodes",
    "decisions_to_dict",
    "device_class_from_dict",
    "device_config_document",
    "dump_documents_json",
    "dump_snapshot",
    "dump_snapshot_json",
    "format_time",
    "link_from_dict",
    "load_cluster_spec_file",
    "load_config_file",
    "load_config_text",
    "load_nodes",
    "load_objects_file",
    "load_snapshot_documents",
    "load_snapshot_file",
    "load_snapshot_text",
    "load_trace",
    "namespace_from_dict",
    "node_from_dict",
    "owner_from_dict",
    "persistent_volume_from_dict",
    "pod_from_dict",
    "pod_group_from_dict",
    "priority_class_from_dict",
    "project_from_dict",
    "project_namespace_names",
    "queue_from_dict",
    "read_owner",
    "reader_for",
    "render_json",
    "render_table",
    "resolve_devices",
    "resource_claim_from_dict",
    "resource_flavor_from_dict",
    "resource_slice_from_dict",
    "scheduler_config_from_dict",
    "snapshot_to_documents",
    "storage_class_from_dict",
    "to_milli",
    "validate_snapshot",
]

__getattr__ = lazy_exports(__name__, {
    "ClusterLayout": "gpufleet.adapters.cluster_spec",
    "cluster_from_trace_nodes": "gpufleet.adapters.cluster_spec",
    "load_cluster_spec_file": "gpufleet.adapters.cluster_spec",
    "DeviceCache": "gpufleet.adapters.devices",
    "DeviceView": "gpufleet.adapters.devices",
    "resolve_devices": "gpufleet.adapters.devices",
    "device_config_document": "gpufleet.adapters.k8s_yaml_writer",
    "dump_documents_json": "gpufleet.adapters.k8s_yaml_writer",
    "dump_snapshot": "gpufleet.adapters.k8s_yaml_writer",
    "dump_snapshot_json": "gpufleet.adapters.k8s_yaml_writer",
    "format_time": "gpufleet.adapters.k8s_yaml_writer",
    "snapshot_to_documents": "gpufleet.adapters.k8s_yaml_writer",
    "decisions_to_dict": "gpufleet.adapters.output",
    "render_json": "gpufleet.adapters.output",
    "render_table": "gpufleet.adapters.output",
    "link_from_dict": "gpufleet.adapters.owners",
    "owner_from_dict": "gpufleet.adapters.owners",
    "read_owner": "gpufleet.adapters.owners",
    "load_nodes": "gpufleet.adapters.traces",
    "load_trace": "gpufleet.adapters.traces",
    "TraceJob": "gpufleet.adapters.traces.records",
    "TraceNode": "gpufleet.adapters.traces.records",
})
