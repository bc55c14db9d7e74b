"""``QuotaGates.gang_request``: members alike counted once per row, and a row's quota vector reused
from the last call's gang when alike; always the sum of the members' own ``quota_vec``."""

from __future__ import annotations

import random
from dataclasses import replace

from gpufleet.bench.shapes import make_shape
from gpufleet.domain import CPU, QueueResource
from gpufleet.engine.scheduler import Engine


def test_gang_requests_are_the_sums_of_their_members_whatever_was_asked_before() -> None:
    snapshot = make_shape("gang-small", 0.05)
    # Every third pod asks one more CPU, in a mapping of its own: rows alike in all but the request.
    pods = tuple(replace(p, requests={**p.requests, CPU: p.requests.get(CPU, 0) + 1000}) if i % 3 == 0 else p
                 for i, p in enumerate(snapshot.pods))
    # CPU counted against quota too (queues with a CPU quota): the request mapping matters.
    queues = tuple(replace(q, resources={**q.resources, CPU: QueueResource(quota=10**9)}) if q.resources else q
                   for q in snapshot.queues)
    engine = Engine(replace(snapshot, pods=pods, queues=queues))
    quota = engine.quota
    assert CPU in quota.managed
    groups = [engine.admission.pending_members(g) for g in engine.gangs if g.members]
    groups = [m for m in groups if m]
    assert len(groups) > 20
    rng = random.Random(7)
    for _ in range(3):
        rng.shuffle(groups)
        for members in groups:
            expected = [0] * len(quota.managed)
            for m in members:
                for j, v in enumerate(quota.quota_vec(engine.pods[m])):
                    expected[j] += v
            assert quota.gang_request(members) == expected
            one = [members[-1]]  # a row alike but for its request mapping, right after
            assert quota.gang_request(one) == quota.quota_vec(engine.pods[one[0]])
