"""ResourceFlavor rules every reader shares (docs/semantics.md, "GPU-model quotas"): which nodes are
of which flavor, and which flavor settings are bad input.

The replay loader refuses the input on the first problem; the controller's snapshot builder leaves
the flavors out (overlapping ones) or reports the Queue (unknown flavors). Problems are data; each
caller words the place for its own output.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.domain.model import Node, Queue, ResourceFlavor

__all__ = [
    "FLAVOR_SEP", "FlavorProblem", "flavor_problem", "flavor_problems", "flavored", "node_is_of",
    "overlapping_flavors",
]

# A (flavor, resource) quota dimension is named ``resource@flavor`` (no resource name has an "@").
FLAVOR_SEP = "@"


def flavored(resource: str, flavor: str) -> str:
    """The name of the quota dimension of ``resource`` on the nodes of ``flavor``."""
    return f"{resource}{FLAVOR_SEP}{flavor}"


@dataclass(frozen=True, slots=True)
class FlavorProblem:
    """Bad flavor input: the object (``kind`` ``name``), the field and what is wrong."""

    kind: str
    name: str
    path: str
    message: str


def node_is_of(labels: Mapping[str, str], flavor: ResourceFlavor) -> bool:
    """Whether a node with ``labels`` carries every label of ``flavor`` with its value."""
    return all(labels.get(k) == v for k, v in flavor.node_labels)


def _overlaps(flavors: Sequence[ResourceFlavor], nodes: Iterable[Node]) -> Iterable[tuple[Node, list[str]]]:
    if len(flavors) < 2:
        return
    for node in nodes:
        matched = [f.name for f in flavors if node_is_of(node.labels, f)]
        if len(matched) > 1:
            yield node, matched


def overlapping_flavors(flavors: Sequence[ResourceFlavor], nodes: Iterable[Node]) -> dict[str, str]:
    """Flavors some node is of together with another: flavor name -> the first such node's name."""
    out: dict[str, str] = {}
    for node, matched in _overlaps(flavors, nodes):
        for name in matched:
            out.setdefault(name, node.name)
    return out


def flavor_problem(flavors: Sequence[ResourceFlavor], queues: Iterable[Queue],
                   nodes: Iterable[Node]) -> FlavorProblem | None:
    """The first of :func:`flavor_problems` (None: none)."""
    return next(flavor_problems(flavors, queues, nodes), None)


def flavor_problems(flavors: Sequence[ResourceFlavor], queues: Iterable[Queue],
                    nodes: Iterable[Node]) -> Iterator[FlavorProblem]:
    """The problems of the flavor settings: a flavor without labels, a Queue's flavor that is no
    ResourceFlavor or is listed twice, a node of two flavors (one problem per node)."""
    for f in flavors:
        if not f.node_labels:
            yield FlavorProblem("ResourceFlavor", f.name, "spec.nodeLabels", "must not be empty")
    names = {f.name for f in flavors}
    for q in queues:
        seen: set[str] = set()
        for i, qf in enumerate(q.flavors):
            if qf.name not in names:
                yield FlavorProblem("Queue", q.name, f"spec.flavors[{i}].name", f'unknown ResourceFlavor "{qf.name}"')
            elif qf.name in seen:
                yield FlavorProblem("Queue", q.name, f"spec.flavors[{i}].name", f'flavor "{qf.name}" listed twice')
            seen.add(qf.name)
            for r in qf.resources:
                if FLAVOR_SEP in r:
                    yield FlavorProblem("Queue", q.name, f"spec.flavors[{i}].resources",
                                         f'resource name "{r}" may not contain "{FLAVOR_SEP}"')
    for node, matched in _overlaps(flavors, nodes):
        yield FlavorProblem("ResourceFlavor", matched[1], "spec.nodeLabels",
                            f"node {node.name} is of flavors {matched[0]} and {matched[1]} (overlapping flavors)")
