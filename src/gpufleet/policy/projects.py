"""Which Project a namespace belongs to, which queues Projects own, and which namespaces two
Projects both claim (docs/semantics-notes.md, "Projects"). Pure: the webhook, the engine, `replay`
and the controller's status all ask the same index."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpufleet.domain import Project, QueueName
from gpufleet.domain.selectors import NAMESPACE_NAME_LABEL, selector_matches

__all__ = ["ProjectIndex"]


@dataclass(frozen=True)
class ProjectIndex:
    """The Projects of a cluster, indexed by namespace and by queue.

    ``conflicts`` maps each namespace claimed by two or more Projects to their names (sorted);
    such a namespace belongs to none of them. ``owners`` maps each queue some Project lists to
    those Projects' names (sorted)."""

    projects: Mapping[str, Project] = field(default_factory=dict)
    by_namespace: Mapping[str, Project] = field(default_factory=dict)
    conflicts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    owners: Mapping[QueueName, tuple[str, ...]] = field(default_factory=dict)
    selectors: tuple[Project, ...] = ()  # Projects that select namespaces by label

    @staticmethod
    def build(projects: Iterable[Project], namespace_labels: Mapping[str, Mapping[str, str]],
              namespaces: Iterable[str] = ()) -> ProjectIndex:
        """``namespace_labels``: the labels of the Namespaces known; ``namespaces``: further
        namespace names (those of pods) whose Namespace objects may be unknown (they have only
        their name label)."""
        ordered = sorted(projects, key=lambda p: p.name)
        claims: dict[str, list[str]] = {}
        for project in ordered:
            for ns in project.namespace_names:
                claims.setdefault(ns, []).append(project.name)
        selecting = tuple(p for p in ordered if p.namespace_selector is not None)
        if selecting:
            for ns in sorted(set(namespace_labels).union(namespaces)):
                labels = _labels_of(ns, namespace_labels)
                for project in selecting:
                    if selector_matches(project.namespace_selector, labels):
                        names = claims.setdefault(ns, [])
                        if project.name not in names:
                            names.append(project.name)
        by_name = {p.name: p for p in ordered}
        by_namespace: dict[str, Project] = {}
        conflicts: dict[str, tuple[str, ...]] = {}
        for ns, names in claims.items():
            if len(names) == 1:
                by_namespace[ns] = by_name[names[0]]
            else:
                conflicts[ns] = tuple(sorted(names))
        owners: dict[QueueName, list[str]] = {}
        for project in ordered:
            for queue in project.queues:
                owners.setdefault(queue, []).append(project.name)
        return ProjectIndex(by_name, by_namespace, conflicts,
                            {q: tuple(names) for q, names in owners.items()}, selecting)

    def project_of(self, namespace: str) -> Project | None:
        """The Project ``namespace`` belongs to (None: none, or it is claimed by several). A
        namespace not known when the index was built has only its name label."""
        got = self.by_namespace.get(namespace)
        if got is not None or namespace in self.conflicts or not self.selectors:
            return got
        labels = {NAMESPACE_NAME_LABEL: namespace}
        hits = [p for p in self.selectors if selector_matches(p.namespace_selector, labels)]
        return hits[0] if len(hits) == 1 else None

    def claimants(self, namespace: str) -> tuple[str, ...]:
        """The Projects that claim a namespace in conflict (empty when it is not)."""
        return self.conflicts.get(namespace, ())

    def conflicts_of(self, project: str) -> dict[str, tuple[str, ...]]:
        """The namespaces ``project`` claims together with other Projects: namespace -> the others."""
        return {ns: tuple(n for n in names if n != project)
                for ns, names in sorted(self.conflicts.items()) if project in names}

    @property
    def empty(self) -> bool:
        return not self.projects


def _labels_of(namespace: str, namespace_labels: Mapping[str, Mapping[str, str]]) -> Mapping[str, str]:
    labels = namespace_labels.get(namespace)
    if labels is None:
        return {NAMESPACE_NAME_LABEL: namespace}
    if NAMESPACE_NAME_LABEL in labels:
        return labels
    return {**labels, NAMESPACE_NAME_LABEL: namespace}
