"""namespaceSelector against Namespace objects' labels (docs/semantics-notes.md, "Inter-pod affinity")."""

from __future__ import annotations

from gpufleet.domain import LabelSelector, Namespace, PodAffinityTerm
from gpufleet.domain.selectors import NAMESPACE_NAME_LABEL, namespace_labels, term_namespaces_match

TEAM_ML = PodAffinityTerm("zone", LabelSelector(), namespace_selector=LabelSelector((("team", "ml"),)))
BY_NAME = PodAffinityTerm("zone", LabelSelector(), namespace_selector=LabelSelector(((NAMESPACE_NAME_LABEL, "ops"),)))
EVERY = PodAffinityTerm("zone", LabelSelector(), namespace_selector=LabelSelector())


def test_the_name_label_is_always_the_name() -> None:
    labels = namespace_labels([Namespace("a", {"team": "ml", NAMESPACE_NAME_LABEL: "forged"}), Namespace("b")])
    assert labels == {"a": {"team": "ml", NAMESPACE_NAME_LABEL: "a"}, "b": {NAMESPACE_NAME_LABEL: "b"}}


def test_selector_matches_the_namespace_labels_and_falls_back_to_the_name() -> None:
    labels = namespace_labels([Namespace("a", {"team": "ml"}), Namespace("b", {"team": "web"})])
    assert term_namespaces_match(TEAM_ML, "x", "a", labels)
    assert not term_namespaces_match(TEAM_ML, "x", "b", labels)
    assert not term_namespaces_match(TEAM_ML, "x", "ops", labels)  # no Namespace object: the name label only
    assert term_namespaces_match(BY_NAME, "x", "ops", labels)
    assert term_namespaces_match(BY_NAME, "x", "ops")
    assert term_namespaces_match(EVERY, "x", "ops", labels)
    assert not term_namespaces_match(TEAM_ML, "x", "a")  # without the objects, as before
