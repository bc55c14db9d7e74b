"""Discovery: the Node labels and annotations of a node's GPUs, and the patch that writes them."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters import node_from_dict
from gpufleet.agent.discovery import (
    LABEL_GPU_COUNT,
    MetadataPatch,
    NodeGpuMetadata,
    format_nvlink_domains,
    metadata_patch,
    node_gpu_metadata,
    nvlink_domains,
    product_label,
)
from gpufleet.agent.gpus import GpuInfo, MigInstance
from gpufleet.agent.gpus.nvml import open_nvml
from gpufleet.domain import ANNOTATION_NVLINK_DOMAINS, ANNOTATION_UNHEALTHY_GPUS, LABEL_GPU_MEMORY, LABEL_GPU_PRODUCT
from gpufleet.testing import fake_gpus, merge_patch
from gpufleet.testing.fake_nvml import FakeNvml


def _linked(count: int, pairs: list[tuple[int, int]], switched: frozenset[int] = frozenset()) -> tuple[GpuInfo, ...]:
    peers: dict[int, set[int]] = {i: set() for i in range(count)}
    for a, b in pairs:
        peers[a].add(b)  # one end reports it: enough
    return tuple(dataclasses.replace(gpu, nvlink_peers=frozenset(peers[gpu.index]), nvswitch=gpu.index in switched)
                 for gpu in fake_gpus(count))


def test_product_labels_are_written_as_gpu_feature_discovery_writes_them() -> None:
    assert product_label("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert product_label("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert product_label("Tesla V100-SXM2-16GB") == "Tesla-V100-SXM2-16GB"
    assert product_label(" NVIDIA RTX 6000 Ada (Generation) ") == "NVIDIA-RTX-6000-Ada-Generation"
    assert len(product_label("X" * 100)) == 63


def test_an_eight_gpu_node_in_two_nvlink_islands() -> None:
    gpus = _linked(8, [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 7)])
    meta = node_gpu_metadata(gpus)
    assert meta.labels == {LABEL_GPU_COUNT: "8", LABEL_GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3", LABEL_GPU_MEMORY: "81559"}
    assert meta.annotations == {ANNOTATION_NVLINK_DOMAINS: "0-3;4-7"}


def test_all_nvswitch_gpus_are_one_domain_and_unlinked_gpus_none() -> None:
    assert nvlink_domains(_linked(8, [], frozenset(range(8)))) == (tuple(range(8)),)
    assert nvlink_domains(_linked(4, [(0, 2)], frozenset({1, 3}))) == ((0, 2), (1, 3))
    assert nvlink_domains(_linked(4, [])) == ()
    assert nvlink_domains(_linked(2, [], frozenset({1}))) == ()  # one GPU on a switch joins nothing
    assert ANNOTATION_NVLINK_DOMAINS not in node_gpu_metadata(_linked(4, [])).annotations


def test_domains_are_written_with_ranges_only_where_they_shorten() -> None:
    assert format_nvlink_domains([(0, 1), (2, 3, 4, 6), (8, 9, 10, 11, 12)]) == "0,1;2-4,6;8-12"


def test_peers_that_are_not_gpus_of_the_node_are_ignored() -> None:
    gpus = tuple(dataclasses.replace(g, nvlink_peers=frozenset({9, g.index})) for g in fake_gpus(2))
    assert nvlink_domains(gpus) == ()


def test_mig_instances_are_counted_per_profile_and_memory_is_the_smallest_gpus() -> None:
    gpus = list(fake_gpus(2))
    gpus[0] = dataclasses.replace(gpus[0], mig_enabled=True, mig_instances=(
        MigInstance(1, 0, "3g.40gb", 40192, "MIG-a"), MigInstance(2, 0, "1g.10gb", 9856, "MIG-b"),
        MigInstance(3, 0, "1g.10gb", 9856, "MIG-c")))
    gpus[1] = dataclasses.replace(gpus[1], memory_mib=40960)
    labels = node_gpu_metadata(gpus).labels
    assert labels[LABEL_GPU_MEMORY] == "40960"
    assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/mig-")} == {
        "nvidia.com/mig-1g.10gb.count": "2", "nvidia.com/mig-1g.10gb.memory": "9856",
        "nvidia.com/mig-3g.40gb.count": "1", "nvidia.com/mig-3g.40gb.memory": "40192"}


def test_without_feature_labels_only_the_annotation_is_written() -> None:
    meta = node_gpu_metadata(_linked(2, [(0, 1)]), feature_labels=False)
    assert (dict(meta.labels), dict(meta.annotations)) == ({}, {ANNOTATION_NVLINK_DOMAINS: "0,1"})
    current = {LABEL_GPU_PRODUCT: "written-by-gfd", LABEL_GPU_COUNT: "8"}
    assert metadata_patch(meta, current, {}, feature_labels=False) == MetadataPatch(
        annotations={ANNOTATION_NVLINK_DOMAINS: "0,1"})


def test_the_patch_sets_changed_keys_deletes_stale_ones_and_leaves_others() -> None:
    desired = NodeGpuMetadata(labels={LABEL_GPU_COUNT: "8", LABEL_GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3"},
                              annotations={ANNOTATION_NVLINK_DOMAINS: "0-7"})
    labels = {LABEL_GPU_COUNT: "8", LABEL_GPU_PRODUCT: "old", "nvidia.com/mig-1g.10gb.count": "7",
              "kubernetes.io/hostname": "n1", "nvidia.com/gpu.family": "hopper"}
    annotations = {ANNOTATION_NVLINK_DOMAINS: "0-3;4-7", ANNOTATION_UNHEALTHY_GPUS: "3"}
    patch = metadata_patch(desired, labels, annotations)
    assert patch.labels == {LABEL_GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig-1g.10gb.count": None}
    assert patch.annotations == {ANNOTATION_NVLINK_DOMAINS: "0-7"}  # unhealthy-gpus is the health rules'
    assert patch.merge_patch() == {"metadata": {"labels": dict(patch.labels), "annotations": dict(patch.annotations)}}
    assert metadata_patch(desired, dict(desired.labels), dict(desired.annotations)).empty


def test_discovery_over_the_nvml_reader_on_an_hgx_board() -> None:
    nvml = FakeNvml.with_gpus(8)
    nvml.nvswitch(range(8))
    meta = node_gpu_metadata(open_nvml(nvml).read())
    assert meta.annotations == {ANNOTATION_NVLINK_DOMAINS: "0-7"}
    assert meta.labels[LABEL_GPU_PRODUCT] == "NVIDIA-H100-80GB-HBM3"


# ------------------------------------------------------------------------------------ properties

_links = st.integers(min_value=1, max_value=12).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=20),
    st.frozensets(st.integers(0, n - 1)),
))


@settings(max_examples=200, deadline=None)
@given(_links)
def test_domains_partition_the_linked_gpus_and_round_trip_through_the_engines_parser(
        case: tuple[int, list[tuple[int, int]], frozenset[int]]) -> None:
    count, pairs, switched = case
    gpus = _linked(count, pairs, switched)
    domains = nvlink_domains(gpus)
    members = [index for domain in domains for index in domain]
    assert len(members) == len(set(members))  # disjoint
    linked = {i for a, b in pairs if a != b for i in (a, b)} | (switched if len(switched) > 1 else set())
    assert set(members) == linked  # every linked GPU, and no other
    where = {index: n for n, domain in enumerate(domains) for index in domain}
    assert all(where[a] == where[b] for a, b in pairs if a != b)  # a link never crosses domains
    text = node_gpu_metadata(gpus).annotations.get(ANNOTATION_NVLINK_DOMAINS)
    node = node_from_dict({"metadata": {"name": "n1", "annotations": {} if text is None else {
        ANNOTATION_NVLINK_DOMAINS: text}}, "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": count}}})
    assert node.nvlink_domains == domains


_keys = st.sampled_from([LABEL_GPU_COUNT, LABEL_GPU_PRODUCT, LABEL_GPU_MEMORY, "nvidia.com/mig-1g.10gb.count",
                         "nvidia.com/mig-2g.20gb.memory", "kubernetes.io/hostname", "nvidia.com/gpu.family",
                         "team", ANNOTATION_NVLINK_DOMAINS, ANNOTATION_UNHEALTHY_GPUS])
_values = st.sampled_from(["1", "2", "x"])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_keys, _values), st.dictionaries(_keys, _values), st.integers(1, 8),
       st.booleans())
def test_the_patch_makes_owned_keys_desired_and_never_touches_another(
        labels: dict[str, str], annotations: dict[str, str], count: int, feature_labels: bool) -> None:
    desired = node_gpu_metadata(_linked(count, [(0, count - 1)]), feature_labels=feature_labels)
    patch = metadata_patch(desired, labels, annotations, feature_labels=feature_labels)
    node: Any = merge_patch({"metadata": {"labels": labels, "annotations": annotations}}, patch.merge_patch())
    after_labels, after_annotations = node["metadata"].get("labels", {}), node["metadata"].get("annotations", {})
    for key, value in desired.labels.items():
        assert after_labels[key] == value
    for key, value in desired.annotations.items():
        assert after_annotations[key] == value
    for key in ("kubernetes.io/hostname", "nvidia.com/gpu.family", "team", ANNOTATION_UNHEALTHY_GPUS):
        assert after_labels.get(key) == labels.get(key)
        assert after_annotations.get(key) == annotations.get(key)
    if not feature_labels:
        assert after_labels == labels
    assert metadata_patch(desired, after_labels, after_annotations, feature_labels=feature_labels).empty
