"""Pod label selectors and affinity terms: the scalar rules of which pods a term counts.

One rule in one place: the engine's inter-pod state (``engine.interpod``) and the tests' checker
of placements both ask these functions.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.domain.model import LabelSelector, PodAffinityTerm

__all__ = ["NAMESPACE_NAME_LABEL", "selector_matches", "selector_text", "term_namespaces_match"]

# Every Namespace carries its own name under this label; gpufleet reads no Namespace objects, so
# it is the one namespace label a namespaceSelector can be matched against.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


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


def term_namespaces_match(term: PodAffinityTerm, owner_namespace: str, namespace: str) -> bool:
    """Whether pods of ``namespace`` are in the scope of ``term`` written by a pod of
    ``owner_namespace``: the listed namespaces, plus those its namespaceSelector matches (by
    their name label), or the owner's own namespace when neither is given."""
    if not term.namespaces and term.namespace_selector is None:
        return namespace == owner_namespace
    if namespace in term.namespaces:
        return True
    return term.namespace_selector is not None and selector_matches(
        term.namespace_selector, {NAMESPACE_NAME_LABEL: namespace}
    )


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
