"""The effective request of a pod (init containers, sidecars, overhead) against a plain reference.

The reference is Kubernetes' own rule (``k8s.io/component-helpers/resource.PodRequests``) written
the long way: simulate the pod's start, container by container, and take the peak per resource.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters._k8s_core import pod_from_dict

RESOURCES = ("cpu", "memory", "example.com/dongle")

amounts = st.integers(min_value=0, max_value=5)
container = st.fixed_dictionaries({}, optional={r: amounts for r in RESOURCES})


def _spec_container(requests: dict[str, int], sidecar: bool | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "c", "resources": {"requests": {r: str(v) for r, v in requests.items()}}}
    if sidecar is not None:
        out["restartPolicy"] = "Always" if sidecar else "OnFailure"
    return out


def reference(apps: list[dict[str, int]], inits: list[tuple[dict[str, int], bool]],
              overhead: dict[str, int]) -> dict[str, int]:
    """Walk the pod's start: each init container runs alone beside the sidecars started before it;
    a sidecar keeps running; then the app containers run beside every sidecar."""
    peak: dict[str, int] = {}
    for r in RESOURCES:
        running_sidecars = 0
        highest = 0
        for requests, sidecar in inits:
            if sidecar:
                running_sidecars += requests.get(r, 0)
                highest = max(highest, running_sidecars)
            else:
                highest = max(highest, running_sidecars + requests.get(r, 0))
        steady = running_sidecars + sum(a.get(r, 0) for a in apps)
        peak[r] = max(highest, steady) + overhead.get(r, 0)
    return peak


@settings(max_examples=300, deadline=None)
@given(
    apps=st.lists(container, min_size=1, max_size=3),
    inits=st.lists(st.tuples(container, st.booleans()), max_size=4),
    overhead=st.fixed_dictionaries({}, optional={r: amounts for r in ("cpu", "memory")}),
    policy_written=st.booleans(),
)
def test_effective_requests_follow_kubernetes(apps: list[dict[str, int]], inits: list[tuple[dict[str, int], bool]],
                                              overhead: dict[str, int], policy_written: bool) -> None:
    spec: dict[str, Any] = {
        "containers": [_spec_container(a, None) for a in apps],
        "initContainers": [
            _spec_container(c, sidecar if (sidecar or policy_written) else None) for c, sidecar in inits
        ],
    }
    if overhead:
        spec["overhead"] = {r: str(v) for r, v in overhead.items()}
    pod = pod_from_dict({"metadata": {"name": "p", "namespace": "ml"}, "spec": spec})
    got = {r: v // 1000 for r, v in pod.requests.items() if v}
    want = {r: v for r, v in reference(apps, inits, overhead).items() if v}
    assert got == want
