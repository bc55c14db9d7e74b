"""Fuzzing the loader: whatever the text, only InputError (one line, naming the file) comes out."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.domain import Snapshot

EXAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "spec" / "examples"

# A snapshot touching every field the loader reads, so that mutations reach all of them.
RICH = """\
apiVersion: gpufleet.dev/v1alpha1
kind: SchedulerConfig
metadata: {name: default}
spec: {defaultQueue: default, topologyLevels: [block, rack], nonPreemptiblePriority: 100, placement: spread}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: train}
value: 50
globalDefault: false
---
apiVersion: gpufleet.dev/v1alpha1
kind: Queue
metadata: {name: research}
spec:
  weight: 2
  resources: {nvidia.com/gpu: {quota: "8", limit: "16", lendingLimit: "4"}, cpu: {quota: "64"}}
  preemption: {reclaimBorrowed: true, withinQueue: Never}
---
apiVersion: gpufleet.dev/v1alpha1
kind: Queue
metadata: {name: team-a}
spec: {parent: research, resources: {nvidia.com/gpu: {quota: "4"}}}
---
apiVersion: gpufleet.dev/v1alpha1
kind: PodGroup
metadata: {name: g, namespace: ml}
spec: {minMember: 2, queue: team-a, priorityClassName: train, topology: {required: rack, preferred: block}}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: n1
    labels: {rack: r1, nvidia.com/gpu.memory: "81920", nvidia.com/gpu.product: H100}
    annotations: {gpufleet.dev/unhealthy-gpus: "3", gpufleet.dev/nvlink-domains: "0-3;4,5,6,7"}
  spec:
    unschedulable: false
    taints: [{key: nvidia.com/gpu, value: unhealthy, effect: NoSchedule}]
  status:
    allocatable: {cpu: 63500m, memory: 500Gi, pods: "110", nvidia.com/gpu: "8", nvidia.com/mig-1g.10gb: "7"}
    capacity: {cpu: "64", memory: 512Gi}
- apiVersion: v1
  kind: Pod
  metadata:
    name: w-0
    namespace: ml
    labels: {gpufleet.dev/pod-group: g, gpufleet.dev/preemptible: "true"}
    annotations: {gpufleet.dev/gpu-index: "0,1"}
    creationTimestamp: "2026-01-01T00:00:00Z"
  spec:
    schedulerName: gpufleet
    priority: 50
    priorityClassName: train
    nodeName: n1
    nodeSelector: {rack: r1}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - {key: rack, operator: In, values: [r1, r2]}
            - {key: gen, operator: Gt, values: ["2"]}
            - {key: spot, operator: DoesNotExist}
            matchFields: [{key: metadata.name, operator: NotIn, values: [n9]}]
    tolerations:
    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
    - {key: team, operator: Equal, value: ml}
    initContainers:
    - {name: setup, resources: {requests: {cpu: "2"}}}
    - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 100m}}}
    containers:
    - name: main
      resources:
        requests: {cpu: "1", memory: 4Gi}
        limits: {cpu: "2", memory: 4Gi, nvidia.com/gpu: "2"}
    overhead: {cpu: 10m}
  status: {phase: Running, startTime: "2026-01-01T00:00:05Z"}
- apiVersion: v1
  kind: Pod
  metadata:
    name: nb
    namespace: ml
    labels: {gpufleet.dev/queue: team-a}
    annotations: {gpufleet.dev/gpu-blocks: "30", gpufleet.dev/gpu-memory: 20Gi}
  spec:
    schedulerName: gpufleet
    containers: [{name: main, resources: {requests: {cpu: 500m}}}]
  status: {phase: Pending}
"""


def _seed_texts() -> list[str]:
    texts = [RICH]
    if EXAMPLES.is_dir():
        texts += [p.read_text() for p in sorted(EXAMPLES.glob("*.yaml"))]
    return texts


SEEDS = _seed_texts()
SEED_DOCS = [list(yaml.safe_load_all(text)) for text in SEEDS]

FUZZ = settings(
    derandomize=True,
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


def _only_input_error(text: str) -> Snapshot | None:
    try:
        return load_snapshot_text(text, "fuzz.yaml")
    except InputError as err:
        message = str(err)
        assert message.startswith("fuzz.yaml: "), message
        assert "\n" not in message and "\r" not in message
        assert "invalid object (" not in message, f"an unexpected exception was caught: {message}"
        return None


# ------------------------------------------------------------------------------ random text


@FUZZ
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    _only_input_error(text)


YAMLISH = st.lists(
    st.sampled_from([*"ab01-9:,[]{}'\"#&*!|>-?.% \n\t", "---\n", "kind: ", "Pod", "apiVersion: v1\n", "  "]),
    max_size=80,
).map("".join)


@FUZZ
@given(YAMLISH)
def test_random_yaml_like_text(text: str) -> None:
    _only_input_error(text)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
    | st.sampled_from(["v1", "Pod", "Node", "Queue", "List", "gpufleet.dev/v1alpha1", "-1", "8", "1Gi"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["apiVersion", "kind", "metadata", "name", "spec", "items", "status", "x"]) | st.text(max_size=5),
        children, max_size=5,
    ),
    max_leaves=25,
)


@FUZZ
@given(st.lists(JSONISH, min_size=1, max_size=3))
def test_random_documents(documents: list[Any]) -> None:
    _only_input_error(yaml.safe_dump_all(documents))


# ---------------------------------------------------------------------- mutated spec examples

JUNK = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["-1", "1e40", "0.5", "abc", "", "1Gi", "0-3", "3-0", "150", "true", "Exists", "Gt"])
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)
)


def _positions(node: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """(container, key) for every value in a parsed document tree."""
    if isinstance(node, dict):
        for key in node:
            out.append((node, key))
            _positions(node[key], out)
    elif isinstance(node, list):
        for index in range(len(node)):
            out.append((node, index))
            _positions(node[index], out)
    return out


def _swap_type(value: Any) -> Any:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return {str(i): v for i, v in enumerate(value)}
    if isinstance(value, str):
        return [value]
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value) if not (isinstance(value, float) and math.isnan(value)) else None
    return {"x": value}


@FUZZ
@given(st.data())
def test_mutated_examples(data: st.DataObject) -> None:
    documents = copy.deepcopy(data.draw(st.sampled_from(SEED_DOCS), label="seed"))
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        positions = _positions(documents, [])
        container, key = positions[data.draw(st.integers(0, len(positions) - 1), label="position")]
        action = data.draw(st.sampled_from(["drop", "junk", "swap", "insert", "null"]), label="action")
        if action == "drop":
            del container[key]
        elif action == "junk":
            container[key] = data.draw(JUNK, label="junk")
        elif action == "swap":
            container[key] = _swap_type(container[key])
        elif action == "null":
            container[key] = None
        elif isinstance(container[key], dict):
            container[key][data.draw(st.text(max_size=8), label="new key")] = data.draw(JUNK, label="new value")
        elif isinstance(container[key], list):
            container[key].append(data.draw(JUNK, label="new item"))
        else:
            container[key] = data.draw(JUNK, label="junk")
    _only_input_error(yaml.safe_dump_all(documents, allow_unicode=True))


@FUZZ
@given(st.sampled_from(SEEDS), st.floats(0, 1), st.text(max_size=8), st.booleans())
def test_truncated_and_spliced_examples(seed: str, fraction: float, junk: str, splice: bool) -> None:
    cut = int(len(seed) * fraction)
    text = seed[:cut] + junk + seed[cut:] if splice else seed[:cut]
    _only_input_error(text)


def test_the_seeds_themselves_load() -> None:
    for text in SEEDS:
        assert _only_input_error(text) is not None
