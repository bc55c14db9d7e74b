"""Cluster spec YAML -> domain nodes; trace node lists -> domain nodes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters.cluster_spec import (
    POOL_LABEL,
    RACK_LABEL,
    SPOT_LABEL,
    cluster_from_trace_nodes,
    load_cluster_spec_file,
    load_cluster_spec_text,
    trace_nodes_to_domain,
)
from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.adapters.k8s_yaml_writer import dump_snapshot
from gpufleet.adapters.traces import TraceNode, bundled_openb_nodes
from gpufleet.domain import CPU, GPU, MEMORY, MILLI, PODS, Pod, Snapshot, TaintEffect
from gpufleet.engine import schedule

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster-philly.yaml"
GIB = 2**30

HEAD = "apiVersion: gpufleet.dev/v1alpha1\nkind: ClusterSpec\nmetadata: {name: demo}\n"
POOL = (
    "  - name: a100\n    count: 16\n    gpusPerNode: 8\n    gpuModel: A100-80GB\n    gpuMemory: 80Gi\n"
    '    cpu: "96"\n    memory: 1Ti\n    nvlinkDomains: "0-3;4-7"\n    pricePerGpuHour: 2.5\n'
    '    labels: {topology.gpufleet.dev/rack: "rack-{index//8}", topology.gpufleet.dev/block: "{pool}-b{cluster_index//64:02}"}\n'
)


def spec(pools: str = POOL) -> str:
    return HEAD + "spec:\n  pools:\n" + pools


def test_happy_path() -> None:
    layout = load_cluster_spec_text(
        spec(POOL + '  - name: cpu\n    count: 2\n    cpu: 500m\n    memory: "64Gi"\n    pricePerNodeHour: 0.4\n'
             "    spot: true\n    taints: [{key: dedicated, value: etl, effect: NoSchedule}]\n"),
        "c.yaml",
    )
    assert layout.name == "demo" and len(layout.nodes) == 18 and layout.total_gpus == 128
    first, ninth, cpu = layout.nodes[0], layout.nodes[8], layout.nodes[16]
    assert (first.name, ninth.name, cpu.name) == ("a100-000", "a100-008", "cpu-000")
    assert first.allocatable == {CPU: 96 * MILLI, MEMORY: 1024 * GIB * MILLI, PODS: 110 * MILLI, GPU: 8 * MILLI}
    assert first.labels == {
        "kubernetes.io/hostname": "a100-000",
        "nvidia.com/gpu.product": "A100-80GB",
        "nvidia.com/gpu.memory": "81920",
        POOL_LABEL: "a100",
        RACK_LABEL: "rack-0",
        "topology.gpufleet.dev/block": "a100-b00",
    }
    assert ninth.labels[RACK_LABEL] == "rack-1"
    assert first.nvlink_domains == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert first.annotations == {"gpufleet.dev/nvlink-domains": "0-3;4-7"}
    assert (first.gpu_memory_mib, first.gpu_product) == (81920, "A100-80GB")
    assert layout.price_per_hour[first.name] == 20.0 and layout.price_per_hour[cpu.name] == 0.4
    assert layout.spot == {"cpu-000", "cpu-001"} and cpu.labels[SPOT_LABEL] == "true"
    assert cpu.allocatable[CPU] == 500 and cpu.allocatable[GPU] == 0 and cpu.taints[0].effect is TaintEffect.NO_SCHEDULE
    assert layout.pool_of["a100-015"] == "a100" and layout.pool_of["cpu-001"] == "cpu"


def test_the_example_file() -> None:
    layout = load_cluster_spec_file(EXAMPLE)
    assert len(layout.nodes) == 440 and layout.total_gpus == 2440
    assert {layout.pool_of[n.name] for n in layout.nodes} == {"p100-8", "p40-8", "m40-4", "m40-2"}
    assert layout.nodes[-1].labels[RACK_LABEL] == "m40s-rack-12"
    assert len(layout.spot) == 100


def test_nodes_equal_what_the_snapshot_loader_reads_back() -> None:
    """The spec's nodes carry exactly the labels/annotations/capacity the Kubernetes YAML path gives."""
    layout = load_cluster_spec_file(EXAMPLE)
    back = load_snapshot_text(dump_snapshot(Snapshot(nodes=layout.nodes)), "round-trip")
    assert sorted(back.nodes, key=lambda n: n.name) == sorted(layout.nodes, key=lambda n: n.name)


def test_the_engine_places_pods_on_spec_nodes() -> None:
    layout = load_cluster_spec_text(spec(POOL.replace("count: 16", "count: 2")), "c.yaml")
    pods = tuple(
        Pod(namespace="ml", name=f"p{i}", requests={GPU: 4 * MILLI, CPU: MILLI, MEMORY: GIB * MILLI}) for i in range(5)
    )
    decisions = schedule(Snapshot(nodes=layout.nodes, pods=pods))
    assert len(decisions.bindings) == 4 and len(decisions.pending) == 1
    assert all(b.gpus in ((0, 1, 2, 3), (4, 5, 6, 7)) for b in decisions.bindings)  # within NVLink domains


BAD = [
    (spec(POOL + "    gpuMemroy: 80Gi\n"), "spec.pools[0].gpuMemroy: unknown field"),
    (spec(POOL.replace("80Gi", "80GB")), 'spec.pools[0].gpuMemory: malformed quantity "80GB"'),
    (spec(POOL.replace("80Gi", "81920")), "spec.pools[0].gpuMemory: must be at least 1Mi (e.g. 80Gi), got 81920 bytes"),
    (spec(POOL.replace("count: 16", "count: -1")), "spec.pools[0].count: must be >= 0, got -1"),
    (spec(POOL.replace("count: 16", 'count: "16"')), 'spec.pools[0].count: must be an integer, got "16"'),
    (spec(POOL.replace('"96"', "-4")), 'spec.pools[0].cpu: negative quantity "-4"'),
    (spec(POOL.replace("name: a100", "name: A100")), 'spec.pools[0].name: must be a lowercase DNS label'),
    (spec(POOL.replace("0-3;4-7", "0-3;4-8")), "spec.pools[0].nvlinkDomains: GPU 8 does not exist on a node of 8 GPUs"),
    (spec(POOL.replace("0-3;4-7", "0-3;3-7")), "spec.pools[0].nvlinkDomains: GPU 3 appears twice"),
    (spec(POOL.replace("rack-{index//8}", "rack-{idx}")), "spec.pools[0].labels.topology.gpufleet.dev/rack: unknown placeholder"),
    (spec(POOL.replace("rack-{index//8}", "rack {index}")), 'labels.topology.gpufleet.dev/rack: invalid label value "rack 0"'),
    (spec(POOL.replace("topology.gpufleet.dev/rack", "nvidia.com/gpu.product")), "gpufleet sets nvidia.com/gpu.product from gpuModel"),
    (spec(POOL + "    pricePerNodeHour: 3\n"), "give either pricePerGpuHour or pricePerNodeHour"),
    (spec(POOL.replace("2.5", '"2.5"')), 'spec.pools[0].pricePerGpuHour: must be a number, got "2.5"'),
    (spec(POOL + POOL), 'spec.pools[1].name: pool "a100" repeats spec.pools[0]'),
    (spec(POOL + POOL.replace("name: a100", "name: b").replace("gpuModel", "namePrefix: a100\n    gpuModel")),
     "spec.pools[1].namePrefix: node name a100-000 is also made by pool a100"),
    (spec('  - {name: c, count: 1, cpu: "1", memory: 1Gi, gpuMemory: 16Gi}\n'), "spec.pools[0].gpuMemory: needs gpusPerNode > 0"),
    (spec('  - {name: c, count: 1, cpu: "1"}\n'), "spec.pools[0].memory: required field missing"),
    (HEAD + "spec: {pools: []}\n", "spec.pools: must have at least 1 item(s)"),
    (HEAD.replace("v1alpha1", "v1"), 'apiVersion: must be \'gpufleet.dev/v1alpha1\', got "gpufleet.dev/v1"'),
    (HEAD.replace("ClusterSpec", "Cluster") + "spec: {pools: []}\n", "kind: must be 'ClusterSpec'"),
    (spec() + "---\n" + spec(), "expected one ClusterSpec document, got 2"),
    ("", "expected one ClusterSpec document, got 0"),
    ("- a\n- b\n", "expected a ClusterSpec (a mapping), got a list"),
    (HEAD + "spec: {pools: [\n", "malformed YAML"),
]


@pytest.mark.parametrize(("text", "problem"), BAD)
def test_bad_specs(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_cluster_spec_file(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert problem in message, message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.yaml: no such file"):
        load_cluster_spec_file(tmp_path / "nope.yaml")


def test_templates_are_checked_for_empty_pools() -> None:
    with pytest.raises(InputError, match="unknown placeholder"):
        load_cluster_spec_text(spec(POOL.replace("count: 16", "count: 0").replace("{index//8}", "{x}")), "c.yaml")


# ------------------------------------------------------------------------------ trace node lists


def test_trace_nodes_to_domain() -> None:
    nodes = trace_nodes_to_domain(bundled_openb_nodes(), rack_size=32)
    assert len(nodes) == 1213 and sum(n.gpu_count for n in nodes) == 6212
    first = nodes[0]  # openb-node-0000,64000,262144,2,P100
    assert first.allocatable == {CPU: 64_000, MEMORY: 262_144 * 2**20 * MILLI, PODS: 110 * MILLI, GPU: 2 * MILLI}
    assert first.labels == {
        "kubernetes.io/hostname": "openb-node-0000",
        "nvidia.com/gpu.product": "P100",
        "nvidia.com/gpu.memory": "16384",
        POOL_LABEL: "P100",
        RACK_LABEL: "rack-0000",
    }
    assert nodes[32].labels[RACK_LABEL] == "rack-0001"
    g2 = next(n for n in nodes if n.gpu_product == "G2")
    assert g2.gpu_memory_mib is None and "nvidia.com/gpu.memory" not in g2.labels


def test_unknown_memory_and_cpu_only_nodes() -> None:
    trace = [TraceNode("s0", 192_000, 0, 8, "H800", 81920), TraceNode("c0", 32_000, 4096, 0)]
    bare = trace_nodes_to_domain(trace)
    assert MEMORY not in bare[0].allocatable and bare[1].allocatable[MEMORY] == 4096 * 2**20 * MILLI
    assert bare[1].labels[POOL_LABEL] == "cpu" and bare[1].gpu_product is None
    filled = trace_nodes_to_domain(trace, unknown_memory_mib=1024, pods_per_node=16)
    assert filled[0].allocatable[MEMORY] == 1024 * 2**20 * MILLI and filled[0].allocatable[PODS] == 16 * MILLI
    layout = cluster_from_trace_nodes("spot", trace)
    assert layout.pool_of == {"s0": "H800", "c0": "cpu"} and layout.price_per_hour == {"s0": 0.0, "c0": 0.0}
    assert layout.total_gpus == 8 and layout.spot == frozenset()


_SCALARS = st.sampled_from(
    ["0", "-1", "1.5", '"8"', "80Gi", "1e400", "null", "true", "[]", "{}", '"0-3;4-7"', '"{index//0}"', '"a b"', "'x", "99999999999"]
)
_KEYS = ["count", "gpusPerNode", "gpuMemory", "cpu", "memory", "nvlinkDomains", "pricePerGpuHour", "name", "pods", "spot"]


@given(changes=st.lists(st.tuples(st.sampled_from(_KEYS), _SCALARS), max_size=3))
@settings(max_examples=150, deadline=None)
def test_fuzzed_pool_fields_give_only_input_errors(changes: list[tuple[str, str]]) -> None:
    pool = '  - {name: a, count: 2, gpusPerNode: 8, gpuMemory: 16Gi, cpu: "8", memory: 64Gi, nvlinkDomains: "0-7", pricePerGpuHour: 1}\n'
    for key, value in changes:
        pool = pool.replace("}\n", f", {key}: {value}}}\n") if f"{key}:" not in pool else re.sub(rf"{key}: [^,}}]*", f"{key}: {value}", pool)
    try:
        layout = load_cluster_spec_text(spec(pool), "fuzz.yaml")
    except InputError as err:
        assert str(err).startswith("fuzz.yaml: ") and "\n" not in str(err)
        return
    assert all(n.gpu_count <= 64 for n in layout.nodes) and len(layout.price_per_hour) == len(layout.nodes)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"apiVersion: \xff\n")
    with pytest.raises(InputError, match=r"c\.yaml: not UTF-8 text$"):
        load_cluster_spec_file(path)
