"""The domain's queue rules: which queue a pod goes to, and which queues of a tree pods may use."""

from __future__ import annotations

from gpufleet.domain import Pod, PodGroup, Queue, QueueName
from gpufleet.domain.queues import (
    NotALeaf,
    QueueCycle,
    QueueSource,
    QueueTree,
    UnknownParent,
    UnknownQueue,
    gang_id,
    gang_key,
    pod_group_of,
    queue_source,
    resolve_queue,
)

DEFAULT = QueueName("default")


def q(name: str, parent: str | None = None) -> Queue:
    return Queue(name=QueueName(name), parent=QueueName(parent) if parent else None)


def pod(label: str | None = None, group: str | None = None) -> Pod:
    return Pod(namespace="ml", name="p", queue_label=QueueName(label) if label else None, group_label=group)


GROUPS = {
    "ml/with-queue": PodGroup(namespace="ml", name="with-queue", queue=QueueName("team-g")),
    "ml/no-queue": PodGroup(namespace="ml", name="no-queue"),
}


def test_label_wins_over_pod_group_and_default() -> None:
    p = pod(label="team-l", group="with-queue")
    group = pod_group_of(p, GROUPS)
    assert group is GROUPS["ml/with-queue"]
    assert queue_source(p, group) is QueueSource.LABEL
    assert resolve_queue(p, group, DEFAULT) == "team-l"


def test_pod_group_queue_then_default() -> None:
    p = pod(group="with-queue")
    assert resolve_queue(p, pod_group_of(p, GROUPS), DEFAULT) == "team-g"
    assert queue_source(p, pod_group_of(p, GROUPS)) is QueueSource.POD_GROUP
    p = pod(group="no-queue")
    assert resolve_queue(p, pod_group_of(p, GROUPS), DEFAULT) == DEFAULT
    assert queue_source(p, pod_group_of(p, GROUPS)) is QueueSource.DEFAULT


def test_a_group_label_naming_no_group_falls_back_to_the_default() -> None:
    p = pod(group="missing")
    assert pod_group_of(p, GROUPS) is None
    assert pod_group_of(Pod(namespace="other", name="p", group_label="with-queue"), GROUPS) is None
    assert resolve_queue(p, None, DEFAULT) == DEFAULT


def test_a_sound_tree_has_no_problems() -> None:
    tree = QueueTree.of([q("root"), q("a", "root"), q("b", "root")])
    assert dict(tree.broken) == {}
    assert tree.use_problem(QueueName("a"), DEFAULT) is None
    assert tree.use_problem(DEFAULT, DEFAULT) is None  # missing default: the engine creates it
    assert tree.use_problem(QueueName("root"), DEFAULT) == NotALeaf(QueueName("root"), QueueName("a"))
    assert tree.use_problem(QueueName("nope"), DEFAULT) == UnknownQueue(QueueName("nope"))


def test_an_unknown_parent_breaks_the_queue_and_everything_below() -> None:
    tree = QueueTree.of([q("top", "gone"), q("mid", "top"), q("leaf", "mid"), q("ok")])
    problem = UnknownParent(QueueName("top"), QueueName("gone"))
    assert dict(tree.broken) == {"top": problem, "mid": problem, "leaf": problem}
    assert tree.use_problem(QueueName("leaf"), DEFAULT) == problem
    assert tree.use_problem(QueueName("mid"), DEFAULT) == NotALeaf(QueueName("mid"), QueueName("leaf"))


def test_a_cycle_is_reported_from_each_queue_that_leads_into_it() -> None:
    tree = QueueTree.of([q("tail", "a"), q("a", "b"), q("b", "a")])
    assert list(tree.broken) == ["tail", "a", "b"]  # in the order given
    tail = tree.broken[QueueName("tail")]
    assert isinstance(tail, QueueCycle)
    assert tail.path == ("tail", "a", "b", "a")
    assert tail.loop == ("a", "b", "a")
    assert tree.broken[QueueName("b")] == QueueCycle((QueueName("b"), QueueName("a"), QueueName("b")))


def test_a_queue_that_is_its_own_parent_is_a_cycle() -> None:
    tree = QueueTree.of([q("self", "self")])
    assert tree.broken[QueueName("self")] == QueueCycle((QueueName("self"), QueueName("self")))


def test_gang_key_is_the_pod_group_label_whether_or_not_the_group_exists() -> None:
    # api.md: a pod naming a missing PodGroup waits for it, so its gang is the group it names
    # (was: a gang of one, "ml/p", when the group did not exist).
    assert gang_key(pod(group="with-queue")) == "ml/with-queue"
    assert gang_key(pod(group="absent")) == "ml/absent"
    assert gang_key(pod()) == "ml/p"



def test_gang_id_keeps_a_pod_alone_apart_from_a_group_of_its_name() -> None:
    alone = Pod(namespace="ml", name="llama")
    member = Pod(namespace="ml", name="llama-0", group_label="llama")
    assert gang_key(alone) == gang_key(member) == "ml/llama"  # the names shown stay as they were
    assert gang_id(alone) != gang_id(member)
    assert gang_id(member) == "ml/llama"
    assert gang_id(Pod(namespace="ml", name="llama-1", group_label="llama")) == gang_id(member)
