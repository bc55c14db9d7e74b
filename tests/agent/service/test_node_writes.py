"""The Node patches, as properties: only the agent's keys change, one patch brings the Node to what
is wanted, and a second finds nothing to do; other conditions are kept."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.agent.health import CONDITION_GPU_HEALTHY, NodeCondition
from gpufleet.agent.service import DesiredNode, condition_patch, metadata_patch
from gpufleet.testing.fake_cluster import merge_patch

keys = st.sampled_from(["a/x", "b/y", "nvidia.com/gpu.product", "gpufleet.dev/unhealthy-gpus", "other.io/z"])
values = st.sampled_from(["1", "2", "H100"])
maps = st.dictionaries(keys, values, max_size=5)
wanted_maps = st.dictionaries(keys, st.none() | values, max_size=5)


def node(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n", "resourceVersion": "7", "labels": labels, "annotations": annotations}}


@given(maps, maps, wanted_maps, wanted_maps)
def test_one_patch_makes_the_node_so_and_touches_nothing_else(labels: dict[str, str], annotations: dict[str, str],
                                                              want_labels: dict[str, str | None],
                                                              want_annotations: dict[str, str | None]) -> None:
    before = node(labels, annotations)
    desired = DesiredNode(labels=want_labels, annotations=want_annotations)
    patch = metadata_patch(before, desired)
    after = merge_patch(before, patch) if patch is not None else before
    for have, want, was in ((after["metadata"]["labels"], want_labels, labels),
                            (after["metadata"]["annotations"], want_annotations, annotations)):
        for key in set(was) | set(want):
            if key in want:
                assert have.get(key) == want[key]
            else:
                assert have.get(key) == was.get(key)  # not the agent's key: as it was
    if patch is not None:
        assert patch["metadata"]["resourceVersion"] == "7"  # a conflict, not a blind overwrite
    assert metadata_patch(after, desired) is None


@given(st.lists(st.sampled_from(["Ready", "MemoryPressure", CONDITION_GPU_HEALTHY]), unique=True),
       st.sampled_from(["True", "False", "Unknown"]))
def test_the_condition_patch_keeps_the_others_and_moves_the_transition_only_on_change(
        types: list[str], status: str) -> None:
    conditions = [{"type": t, "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                  for t in types]
    before = {"status": {"conditions": conditions}}
    wanted = NodeCondition(status, "GPUsHealthy" if status == "True" else "GPUUnhealthy", "m")
    patch = condition_patch(before, wanted, 1_767_225_700.0)
    assert patch is not None
    assert [c for c in patch["conditions"] if c["type"] != CONDITION_GPU_HEALTHY] == [
        c for c in conditions if c["type"] != CONDITION_GPU_HEALTHY]
    [mine] = [c for c in patch["conditions"] if c["type"] == CONDITION_GPU_HEALTHY]
    moved = CONDITION_GPU_HEALTHY not in types or status != "True"
    assert (mine["lastTransitionTime"] != "2026-01-01T00:00:00Z") == moved
    assert condition_patch({"status": patch}, wanted, 1_767_225_800.0) is None
