"""CustomResourceDefinitions of Queue, PodGroup, SchedulerConfig and Project, generated from our models.

One source of truth: the ``spec`` schemas come from the pydantic models the YAML loader validates
with (:mod:`gpufleet.adapters._k8s_models`) and the ``status`` schemas from the models the
controller writes with (:mod:`gpufleet.kube.controller.status`). ``model_json_schema()`` gives JSON Schema
draft 2020-12; :func:`to_structural` turns it into the "structural" OpenAPI v3.0 subset the API
server requires of CRDs
(https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema):

- no ``$ref``/``$defs``: every reference is inlined;
- every node has a ``type``, or ``x-kubernetes-int-or-string`` with exactly
  ``anyOf: [{type: integer}, {type: string}]`` (quantities);
- ``Optional[X]`` (``anyOf: [X, {type: null}]``) is just ``X``: the API server prunes nulls of
  non-nullable fields, and our loader takes null as unset too;
- ``exclusiveMinimum: 0`` (draft 2020) becomes ``minimum: 0, exclusiveMinimum: true`` (OpenAPI 3.0);
- no ``additionalProperties: false`` (the API server forbids it): it prunes unknown fields, and
  rejects them under ``kubectl --validate=strict``, the default;
- no ``title`` (pydantic's titles only repeat the field names) and no ``default: null``.

A construct pydantic could emit that is not handled here raises :class:`SchemaConversionError`,
so a new kind of field in a model is noticed rather than silently mangled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from gpufleet.adapters import PodGroupSpec, ProjectModel, QueueSpec, ResourceFlavorSpec, SchedulerConfigSpec
from gpufleet.domain import API_GROUP as GROUP
from gpufleet.domain import API_VERSION as VERSION
from gpufleet.kube.controller.status import PodGroupStatus, ProjectStatus, QueueStatus

__all__ = [
    "CRD_KINDS",
    "GROUP",
    "VERSION",
    "CrdKind",
    "SchemaConversionError",
    "all_crds",
    "crd",
    "crd_file_name",
    "crd_yaml",
    "to_structural",
]

GENERATED_HEADER = "# Generated from gpufleet's models by `gpufleet manifests`: do not edit.\n"

# --- JSON Schema -> structural schema ---------------------------------------------------------

# Value validations and documentation that mean the same in OpenAPI v3.0 and in CRDs.
_KEPT = frozenset(
    {"description", "type", "format", "enum", "pattern", "minimum", "maximum", "minLength", "maxLength",
     "minItems", "maxItems", "minProperties", "maxProperties", "multipleOf", "required"}
)
# Written by the models on purpose (WithJsonSchema / json_schema_extra).
_KUBERNETES_EXTENSIONS = frozenset(
    {"x-kubernetes-int-or-string", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
     "x-kubernetes-map-type", "x-kubernetes-validations"}
)
_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]
_NULL = {"type": "null"}

# Key order of emitted nodes: documentation first, structure last (readable YAML, stable bytes).
_ORDER = (
    "description", "type", "format", "x-kubernetes-int-or-string", "anyOf", "enum", "pattern",
    "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minLength", "maxLength",
    "minItems", "maxItems", "minProperties", "maxProperties", "multipleOf", "default",
    "properties", "additionalProperties", "items", "required",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-validations",
)  # fmt: skip


class SchemaConversionError(ValueError):
    """A JSON Schema construct with no structural equivalent (a programming error in a model)."""


def to_structural(schema: dict[str, Any]) -> dict[str, Any]:
    """The structural OpenAPI v3 form of a pydantic ``model_json_schema()``."""
    defs: dict[str, Any] = schema.get("$defs", {})
    return _convert({key: value for key, value in schema.items() if key != "$defs"}, defs, "")


def _where(path: str) -> str:
    return path or "<root>"


def _inline_ref(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    """``{$ref: X, description: ...}`` (or ``{allOf: [{$ref: X}], ...}``): X, siblings winning."""
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and set(all_of[0]) == {"$ref"}:
        node = {**{k: v for k, v in node.items() if k != "allOf"}, "$ref": all_of[0]["$ref"]}
    ref = node.get("$ref")
    if ref is None:
        return node
    prefix = "#/$defs/"
    name = ref[len(prefix) :] if isinstance(ref, str) and ref.startswith(prefix) else None
    if name is None or name not in defs:
        raise SchemaConversionError(f"{_where(path)}: unresolvable $ref {ref!r}")
    return {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}


def _drop_null_branch(node: dict[str, Any], path: str) -> dict[str, Any]:
    """``{anyOf: [X, {type: null}], ...}``: X with the siblings (int-or-string left alone)."""
    any_of = node.get("anyOf")
    if any_of is None or node.get("x-kubernetes-int-or-string"):
        return node
    branches = [branch for branch in any_of if branch != _NULL]
    if len(branches) != 1:
        raise SchemaConversionError(f"{_where(path)}: a union is not structural: {any_of!r}")
    return {**branches[0], **{k: v for k, v in node.items() if k != "anyOf"}}


def _convert(raw: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    node = raw
    while True:  # Optional[Model] is anyOf [{$ref}, null]: inline and unwrap until nothing changes
        simpler = _drop_null_branch(_inline_ref(node, defs, path), path)
        if simpler == node:
            break
        node = simpler
    out: dict[str, Any] = {}
    for key, value in node.items():
        where = f"{path}.{key}" if path else key
        if key == "title":
            continue
        if key in _KEPT or key in _KUBERNETES_EXTENSIONS:
            out[key] = value
        elif key == "anyOf":  # only the int-or-string pair is left by _drop_null_branch
            if value != _INT_OR_STRING:
                raise SchemaConversionError(f"{where}: only anyOf [integer, string] is structural")
            out[key] = value
        elif key == "default":
            if value is not None:
                out[key] = value
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "properties":
            out[key] = {name: _convert(sub, defs, f"{where}.{name}") for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs, where)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = _convert(value, defs, where)
            elif value is not False:
                raise SchemaConversionError(f"{where}: additionalProperties: true is not structural")
        else:
            raise SchemaConversionError(f"{where}: unsupported JSON Schema keyword")
    int_or_string = bool(out.get("x-kubernetes-int-or-string"))
    if int_or_string == ("type" in out):
        raise SchemaConversionError(f"{_where(path)}: a node needs a type, or x-kubernetes-int-or-string alone")
    return {key: out[key] for key in _ORDER if key in out}


# --- the CRDs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str  # string | integer | number | boolean | date
    json_path: str
    description: str
    priority: int = 0  # 1: shown only with -o wide

    def to_api(self) -> dict[str, Any]:
        column: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path,
                                  "description": self.description}  # fmt: skip
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclass(frozen=True)
class CrdKind:
    kind: str
    plural: str
    namespaced: bool
    description: str
    spec_model: type[BaseModel]
    spec_required: bool
    status_model: type[BaseModel] | None
    columns: tuple[PrinterColumn, ...]
    short_names: tuple[str, ...] = ()  # none collides with Volcano's or KAI's (queue, pg, ...)

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"


_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation.")
_GPU = r"nvidia\.com/gpu"  # JSONPath escape of the dot inside the resource name

CRD_KINDS: tuple[CrdKind, ...] = (
    CrdKind(
        kind="Queue",
        plural="queues",
        namespaced=False,
        description="A node of gpufleet's quota tree: guaranteed quota, limit and lending per resource, "
        "a weight for idle capacity, preemption rules. Only leaf queues receive pods.",
        spec_model=QueueSpec,
        spec_required=False,
        status_model=QueueStatus,
        columns=(
            PrinterColumn("Parent", "string", ".spec.parent", "Parent queue."),
            PrinterColumn("GPU Quota", "string", f".spec.resources.{_GPU}.quota", "Guaranteed GPUs."),
            PrinterColumn("GPU Usage", "string", f".status.usage.{_GPU}", "GPUs held by the queue's pods."),
            PrinterColumn("GPU Borrowed", "string", f".status.borrowed.{_GPU}", "GPUs used above quota.", 1),
            PrinterColumn("Admitted", "integer", ".status.admittedGangs", "Gangs admitted.", 1),
            PrinterColumn("Pending", "integer", ".status.pendingGangs", "Gangs waiting."),
            _AGE,
        ),
        short_names=("gq",),
    ),
    CrdKind(
        kind="PodGroup",
        plural="podgroups",
        namespaced=True,
        description="A gang: pods labelled gpufleet.dev/pod-group=<name> in the same namespace start "
        "together (at least minMember of them) or not at all.",
        spec_model=PodGroupSpec,
        spec_required=True,
        status_model=PodGroupStatus,
        columns=(
            PrinterColumn("Queue", "string", ".spec.queue", "Queue of the gang.", 1),
            PrinterColumn("MinMember", "integer", ".spec.minMember", "Pods that must start together."),
            PrinterColumn("Phase", "string", ".status.phase", "Pending, Admitted, Running or Failed."),
            PrinterColumn("Bound", "integer", ".status.boundPods", "Pods bound to a node."),
            PrinterColumn("Reason", "string", ".status.lastReason", "Why the gang is in its phase.", 1),
            _AGE,
        ),
        short_names=("gpg",),
    ),
    CrdKind(
        kind="SchedulerConfig",
        plural="schedulerconfigs",
        namespaced=False,
        description="Cluster-wide settings of the gpufleet scheduler (a singleton, usually named default).",
        spec_model=SchedulerConfigSpec,
        spec_required=False,
        status_model=None,
        columns=(
            PrinterColumn("Placement", "string", ".spec.placement", "Node placement strategy."),
            PrinterColumn("Default Queue", "string", ".spec.defaultQueue", "Queue of pods that name none."),
            _AGE,
        ),
        short_names=("gsc",),
    ),
    CrdKind(
        kind="Project",
        plural="projects",
        namespaced=False,
        description="A tenant: binds namespaces to queues and carries the policy (queues, node pools, "
        "priority classes, per-user caps, images, volumes) of everything they submit to gpufleet.",
        spec_model=ProjectModel,
        spec_required=False,
        status_model=ProjectStatus,
        columns=(
            PrinterColumn("Queues", "string", ".spec.queues", "Leaf queues its pods may name."),
            PrinterColumn("Default Queue", "string", ".spec.defaultQueue", "Queue of its pods that name none."),
            PrinterColumn("Namespaces", "integer", ".status.namespaceCount", "Namespaces it governs."),
            PrinterColumn("Conflict", "string", '.status.conditions[?(@.type=="NamespaceConflict")].status',
                          "Whether another Project claims one of its namespaces."),
            PrinterColumn("Pools", "string", ".spec.nodePools[*].name", "Node pools its pods may use.", 1),
            _AGE,
        ),
        short_names=("gproj",),
    ),
    CrdKind(
        kind="ResourceFlavor",
        plural="resourceflavors",
        namespaced=False,
        description="A GPU model (or any node class): the nodes carrying all of its labels. Queues give "
        "quota per flavor in spec.flavors (docs/semantics.md, \"GPU-model quotas\").",
        spec_model=ResourceFlavorSpec,
        spec_required=True,
        status_model=None,
        columns=(
            PrinterColumn("Labels", "string", ".spec.nodeLabels", "Labels a node of the flavor carries."),
            _AGE,
        ),
        short_names=("grf",),
    ),
)


def _described(node: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, **{key: value for key, value in node.items() if key != "description"}}


def _object_schema(kind: CrdKind) -> dict[str, Any]:
    spec = to_structural(kind.spec_model.model_json_schema())
    properties: dict[str, Any] = {
        "apiVersion": {"description": "Versioned schema of this object.", "type": "string"},
        "kind": {"description": "REST resource this object represents.", "type": "string"},
        "metadata": {"type": "object"},
        "spec": _described(spec, f"Desired state of the {kind.kind}."),
    }
    if kind.status_model is not None:
        status = to_structural(kind.status_model.model_json_schema())
        properties["status"] = _described(status, "Observed state, written by the scheduler.")
    schema: dict[str, Any] = {"description": kind.description, "type": "object", "properties": properties}
    if kind.spec_required:
        schema["required"] = ["spec"]
    return schema


def crd(kind: CrdKind) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind, as a plain dict."""
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": _object_schema(kind)},
    }
    if kind.status_model is not None:
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = [column.to_api() for column in kind.columns]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.name, "labels": {"app.kubernetes.io/part-of": "gpufleet"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                **({"shortNames": list(kind.short_names)} if kind.short_names else {}),
                "categories": ["gpufleet"],
            },
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "versions": [version],
        },
    }


def all_crds() -> list[dict[str, Any]]:
    return [crd(kind) for kind in CRD_KINDS]


def crd_file_name(kind: CrdKind) -> str:
    """File name of a CRD in the Helm chart (``files/crds/``), as controller-gen names them."""
    return f"{GROUP}_{kind.plural}.yaml"


class _NoAliases(yaml.SafeDumper):
    """A schema that inlines one model twice (Project's label selectors) is written out twice, not
    as a YAML anchor and alias: readers of the chart's files see every field where it is."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def crd_yaml(kind: CrdKind) -> str:
    """One CRD as a YAML document (no ``---``), exactly as the Helm chart stores it."""
    body = yaml.dump(crd(kind), Dumper=_NoAliases, sort_keys=False, default_flow_style=False, width=100,
                     allow_unicode=True)  # fmt: skip
    return GENERATED_HEADER + body
