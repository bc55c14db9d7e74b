"""Pods whose GPUs come from DRA claims take the batch path and the free-GPU index, and decide
exactly what the one-by-one loop without the index decides.

The engine knows no DRA object: ``resolve_devices`` (adapters/devices.py) reads a claim asking for
N devices of a class into a request of N GPUs and, when its selectors leave out some nodes with
such devices, the nodes it may use (``Pod.device_nodes``), which the static mask applies once per
distinct set (engine/feasibility.py). So a DRA pod is a whole-GPU pod with a static mask: the
batch (engine/batch.py) and the index (engine/nodeindex.py) answer it as any such pod. Checked on
``dra-basic`` read as the controller reads it (the same bindings as ``basic``), on a variant whose
claims select the devices of a few nodes only, and on random snapshots of runs of identical lone
pods with random ``device_nodes`` (and some waiting for their claims).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters import resolve_devices
from gpufleet.bench.shapes import make_shape
from gpufleet.domain import ClaimTemplate, DeviceRequest, Snapshot
from gpufleet.engine import schedule
from gpufleet.engine.placement import Placer
from gpufleet.engine.scheduler import Engine

from .strategies import Draw, _chance
from .test_batch import batch_snapshots

DRIVER = "gpu.nvidia.com"


def _runs(snapshot: Snapshot) -> tuple[Engine, Any, Any, Any]:
    """The engine with the batch path and the index (after its run), its decisions, and those of
    the one-by-one loop with and without the index (the same admissions in the same order first)."""
    engine = Engine(snapshot)
    decisions = engine.run()
    single = Engine(snapshot)
    single.USE_BATCH = False
    one_by_one = single.run()
    assert single.batched == 0
    assert list(engine.log.bindings.items()) == list(single.log.bindings.items())
    assert list(engine.log.evictions.items()) == list(single.log.evictions.items())
    with mock.patch.object(Placer, "USE_INDEX", False):
        bare = Engine(snapshot)
        bare.USE_BATCH = False
        vectorised = bare.run()
    return engine, decisions, one_by_one, vectorised


def test_dra_basic_read_is_decided_in_batches_as_basic() -> None:
    view = resolve_devices(make_shape("dra-basic", 0.05))
    engine, decisions, one_by_one, vectorised = _runs(view.snapshot)
    assert engine.batches >= 1 and engine.batched == len(decisions.bindings) == 500
    assert decisions == one_by_one == vectorised
    basic = schedule(make_shape("basic", 0.05))
    assert [(b.pod, b.node, b.gpus) for b in decisions.bindings] == [(b.pod, b.node, b.gpus) for b in basic.bindings]
    for b in view.attach(decisions).bindings:  # each claim gets the devices of the binding's GPUs
        (claim,) = b.devices
        assert [(r.driver, r.pool, r.device) for r in claim.results] == [(DRIVER, b.node, f"gpu-{g}") for g in b.gpus]


def test_claims_selecting_a_few_nodes_are_decided_in_batches_within_them() -> None:
    """Claims whose selector matches the devices of nodes 0-9 only: every pod's ``device_nodes``
    is those ten nodes; the batch fills their 80 GPUs (less the running pods') and the rest wait."""
    shape = make_shape("dra-basic", 0.05)
    request = (DeviceRequest("gpu", DRIVER, selectors=(f"device.attributes['{DRIVER}'].uuid.startsWith('GPU-0000')",)),)
    shape = replace(shape, resource_claims=tuple(replace(c, requests=request) for c in shape.resource_claims),
                    claim_templates=(ClaimTemplate(shape.claim_templates[0].namespace, "single-gpu", requests=request),))
    view = resolve_devices(shape)
    few = {n.name for n in shape.nodes[:10]}
    assert {p.device_nodes for p in view.snapshot.pods if p.node_name is None} == {frozenset(few)}
    engine, decisions, one_by_one, vectorised = _runs(view.snapshot)
    assert decisions == one_by_one == vectorised
    assert engine.batched == len(decisions.bindings) > 0
    assert {b.node for b in decisions.bindings} <= few
    running = sum(len(p.gpu_index) for p in view.snapshot.pods if p.node_name in few)
    assert len(decisions.bindings) == 80 - running
    assert all("without devices for its resource claims" in p.reason for p in decisions.pending)


@st.composite
def dra_batch_snapshots(draw: Draw) -> Snapshot:
    """:func:`test_batch.batch_snapshots` whose pending lone pods of each family carry the same
    ``device_nodes`` (a random set of node names, or none), and now and then one waits for its
    claim (``device_wait``)."""
    snapshot: Snapshot = draw(batch_snapshots())
    names = [n.name for n in snapshot.nodes]
    chosen: dict[str, frozenset[str] | None] = {}
    pods = []
    for p in snapshot.pods:
        if p.node_name is None and p.name.startswith("f"):
            family = p.name.split("-")[0]
            if family not in chosen:
                chosen[family] = (frozenset(draw(st.lists(st.sampled_from(names), unique=True)))
                                  if draw(st.booleans()) else None)
            p = replace(p, device_nodes=chosen[family])
            if _chance(draw, 8):
                p = replace(p, device_wait=f'resourceclaim "{p.name}-gpu" not found')
        pods.append(p)
    return replace(snapshot, pods=tuple(pods))


@settings(max_examples=150, deadline=None)
@given(dra_batch_snapshots())
def test_pods_with_device_nodes_decide_in_batches_as_one_by_one_without_the_index(snapshot: Snapshot) -> None:
    _, decisions, one_by_one, vectorised = _runs(snapshot)
    assert decisions == one_by_one == vectorised
