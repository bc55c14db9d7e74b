"""The CRDs generated from our models: structural, valid CRD objects, and they accept exactly what
the spec's examples contain and reject what the loader rejects.

Custom objects are validated the way the API server does it, emulated with ``jsonschema``
(:func:`api_server_errors`): OpenAPI v3.0 keywords (draft 4: boolean ``exclusiveMinimum``, integers
that are not floats), ``x-kubernetes-int-or-string``, nulls of non-nullable fields pruned, and unknown
fields rejected as ``kubectl`` does with its default ``--validate=strict``.
"""

from __future__ import annotations

import copy
import functools
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from gpufleet.adapters._fields import FieldError
from gpufleet.adapters._k8s_models import (
    QUANTITY_PATTERN,
    pod_group_from_dict,
    project_from_dict,
    queue_from_dict,
    resource_flavor_from_dict,
    scheduler_config_from_dict,
)
from gpufleet.adapters.quantity import QuantityError, to_milli
from gpufleet.kube.controller.status import Condition, PodGroupStatus, ProjectStatus, QueueStatus, format_quantity
from gpufleet.kube.install.crds import CRD_KINDS, GROUP, VERSION, SchemaConversionError, all_crds, crd, to_structural

SPEC = Path(__file__).resolve().parents[4] / "shared" / "spec"
KUBE_VERSIONS = ("1.27.0", "1.37.0")  # the chart's kubeVersion floor and the newest schemas bundled
LOADERS = {"Queue": queue_from_dict, "PodGroup": pod_group_from_dict, "SchedulerConfig": scheduler_config_from_dict,
           "Project": project_from_dict, "ResourceFlavor": resource_flavor_from_dict}


# --- the API server's validation, emulated ------------------------------------------------------


def _int_or_string(validator: Any, enabled: bool, instance: Any, schema: dict[str, Any]) -> Any:
    if enabled and (isinstance(instance, bool) or not isinstance(instance, int | str)):
        yield jsonschema.ValidationError(f"{instance!r} is not an integer or a string")


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Objects with ``properties`` are closed: what strict field validation does with unknown fields."""
    out = {key: value for key, value in schema.items()}
    if "properties" in out:
        out["properties"] = {name: _strict(sub) for name, sub in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key])
    return out


def _prune_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _prune_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_prune_nulls(item) for item in value]
    return value


# The API server checks format: date-time (RFC 3339); jsonschema would need an extra package for it.
_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("date-time", raises=ValueError)
def _is_rfc3339(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not re.fullmatch(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", value):
        return False
    datetime.fromisoformat(value.replace("z", "Z"))
    return True


_KubeValidator = jsonschema.validators.extend(
    jsonschema.Draft4Validator, {"x-kubernetes-int-or-string": _int_or_string}
)


@functools.cache
def _validator(kind_name: str) -> Any:
    [kind] = [kind for kind in CRD_KINDS if kind.kind == kind_name]
    schema = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return _KubeValidator(_strict(schema), format_checker=_FORMATS)


def api_server_errors(obj: dict[str, Any]) -> list[str]:
    """Why the API server (with kubectl's strict field validation) would reject a custom object."""
    if obj.get("kind") not in LOADERS or obj.get("apiVersion") != f"{GROUP}/{VERSION}":
        return [f"no CRD serves {obj.get('apiVersion')}/{obj.get('kind')}"]
    validator = _validator(obj["kind"])
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                  for e in validator.iter_errors(_prune_nulls(obj)))  # fmt: skip


def _obj(kind: str, spec: Any, name: str = "x", **extra: Any) -> dict[str, Any]:
    meta = {"name": name} | ({"namespace": "ml"} if kind == "PodGroup" else {})
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": meta, "spec": spec, **extra}


def _loader_accepts(obj: dict[str, Any]) -> bool:
    try:
        LOADERS[obj["kind"]](obj)
    except FieldError:
        return False
    return True


# --- structural ----------------------------------------------------------------------------------


def _walk(node: dict[str, Any], path: str, level: str) -> list[str]:
    """The structural-schema invariants (apiextensions-apiserver pkg/apiserver/schema/validation.go)."""
    problems = []
    if "$ref" in node or "$defs" in node or "definitions" in node:
        problems.append(f"{path}: reference")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    if int_or_string:
        if "type" in node:
            problems.append(f"{path}: int-or-string with a type")
        if node.get("anyOf", [{"type": "integer"}, {"type": "string"}]) != [{"type": "integer"}, {"type": "string"}]:
            problems.append(f"{path}: int-or-string anyOf must be exactly [integer, string]")
    elif "type" not in node:
        problems.append(f"{path}: no type")
    elif "anyOf" in node or "oneOf" in node or "allOf" in node or "not" in node:
        problems.append(f"{path}: a logical junctor outside int-or-string")
    if node.get("nullable") or node.get("additionalProperties") is False or node.get("additionalProperties") is True:
        problems.append(f"{path}: nullable or boolean additionalProperties")
    if level == "root" and ("additionalProperties" in node or node.get("type") != "object"):
        problems.append(f"{path}: the root is a closed object")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties together")
    if node.get("type") == "array" and "items" not in node:
        problems.append(f"{path}: array without items")
    if "exclusiveMinimum" in node and node["exclusiveMinimum"] is not True:
        problems.append(f"{path}: exclusiveMinimum must be a boolean in OpenAPI v3.0")
    if "default" in node and node["default"] is None:
        problems.append(f"{path}: null default")
    if "title" in node:
        problems.append(f"{path}: title")
    if "pattern" in node:
        re.compile(node["pattern"])
    for name, sub in node.get("properties", {}).items():
        if level == "root" and name == "metadata" and sub != {"type": "object"}:
            problems.append(f"{path}.metadata: only name and generateName may be restricted")
        problems += _walk(sub, f"{path}.{name}", "field")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            problems += _walk(node[key], f"{path}.{key}", "field")
    return problems


@pytest.mark.parametrize("kind", CRD_KINDS, ids=lambda k: k.kind)
def test_the_schema_is_structural(kind: Any) -> None:
    schema = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _walk(schema, "openAPIV3Schema", "root") == []


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("kind", CRD_KINDS, ids=lambda k: k.kind)
def test_the_crd_is_a_valid_customresourcedefinition(kind: Any, version: str) -> None:
    kubernetes_validate.validate(crd(kind), version, strict=True)


def test_a_misspelt_crd_field_is_caught_by_the_crd_validation() -> None:
    """Negative control for the test above: strict validation notices unknown CRD fields."""
    broken = copy.deepcopy(crd(CRD_KINDS[0]))
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-int-or-strin"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSIONS[0], strict=True)


def test_names_scopes_subresources() -> None:
    crds = {c["spec"]["names"]["kind"]: c for c in all_crds()}
    assert {kind: c["spec"]["scope"] for kind, c in crds.items()} == {
        "Queue": "Cluster", "PodGroup": "Namespaced", "SchedulerConfig": "Cluster", "Project": "Cluster",
        "ResourceFlavor": "Cluster"}  # fmt: skip
    assert {c["metadata"]["name"] for c in crds.values()} == {
        "queues.gpufleet.dev", "podgroups.gpufleet.dev", "schedulerconfigs.gpufleet.dev",
        "projects.gpufleet.dev", "resourceflavors.gpufleet.dev"}  # fmt: skip
    for c in crds.values():
        assert c["spec"]["group"] == "gpufleet.dev"
        [version] = c["spec"]["versions"]
        assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert crds["Queue"]["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert crds["PodGroup"]["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert "subresources" not in crds["SchedulerConfig"]["spec"]["versions"][0]
    assert crds["Project"]["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert {kind: c["spec"]["names"]["shortNames"] for kind, c in crds.items()} == {
        "Queue": ["gq"], "PodGroup": ["gpg"], "SchedulerConfig": ["gsc"], "Project": ["gproj"],
        "ResourceFlavor": ["grf"]}  # fmt: skip
    assert {kind: c["spec"]["names"]["categories"] for kind, c in crds.items()} == {
        kind: ["gpufleet"] for kind in crds}  # `kubectl get gpufleet` lists them all


# Short names (and plurals/singulars, which kubectl resolves the same way) taken by the peers a platform
# engineer runs beside us: Volcano (queues, podgroups, jobs, ...), KAI (scheduling.run.ai, kai.scheduler),
# Kueue, and the core/built-in resources of kubectl.
PEER_NAMES = {
    "volcano": {"q", "queue", "queues", "queue-v1beta1", "pg", "podgroup", "podgroups", "podgroup-v1beta1", "vcjob",
                "vj", "vcjobs", "jobflow", "jf", "jobtemplate", "jt", "numatopo", "numatopology", "hn", "hypernode",
                "command", "commands"},
    "kai": {"queue", "queues", "pg", "podgroup", "podgroups", "bindrequest", "topology", "config", "schedulingshard"},
    "kueue": {"cq", "clusterqueue", "lq", "localqueue", "wl", "workload", "rf", "resourceflavor", "queue"},
    "core": {"cm", "cs", "csr", "ds", "deploy", "ep", "ev", "hpa", "ing", "limits", "netpol", "no", "ns", "pc", "pdb",
             "po", "psp", "pv", "pvc", "quota", "rc", "rs", "sa", "sc", "sts", "svc", "crd", "crds", "ingclass"},
}


def test_short_names_collide_with_no_peer() -> None:
    taken = set().union(*PEER_NAMES.values())
    ours = [name for kind in CRD_KINDS for name in kind.short_names]
    assert len(ours) == len(set(ours)) and sorted(ours) == ["gpg", "gproj", "gq", "grf", "gsc"]
    assert taken.isdisjoint(ours)


def _resolve_json_path(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    json_path = re.sub(r"\[[^\]]*\]", "[]", json_path)  # a filter or [*]: into the array's items
    for part in re.split(r"(?<!\\)\.", json_path.lstrip("."))[0:]:
        part = part.replace("\\.", ".")
        into_items = part.endswith("[]")
        part = part.removesuffix("[]")
        if node is None:
            return None
        if part in node.get("properties", {}):
            node = node["properties"][part]
            if into_items:
                node = node.get("items")
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        elif part in ("metadata",) or node == {"type": "object"}:
            return {"type": "object"}  # metadata fields are the API server's
        else:
            return None
    return node


@pytest.mark.parametrize("kind", CRD_KINDS, ids=lambda k: k.kind)
def test_printer_columns_point_at_fields_of_the_schema(kind: Any) -> None:
    version = crd(kind)["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for column in version["additionalPrinterColumns"]:
        field = _resolve_json_path(schema, column["jsonPath"])
        assert field is not None, column
        if column["type"] == "integer":
            assert field.get("type") == "integer", column
    names = [column["name"] for column in version["additionalPrinterColumns"]]
    expected = {"Queue": {"Parent", "GPU Quota", "GPU Usage", "Pending"},
                "PodGroup": {"MinMember", "Phase", "Bound"}, "SchedulerConfig": {"Placement"},
                "Project": {"Queues", "Namespaces", "Conflict"}, "ResourceFlavor": {"Labels"}}[kind.kind]  # fmt: skip
    assert expected <= set(names)


# --- the converter --------------------------------------------------------------------------------


class _Union(BaseModel):
    value: int | str


class _Open(BaseModel):
    model_config = {"extra": "allow"}
    value: int = 0


def test_the_converter_refuses_what_is_not_structural() -> None:
    with pytest.raises(SchemaConversionError, match="union"):
        to_structural(_Union.model_json_schema())
    with pytest.raises(SchemaConversionError, match="additionalProperties"):
        to_structural(_Open.model_json_schema())
    with pytest.raises(SchemaConversionError, match="unsupported"):
        to_structural({"type": "object", "properties": {"x": {"type": "string", "const": "a"}}})
    with pytest.raises(SchemaConversionError, match="unresolvable"):
        to_structural({"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}})


def test_the_converter_inlines_optional_models_and_exclusive_bounds() -> None:
    class Inner(BaseModel):
        n: int

    class Outer(BaseModel):
        inner: Inner | None = None
        ratio: float = 1.0

    schema = Outer.model_json_schema()
    schema["properties"]["ratio"]["exclusiveMinimum"] = 0
    assert to_structural(schema) == {
        "type": "object",
        "properties": {
            "inner": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "default": 1.0},
        },
    }


# --- examples of the spec -------------------------------------------------------------------------


def _spec_yaml_blocks() -> list[dict[str, Any]]:
    api = SPEC / "api.md"
    if not api.is_file():
        pytest.skip(f"{api} is absent (the shared spec is only beside the repository in CI)")
    blocks = re.findall(r"```yaml\n(.*?)```", api.read_text(encoding="utf-8"), flags=re.S)
    docs = [doc for block in blocks for doc in yaml.safe_load_all(block) if isinstance(doc, dict)]
    return [doc for doc in docs if doc.get("kind") in LOADERS]


def test_every_object_of_api_md_validates() -> None:
    objects = _spec_yaml_blocks()
    assert {obj["kind"] for obj in objects} == {"Queue", "PodGroup", "SchedulerConfig"}
    for obj in objects:
        assert api_server_errors(obj) == [], obj
        assert _loader_accepts(obj)


def test_every_object_of_the_spec_examples_validates() -> None:
    examples = SPEC / "examples"
    if not examples.is_dir():
        pytest.skip(f"{examples} is absent (the shared spec is only beside the repository in CI)")
    seen = 0
    for path in sorted(examples.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") in LOADERS:
                assert api_server_errors(doc) == [], (path.name, doc)
                seen += 1
    assert seen > 0


def test_every_custom_object_of_our_scenarios_the_loader_accepts_validates() -> None:
    scenarios = Path(__file__).resolve().parents[2] / "scenarios"
    seen = 0
    for path in sorted(scenarios.rglob("*.yaml")):
        for doc in yaml.load_all(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader):
            if isinstance(doc, dict) and doc.get("kind") in LOADERS and _loader_accepts(doc):
                assert api_server_errors(doc) == [], (path.name, doc)
                seen += 1
    assert seen > 0


# --- invalid objects ------------------------------------------------------------------------------

INVALID = {
    "negative quota": _obj("Queue", {"resources": {"nvidia.com/gpu": {"quota": "-4"}}}),
    "negative integer quota": _obj("Queue", {"resources": {"nvidia.com/gpu": {"quota": -4}}}),
    "malformed quantity": _obj("Queue", {"resources": {"cpu": {"limit": "8 cores"}}}),
    "boolean quantity": _obj("Queue", {"resources": {"cpu": {"quota": True}}}),
    "zero weight": _obj("Queue", {"weight": 0}),
    "unknown withinQueue": _obj("Queue", {"preemption": {"withinQueue": "Always"}}),
    "string reclaimBorrowed": _obj("Queue", {"preemption": {"reclaimBorrowed": "yes"}}),
    "misspelt quota": _obj("Queue", {"resources": {"cpu": {"quotas": "4"}}}),
    "unknown spec field": _obj("Queue", {"parents": "x"}),
    "missing minMember": _obj("PodGroup", {"queue": "team-a"}),
    "minMember 0": _obj("PodGroup", {"minMember": 0}),
    "minMember over int32": _obj("PodGroup", {"minMember": 2**31}),
    "string minMember": _obj("PodGroup", {"minMember": "8"}),
    "float minMember": _obj("PodGroup", {"minMember": 8.5}),
    "missing spec": {k: v for k, v in _obj("PodGroup", {}).items() if k != "spec"},
    "unknown topology field": _obj("PodGroup", {"minMember": 2, "topology": {"require": "rack"}}),
    "bad placement": _obj("SchedulerConfig", {"placement": "random"}),
    "empty defaultQueue": _obj("SchedulerConfig", {"defaultQueue": ""}),
    "priority over int32": _obj("SchedulerConfig", {"nonPreemptiblePriority": 2**31}),
    "topologyLevels not a list": _obj("SchedulerConfig", {"topologyLevels": "rack"}),
    "unknown top-level field": _obj("SchedulerConfig", {}, specs={}),
    "project queues not a list": _obj("Project", {"queues": "team-a"}),
    "project empty queue name": _obj("Project", {"queues": [""]}),
    "project negative maxGPUsPerUser": _obj("Project", {"maxGPUsPerUser": -1}),
    "project string maxPendingGangsPerUser": _obj("Project", {"maxPendingGangsPerUser": "10"}),
    "project unknown volume kind": _obj("Project", {"volumes": {"kinds": ["hostpath"]}}),
    "project blank image glob": _obj("Project", {"images": {"allowed": ["ghcr.io/acme/ *"]}}),
    "project unknown selector operator": _obj("Project", {"namespaces": {"selector": {
        "matchExpressions": [{"key": "team", "operator": "Equals", "values": ["a"]}]}}}),
    "project pool without selector": _obj("Project", {"nodePools": [{"name": "a100"}]}),
    "project pool without name": _obj("Project", {"nodePools": [{"nodeSelector": {}}]}),
    "project misspelt field": _obj("Project", {"queue": ["a"]}),
    "project string allowNonPreemptible": _obj("Project", {"allowNonPreemptible": "true"}),
}


@pytest.mark.parametrize("obj", INVALID.values(), ids=INVALID.keys())
def test_invalid_objects_are_rejected_by_the_crd_and_by_the_loader(obj: dict[str, Any]) -> None:
    assert api_server_errors(obj) != []
    if "spec" in obj and "specs" not in obj:  # the loader reads spec only
        assert not _loader_accepts(obj)


def test_fractional_blocks_are_not_a_field_of_these_crds() -> None:
    """gpu-blocks (1..100) is a pod annotation, checked by the loader and the webhook: no CRD has it."""
    text = yaml.safe_dump(all_crds())
    # (awsElasticBlockStore: a volume source a Project's volumes.kinds may name)
    assert "blocks" not in text.lower().replace("gpufleet.dev/gpu-blocks", "").replace("awselasticblockstore", "")


def test_nulls_are_pruned_like_unset_fields() -> None:
    obj = _obj("Queue", {"parent": None, "resources": {"cpu": {"quota": None, "limit": "8"}}})
    assert api_server_errors(obj) == []
    assert _loader_accepts(obj)


# --- quantities: the CRD pattern and the loader agree ---------------------------------------------

_QUANTITY = re.compile(QUANTITY_PATTERN)


def _loader_quantity(text: str) -> str:
    try:
        to_milli(text)
    except QuantityError as err:
        return "too large" if "too large" in str(err) else "rejected"
    return "accepted"


# Accepted by lightkube's parser (so by the loader) but by no Kubernetes API server: a sign other
# than "+" ("-0" is zero), an exponent together with a suffix, the suffixes Z and Y.
_LOADER_ONLY = re.compile(r"^-.*|.*e[+-]?[0-9]+[A-Za-z]+$|.*[ZY]i?$")


@given(st.text(alphabet="0123456789.+-eEkKMGTPZYinmu", max_size=7))
def test_the_quantity_pattern_accepts_exactly_what_the_loader_accepts(text: str) -> None:
    verdict = _loader_quantity(text)
    in_crd = _QUANTITY.fullmatch(text) is not None
    if in_crd:  # whatever the API server lets in, the scheduler can read (or says it is too large)
        assert verdict in ("accepted", "too large"), text
    elif verdict == "accepted":
        assert _LOADER_ONLY.fullmatch(text), text


@given(st.integers(min_value=0, max_value=2**62))
def test_format_quantity_round_trips(milli: int) -> None:
    text = format_quantity(milli)
    assert _QUANTITY.fullmatch(text)
    assert to_milli(text) == milli


# --- status ---------------------------------------------------------------------------------------


def test_the_status_the_controller_writes_validates() -> None:
    queue_status = QueueStatus(
        usage={"nvidia.com/gpu": format_quantity(6000), "cpu": format_quantity(500)},
        guaranteedUsage={"nvidia.com/gpu": "4"},
        borrowed={"nvidia.com/gpu": "2"},
        admittedGangs=3,
        pendingGangs=1,
        conditions=[Condition(type="Ready", status="True", reason="Reconciled",
                              lastTransitionTime="2026-01-01T00:00:00Z")],  # type: ignore[arg-type]
    )
    queue = _obj("Queue", {}, status=queue_status.to_api())
    assert api_server_errors(queue) == []
    assert queue["status"]["usage"] == {"nvidia.com/gpu": "6", "cpu": "500m"}
    assert queue["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    group = _obj("PodGroup", {"minMember": 2}, status=PodGroupStatus(
        phase="Admitted", boundPods=2, lastReason="bound 2 of 2",  # type: ignore[arg-type]
        lastTransitionTime="2026-01-01T00:00:00Z").to_api())  # type: ignore[arg-type]  # fmt: skip
    assert api_server_errors(group) == []
    assert set(group["status"]) == {"phase", "boundPods", "lastReason", "lastTransitionTime"}


@pytest.mark.parametrize(
    "status",
    [{"phase": "Done"}, {"boundPods": -1}, {"phase": "Running", "bound": 2}, {"lastTransitionTime": "yesterday"}],
)
def test_invalid_pod_group_status_is_rejected(status: dict[str, Any]) -> None:
    assert api_server_errors(_obj("PodGroup", {"minMember": 1}, status=status)) != []


def test_invalid_queue_status_is_rejected() -> None:
    assert api_server_errors(_obj("Queue", {}, status={"usage": {"cpu": "-1"}})) != []
    assert api_server_errors(_obj("Queue", {}, status={"pendingGangs": -1})) != []
    assert api_server_errors(_obj("Queue", {}, status={"conditions": [{"type": "Ready"}]})) != []
    with pytest.raises(ValueError):
        QueueStatus(usage={"cpu": "lots"})
    with pytest.raises(ValueError):
        format_quantity(-1)


def test_the_status_of_a_project_validates() -> None:
    status = ProjectStatus(namespaceCount=2, conditions=[Condition(
        type="NamespaceConflict", status="True", reason="NamespaceClaimedTwice",  # type: ignore[arg-type]
        message="namespace ml is also claimed by project nlp", lastTransitionTime="2026-01-01T00:00:00Z")])  # type: ignore[arg-type]  # fmt: skip
    assert api_server_errors(_obj("Project", {"queues": ["a"]}, status=status.to_api())) == []
    assert api_server_errors(_obj("Project", {}, status={"namespaceCount": -1})) != []


# --- Project: the CEL rules of the schema (x-kubernetes-validations), evaluated with cel-python ----


def _rules(node: dict[str, Any], path: str = "") -> list[tuple[str, str, str]]:
    """Every (schema path, rule, message) of a schema."""
    found = [(path, r["rule"], r["message"]) for r in node.get("x-kubernetes-validations", [])]
    for name, sub in node.get("properties", {}).items():
        found += _rules(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += _rules(node["items"], f"{path}[]")
    return found


def _project_rules() -> dict[str, tuple[str, str]]:
    [kind] = [k for k in CRD_KINDS if k.kind == "Project"]
    schema = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return {path: (rule, message) for path, rule, message in _rules(schema)}


def test_the_project_schema_has_exactly_these_cel_rules() -> None:
    assert sorted(_project_rules()) == [
        ".spec", ".spec.idlePolicy", ".spec.idlePolicy.podSelector.matchExpressions[]", ".spec.images.allowed[]",
        ".spec.images.denied[]", ".spec.namespaces.selector.matchExpressions[]",
        ".spec.nodePools[].nodeSelector.matchExpressions[]", ".spec.volumes.claimNames[]"]


@pytest.mark.parametrize("policy", [{"idleMinutes": 10}, {"idleMinutes": 16}, {"idleMinutes": 30, "warnMinutes": 29},
                                    {"idleMinutes": 30, "warnMinutes": 30}, {"idleMinutes": 30, "warnMinutes": 0}])
def test_the_idle_policy_rule_agrees_with_the_loader(policy: dict[str, int]) -> None:
    rule, message = _project_rules()[".spec.idlePolicy"]
    assert message == "warnMinutes must be less than idleMinutes"
    assert _cel(rule, policy) is _loader_accepts(_obj("Project", {"idlePolicy": policy}))


@pytest.mark.parametrize(("glob", "ok"), [("ghcr.io/acme/*", True), ("ghcr.io/**", True), ("ghcr.io/***", False),
                                          ("***", False)])  # fmt: skip
def test_the_glob_rule_agrees_with_the_loader(glob: str, ok: bool) -> None:
    for path, spec in ((".spec.images.allowed[]", {"images": {"allowed": [glob]}}),
                       (".spec.images.denied[]", {"images": {"denied": [glob]}}),
                       (".spec.volumes.claimNames[]", {"volumes": {"claimNames": [glob]}})):
        rule, message = _project_rules()[path]
        assert message == "'***' is not a glob ('*': within one path segment, '**': across segments)"
        assert _cel(rule, glob) is ok
        assert _loader_accepts(_obj("Project", spec)) is ok


def _cel(rule: str, value: Any) -> bool:
    celpy = pytest.importorskip("celpy", reason="cel-python (the dev extra) evaluates the CRD's CEL rules")
    env = celpy.Environment()
    return bool(env.program(env.compile(rule)).evaluate({"self": celpy.json_to_cel(value)}))


@pytest.mark.parametrize(("spec", "ok"), [
    ({}, True), ({"queues": ["a", "b"], "defaultQueue": "b"}, True), ({"defaultQueue": "b"}, False),
    ({"queues": ["a"], "defaultQueue": "b"}, False)])  # fmt: skip
def test_the_default_queue_rule_agrees_with_the_loader(spec: dict[str, Any], ok: bool) -> None:
    rule, message = _project_rules()[".spec"]
    assert message == "defaultQueue must be one of queues"
    assert _cel(rule, spec) is ok
    assert _loader_accepts(_obj("Project", spec)) is ok


@pytest.mark.parametrize(("requirement", "ok"), [
    ({"key": "k", "operator": "In", "values": ["a"]}, True), ({"key": "k", "operator": "NotIn", "values": ["a"]}, True),
    ({"key": "k", "operator": "Exists"}, True), ({"key": "k", "operator": "DoesNotExist", "values": []}, True),
    ({"key": "k", "operator": "In"}, False), ({"key": "k", "operator": "In", "values": []}, False),
    ({"key": "k", "operator": "Exists", "values": ["a"]}, False)])  # fmt: skip
def test_the_selector_rule_agrees_with_the_loader(requirement: dict[str, Any], ok: bool) -> None:
    rule, message = _project_rules()[".spec.namespaces.selector.matchExpressions[]"]
    assert message == "values must be given for In and NotIn, and only for them"
    assert _cel(rule, requirement) is ok
    spec = {"namespaces": {"selector": {"matchExpressions": [requirement]}}}
    assert _loader_accepts(_obj("Project", spec)) is ok
    if not ok:
        with pytest.raises(FieldError, match=r"^spec\.namespaces\.selector\.matchExpressions\[0\]: values must be given"):
            project_from_dict(_obj("Project", spec))


def test_a_full_project_validates_and_reads() -> None:
    spec = {"namespaces": {"names": ["vision"], "selector": {"matchLabels": {"team": "vision"}}},
            "queues": ["vision-train", "vision-infer"], "defaultQueue": "vision-train",
            "nodePools": [{"name": "a100", "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "A100"}}}],
            "priorityClasses": ["train"], "allowNonPreemptible": False, "maxGPUsPerUser": 16,
            "maxPendingGangsPerUser": 10, "images": {"allowed": ["ghcr.io/acme/**"], "requireDigest": True},
            "volumes": {"kinds": ["persistentVolumeClaim", "configMap"], "storageClasses": ["fast"],
                        "claimNames": ["vision-*"]}}  # fmt: skip
    obj = _obj("Project", spec, name="ml-vision")
    assert api_server_errors(obj) == []
    project = project_from_dict(obj)
    assert (project.name, project.queues, project.default_queue) == ("ml-vision", ("vision-train", "vision-infer"), "vision-train")
    assert [pool.name for pool in project.node_pools] == ["a100"]
    assert project.node_pools[0].selector.match_labels == (("nvidia.com/gpu.product", "A100"),)
    assert (project.max_gpus_per_user, project.max_pending_gangs_per_user) == (16, 10)
    assert project.volumes.kinds == ("persistentVolumeClaim", "configMap")
    assert project.images.require_digest is True
