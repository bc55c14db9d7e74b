"""HostPorts (the NodePorts filter over node arrays) against the rule written the long way."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import WILDCARD_IP, HostPort
from gpufleet.engine.ports import HostPorts

ports = st.tuples(st.sampled_from(["TCP", "UDP"]), st.sampled_from([WILDCARD_IP, "10.0.0.1", "10.0.0.2"]),
                  st.sampled_from([80, 8080]))
N_NODES = 3


def clash(a: HostPort, b: HostPort) -> bool:
    """Kubernetes' HostPortInfo.CheckConflict: same protocol and port, and the same IP or either
    side on every IP."""
    return a[0] == b[0] and a[2] == b[2] and (a[1] == b[1] or WILDCARD_IP in (a[1], b[1]))


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, N_NODES - 1), st.lists(ports, min_size=1, max_size=2),
                                st.booleans()), max_size=12),
       asked=st.lists(ports, min_size=1, max_size=2))
def test_free_mask_follows_the_conflict_rule(steps: list[tuple[int, list[HostPort], bool]],
                                             asked: list[HostPort]) -> None:
    table = HostPorts(N_NODES)
    bound: list[tuple[int, list[HostPort]]] = []
    for node, used, leave in steps:
        if leave and bound:  # the oldest bound pod leaves (a rollback or an eviction)
            gone_node, gone = bound.pop(0)
            table.change(gone_node, gone, -1)
        table.change(node, used, 1)
        bound.append((node, used))
    want = [not any(clash(p, q) for n, used in bound if n == node for q in used for p in asked)
            for node in range(N_NODES)]
    assert table.free_mask(asked).tolist() == want
