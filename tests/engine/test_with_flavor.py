"""engine/flavors.py ``with_flavor``: the flavored copy of a pod is the pod with the flavor's labels
added to its node selector and every other field as it was (what ``dataclasses.replace`` gives)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import Pod, Toleration
from gpufleet.engine.flavors import with_flavor

LABELS = st.dictionaries(st.sampled_from(["gpu", "zone", "pool"]), st.sampled_from(["a", "b"]), max_size=2)


@given(selector=LABELS, labels=LABELS, priority=st.integers(0, 10), name=st.text("abc", min_size=1, max_size=5))
def test_the_copy_is_replace_with_the_labels_added(selector: dict[str, str], labels: dict[str, str], priority: int,
                                                   name: str) -> None:
    pod = Pod("team", name, labels={"app": name}, annotations={"x": "y"}, node_selector=selector,
              priority=priority, tolerations=(Toleration("k", "Exists", "", None),), node_name=None)
    got = with_flavor(pod, labels)
    if any(k in selector and selector[k] != v for k, v in labels.items()):
        assert got is None  # the pod's selector names a label of the flavor with another value
        return
    assert got == dataclasses.replace(pod, node_selector={**selector, **labels})
    assert pod.node_selector == selector  # the pod itself is left as it was
