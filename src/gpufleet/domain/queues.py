"""Queue rules every reader of a cluster shares: which queue a pod goes to, and which queues of a
tree pods may use.

The replay loader (which refuses the input), the controller's snapshot builder (which leaves the
object out and reports it) and the engine (which resolves each pod's leaf) all call these, so that
a replay of a snapshot and the controller judge the same objects the same way. The rules return
what is wrong as data (:data:`QueueProblem`); each caller words it for its own output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from gpufleet.domain.model import Pod, PodGroup, Queue, QueueName

__all__ = [
    "NotALeaf",
    "QueueCycle",
    "QueueProblem",
    "QueueSource",
    "QueueTree",
    "UnknownParent",
    "UnknownQueue",
    "gang_id",
    "gang_key",
    "pod_group_of",
    "queue_source",
    "resolve_queue",
]


class QueueSource(Enum):
    """Where a pod's queue comes from (api.md: the label, else the PodGroup's, else the default)."""

    LABEL = "label"  # the pod's gpufleet.dev/queue label
    POD_GROUP = "pod-group"  # spec.queue of its PodGroup
    DEFAULT = "default"  # the SchedulerConfig's defaultQueue


def pod_group_of(pod: Pod, groups: Mapping[str, PodGroup]) -> PodGroup | None:
    """The PodGroup a pod's ``gpufleet.dev/pod-group`` label names in its namespace, if it exists."""
    label = pod.group_label
    return groups.get(f"{pod.namespace}/{label}") if label and groups else None


def gang_key(pod: Pod) -> str:
    """The gang ``pod`` belongs to: ``namespace/group`` when it has a ``gpufleet.dev/pod-group``
    label, whether or not that PodGroup exists (a pod naming a missing one waits for it: api.md),
    else the pod alone (its own key)."""
    label = pod.group_label
    return f"{pod.namespace}/{label}" if label else pod.key


def gang_id(pod: Pod) -> str:
    """A key that tells gangs apart: :func:`gang_key` for a labelled pod, and for a pod alone its
    key behind ``pod:``, which no group key (``namespace/label``) can start with (a namespace has
    no colon). So a pod named like a PodGroup label of its namespace is never merged into it."""
    label = pod.group_label
    return f"{pod.namespace}/{label}" if label else f"pod:{pod.key}"


def queue_source(pod: Pod, group: PodGroup | None) -> QueueSource:
    """Which of the three places names ``pod``'s queue (``group``: its PodGroup, or None)."""
    if pod.queue_label:
        return QueueSource.LABEL
    if group is not None and group.queue:
        return QueueSource.POD_GROUP
    return QueueSource.DEFAULT


def resolve_queue(pod: Pod, group: PodGroup | None, default_queue: QueueName) -> QueueName:
    """The queue ``pod`` goes to: its label, else its PodGroup's queue, else ``default_queue``.

    Called once per pod when the engine builds its pod table, so it stays a few attribute reads."""
    if pod.queue_label:
        return pod.queue_label
    if group is not None and group.queue:
        return group.queue
    return default_queue


# ---------------------------------------------------------------------------- queue tree problems


@dataclass(frozen=True, slots=True)
class UnknownParent:
    """``queue`` (the queue asked about, or one of its ancestors) names a ``parent`` that does not exist."""

    queue: QueueName
    parent: QueueName


@dataclass(frozen=True, slots=True)
class QueueCycle:
    """The parents of a queue lead back to where they have been. ``path`` is the walk from the
    queue asked about up to the first queue met twice (named at both ends of ``loop``)."""

    path: tuple[QueueName, ...]

    @property
    def loop(self) -> tuple[QueueName, ...]:
        """The cycle itself: from the first queue met twice, round to it again."""
        again = self.path[-1]
        return self.path[self.path.index(again):]


@dataclass(frozen=True, slots=True)
class UnknownQueue:
    """Pods name ``queue``, which does not exist (and is not the default queue)."""

    queue: QueueName


@dataclass(frozen=True, slots=True)
class NotALeaf:
    """Pods name ``queue``, which is the parent of ``child`` (pods go to leaf queues only)."""

    queue: QueueName
    child: QueueName


QueueProblem = UnknownParent | QueueCycle | UnknownQueue | NotALeaf


@dataclass(frozen=True)
class QueueTree:
    """The queues of one snapshot, and which of them pods may not use.

    ``broken`` holds every queue whose ancestry is broken (an unknown parent, or a cycle), in the
    order the queues were given; the engine builds its forest only from the others.
    """

    by_name: Mapping[QueueName, Queue]
    first_child: Mapping[QueueName, QueueName]
    broken: Mapping[QueueName, UnknownParent | QueueCycle] = field(default_factory=dict)

    @staticmethod
    def of(queues: Iterable[Queue]) -> QueueTree:
        listed = list(queues)
        by_name = {q.name: q for q in listed}
        first_child: dict[QueueName, QueueName] = {}
        for queue in listed:
            if queue.parent is not None:
                first_child.setdefault(queue.parent, queue.name)
        broken: dict[QueueName, UnknownParent | QueueCycle] = {}
        for queue in listed:
            problem = _ancestry_problem(queue, by_name)
            if problem is not None:
                broken[queue.name] = problem
        return QueueTree(by_name, first_child, broken)

    def leaves(self) -> set[QueueName]:
        """The queues that are no queue's parent: the only ones pods go to."""
        return {name for name in self.by_name if name not in self.first_child}

    def use_problem(self, name: QueueName, default_queue: QueueName) -> QueueProblem | None:
        """Why pods may not go to queue ``name`` (None: they may).

        A missing default queue is fine: the engine creates it as a top-level queue with no quota
        (docs/semantics-notes.md). Otherwise the queue must exist, be a leaf, and have an
        unbroken ancestry."""
        if name not in self.by_name:
            return None if name == default_queue else UnknownQueue(name)
        child = self.first_child.get(name)
        if child is not None:
            return NotALeaf(name, child)
        return self.broken.get(name)


def _ancestry_problem(queue: Queue, by_name: Mapping[QueueName, Queue]) -> UnknownParent | QueueCycle | None:
    """Walk up from ``queue``: None when the walk reaches a root."""
    seen: list[QueueName] = []
    current = queue
    while current.name not in seen:
        seen.append(current.name)
        if current.parent is None:
            return None
        parent = by_name.get(current.parent)
        if parent is None:
            return UnknownParent(current.name, current.parent)
        current = parent
    return QueueCycle((*seen, current.name))
