"""``render_json`` writes exactly what ``json.dumps(decisions_to_dict(d), indent=1)`` writes, whether
msgspec writes it (nothing to escape) or json does (escapes, non-ASCII)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters.output import decisions_to_dict, render_json
from gpufleet.domain import Decisions
from gpufleet.domain.model import Binding, Eviction, EvictionReason, PendingPod, VolumeBinding

names = st.one_of(st.text(max_size=12), st.sampled_from(["ns/p-1", "node-1", 'a"b', "a\\b", "\x7f", "é", "\n"]))
bindings = st.builds(
    Binding, pod=names, node=names, gpus=st.lists(st.integers(0, 15), max_size=3).map(tuple),
    gpu_blocks=st.none() | st.integers(1, 100),
    volumes=st.lists(st.builds(VolumeBinding, claim=names, volume=st.none() | names), max_size=2).map(tuple),
)
decisions = st.builds(
    Decisions,
    bindings=st.lists(bindings, max_size=4).map(tuple),
    evictions=st.lists(st.builds(Eviction, pod=names, reason=st.sampled_from(EvictionReason), by=names),
                       max_size=2).map(tuple),
    pending=st.lists(st.builds(PendingPod, pod=names, reason=names), max_size=3).map(tuple),
)


@settings(max_examples=150)
@given(decisions)
def test_render_json_is_json_dumps_with_indent_one(d: Decisions) -> None:
    assert render_json(d) == json.dumps(decisions_to_dict(d), indent=1) + "\n"


def test_plain_and_escaped_names_alike() -> None:
    plain = Decisions(bindings=(Binding(pod="ns/a", node="n-1", gpus=(0, 1)),),
                      pending=(PendingPod(pod="ns/b", reason="no node fits"),))
    escaped = Decisions(pending=(PendingPod(pod="ns/b", reason='needs "8" GPUs — none free\t'),))
    for d in (plain, escaped, Decisions()):
        assert render_json(d) == json.dumps(decisions_to_dict(d), indent=1) + "\n"
