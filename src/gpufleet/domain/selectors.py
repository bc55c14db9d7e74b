"""Pod label selectors and affinity terms: the scalar rules of which pods a term counts.

One rule in one place: the engine's inter-pod state (``engine.interpod``) and the tests' checker
of placements both ask these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpufleet.domain.model import LabelSelector, Namespace, PodAffinityTerm

__all__ = [
    "NAMESPACE_NAME_LABEL",
    "NamespaceLabels",
    "namespace_labels",
    "selector_matches",
    "selector_text",
    "term_namespaces_match",
]

# Every Namespace carries its own name under this label (the API server sets it): a namespace
# with no Namespace object in the snapshot is matched by this label alone.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

# The labels of each namespace that has a Namespace object, by name.
NamespaceLabels = Mapping[str, Mapping[str, str]]


def namespace_labels(namespaces: Iterable[Namespace]) -> dict[str, Mapping[str, str]]:
    """Each Namespace's labels by name, with ``kubernetes.io/metadata.name`` set to the name (as
    the API server sets it, whatever the object says)."""
    return {ns.name: {**ns.labels, NAMESPACE_NAME_LABEL: ns.name} for ns in namespaces}


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy ``selector`` (None matches nothing, an empty selector everything)."""
    if selector is None:
        return False
    for key, wanted in selector.match_labels:
        if labels.get(key) != wanted:
            return False
    for req in selector.match_expressions:
        value = labels.get(req.key)
        op = req.operator
        if op == "In":
            if value is None or value not in req.values:
                return False
        elif op == "NotIn":
            if value is not None and value in req.values:
                return False
        elif op == "Exists":
            if value is None:
                return False
        elif op == "DoesNotExist":
            if value is not None:
                return False
        else:  # the loader refuses other operators for pod selectors
            return False
    return True


def term_namespaces_match(term: PodAffinityTerm, owner_namespace: str, namespace: str,
                          labels: NamespaceLabels | None = None) -> bool:
    """Whether pods of ``namespace`` are in the scope of ``term`` written by a pod of
    ``owner_namespace``: the listed namespaces, plus those its namespaceSelector matches (against
    the namespace's labels in ``labels``, from :func:`namespace_labels`; a namespace not there by
    its name label alone), or the owner's own namespace when neither is given."""
    if not term.namespaces and term.namespace_selector is None:
        return namespace == owner_namespace
    if namespace in term.namespaces:
        return True
    if term.namespace_selector is None:
        return False
    known = labels.get(namespace) if labels else None
    return selector_matches(term.namespace_selector, known if known is not None else {NAMESPACE_NAME_LABEL: namespace})


def selector_text(selector: LabelSelector | None) -> str:
    """A short text of a selector for reasons: ``app=serve``, ``tier in (a,b)``, ``all pods``."""
    if selector is None:
        return "no pods"
    parts = [f"{k}={v}" for k, v in selector.match_labels]
    for req in selector.match_expressions:
        if req.operator in ("In", "NotIn"):
            parts.append(f"{req.key} {req.operator.lower()} ({','.join(req.values)})")
        elif req.operator == "Exists":
            parts.append(req.key)
        else:
            parts.append(f"!{req.key}")
    return ",".join(parts) or "all pods"
