"""Snapshots as JSON (``kubectl get -o json``): read with msgspec into what the YAML form gives, written
back by ``dump_snapshot_json`` into equal objects, and malformed JSON is one line naming the place."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.adapters import dump_documents_json, dump_snapshot_json
from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import load_config_text, load_snapshot_file, load_snapshot_text
from gpufleet.adapters.k8s_yaml_writer import dump_snapshot
from gpufleet.adapters.tenancy_snapshot import load_pod_file, load_tenancy_snapshot_text
from gpufleet.bench.shapes import SHAPES, make_shape

ROOT = Path(__file__).resolve().parents[2]
DEMO = (ROOT / "examples" / "demo.yaml").read_text(encoding="utf-8")
NODE: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
    "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8"}},
}
POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "ml"},
    "spec": {"schedulerName": "gpufleet", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    "status": {"phase": "Pending"},
}


def message_of(text: str) -> str:
    """The one line of the InputError that loading ``text`` as snap.json raises."""
    with pytest.raises(InputError) as err:
        load_snapshot_text(text, "snap.json")
    assert "\n" not in str(err.value)
    return str(err.value)


def demo_documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(DEMO) if doc is not None]


@pytest.mark.parametrize(
    "form",
    ["list", "array", "stream", "lines", "pretty-list", "one-object-per-value"],
)
def test_every_json_form_reads_as_the_yaml_does(form: str) -> None:
    documents = demo_documents()
    if form == "list":
        text = json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": documents})
    elif form == "array":
        text = json.dumps(documents)
    elif form == "stream":  # kubectl get -o json run twice into one file
        half = len(documents) // 2
        text = json.dumps({"kind": "List", "apiVersion": "v1", "items": documents[:half]}, indent=4) + "\n" + json.dumps(
            {"kind": "List", "apiVersion": "v1", "items": documents[half:]}, indent=4
        )
    elif form == "lines":
        text = "\n".join(json.dumps(doc) for doc in documents) + "\n"
    elif form == "pretty-list":
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": documents}, indent=2)
    else:
        text = "".join(json.dumps(doc) for doc in documents)  # values back to back
    expected = load_snapshot_text(DEMO, "demo.yaml")
    assert load_snapshot_text(text, "demo.json") == expected
    assert load_snapshot_text(text, "demo") == expected  # told by its first character


def test_the_format_is_told_by_the_name_then_the_first_character() -> None:
    text = json.dumps(NODE)
    assert load_snapshot_text(text, "snap.json").nodes[0].name == "n1"
    assert load_snapshot_text(text, "snap.yaml").nodes[0].name == "n1"  # JSON is YAML too: read as YAML
    assert load_snapshot_text("  \n" + text, "-").nodes[0].name == "n1"
    # a YAML flow document begins like JSON: read as YAML when it is not JSON
    assert load_snapshot_text("{apiVersion: v1, kind: Node, metadata: {name: n2}}", "snap").nodes[0].name == "n2"
    with pytest.raises(InputError, match=r"^snap\.json: line 1, column 2: malformed JSON: "):
        load_snapshot_text("{apiVersion: v1, kind: Node, metadata: {name: n2}}", "snap.json")
    assert load_snapshot_text("", "empty.json").nodes == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"apiVersion": "v1",\n "kind": "Node",,\n}', "line 2, column 17: malformed JSON: object keys must be strings"),
        ('{"apiVersion": "v1", "kind": "Node"', "line 1, column 36: malformed JSON: unexpected end of input"),
        ('[{"kind": "Node"}]\n{"a": x}', "line 2, column 7: malformed JSON: invalid character"),
        ('{"a": "\\x"}', "line 1, column 10: malformed JSON: invalid escape character in string"),
        ('{"a": 1e999}', "malformed JSON: number out of range"),
        ("[" * 5000 + "]" * 5000, "malformed JSON: nested too deeply"),
        ('{"é": "é",\n  "x": ]}', "line 2, column 8: malformed JSON: invalid character"),
    ],
)
def test_malformed_json_is_one_line_with_the_place(text: str, expected: str) -> None:
    assert message_of(text) == f"snap.json: {expected}"


@pytest.mark.parametrize(
    ("documents", "expected"),
    [
        ([NODE, {**NODE, "metadata": {"name": "n2"}, "status": {"allocatable": {"cpu": "-8"}}}],
         'snap.json: document 2 (Node n2): status.allocatable.cpu: negative quantity "-8"'),
        ([NODE, 7], "snap.json: document 2: expected a Kubernetes object (a mapping), got 7"),
        ([{**POD, "spec": {**POD["spec"], "priority": "high"}}],
         'snap.json: document 1 (Pod ml/p1): spec.priority: must be an integer, got "high"'),
        ([{"apiVersion": "v1", "kind": "List", "items": [NODE, {**NODE, "kind": 5}]}],
         "snap.json: document 1, item 2: kind: must be a string, got 5"),
    ],
)
def test_a_wrong_field_in_json_names_the_document_and_the_field(documents: list[Any], expected: str) -> None:
    assert message_of(json.dumps(documents)) == expected


@pytest.mark.parametrize("shape", SHAPES)
def test_json_written_reads_back_into_equal_objects(shape: str) -> None:
    snapshot = make_shape(shape, 0.02)
    text = dump_snapshot_json(snapshot)
    json.loads(text)  # plain JSON: one List
    from_json = load_snapshot_text(text, "s.json")
    assert from_json == load_snapshot_text(dump_snapshot(snapshot), "s.yaml")
    if not snapshot.projects:  # the writers leave Projects out (the YAML one as well)
        assert from_json == snapshot


def test_json_of_the_examples_reads_back_into_equal_objects() -> None:
    snapshot = load_snapshot_text(DEMO, "demo.yaml")
    assert load_snapshot_text(dump_documents_json(demo_documents()), "demo.json") == snapshot
    assert load_snapshot_text(dump_snapshot_json(snapshot), "demo.json") == snapshot
    assert dump_documents_json([]) == '{"apiVersion":"v1","kind":"List","metadata":{},"items":[\n]}\n'


def test_json_files_config_and_tenancy_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    path.write_text(dump_documents_json(demo_documents()), encoding="utf-8")
    assert load_snapshot_file(path) == load_snapshot_text(DEMO, "demo.yaml")
    config = json.dumps({"apiVersion": "gpufleet.dev/v1alpha1", "kind": "SchedulerConfig",
                         "spec": {"nonPreemptiblePriority": "high"}})
    with pytest.raises(InputError, match=re.escape(
            'cfg.json: document 1 (SchedulerConfig): spec.nonPreemptiblePriority: must be an integer, got "high"')):
        load_config_text(config, "cfg.json")
    tenancy = load_tenancy_snapshot_text(dump_documents_json(demo_documents()), "t.json")
    assert tenancy.snapshot == load_snapshot_text(DEMO, "demo.yaml")
    pod_path = tmp_path / "pod.json"
    pod_path.write_text(json.dumps(POD), encoding="utf-8")
    assert load_pod_file(pod_path)[0].name == "p1"
