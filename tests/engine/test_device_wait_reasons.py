"""A pod waiting for its DRA claims keeps its own reason: alike pods that fail alike share one
placement attempt (the engine's memo of failures), but not the claim each of them waits for."""

from __future__ import annotations

from gpufleet.domain import GPU, MILLI, Node, NodeName, Pod, Snapshot
from gpufleet.engine import schedule


def test_alike_pods_waiting_for_different_claims_keep_their_own_reasons() -> None:
    waits = {"a": 'resourceclaim "a-gpu" not found',
             "b": 'waiting for resourceclaim for entry "gpu" (template "single-gpu") to be created',
             "c": 'resourceclaim "c-gpu" request "gpu": adminAccess is not supported by gpufleet'}
    pods = tuple(Pod(namespace="ml", name=name, scheduler_name="gpufleet", requests={GPU: MILLI}, device_wait=why)
                 for name, why in waits.items())
    node = Node(name=NodeName("n1"), allocatable={GPU: 8 * MILLI, "cpu": 64 * MILLI, "pods": 110 * MILLI})
    decided = schedule(Snapshot(nodes=(node,), pods=pods))
    assert {p.pod: p.reason for p in decided.pending} == {f"ml/{k}": v for k, v in waits.items()}
