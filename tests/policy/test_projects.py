from gpufleet.domain import LabelSelector, Project, QueueName, SelectorRequirement
from gpufleet.policy import (
    ProjectIndex,
    namespace_problem,
    non_preemptible_problem,
    priority_problem,
    queue_for,
    queue_problem,
)

Q = QueueName


def _vision() -> Project:
    return Project(name="ml-vision", namespace_names=("vision",), queues=(Q("vision-train"), Q("vision-infer")),
                   default_queue=Q("vision-train"), priority_classes=("batch",))


def test_namespace_by_name_and_by_label() -> None:
    nlp = Project(name="nlp", namespace_selector=LabelSelector(match_labels=(("team", "nlp"),)), queues=(Q("nlp"),))
    index = ProjectIndex.build([_vision(), nlp], {"nlp-a": {"team": "nlp"}, "other": {"team": "x"}})
    assert index.project_of("vision") is not None and index.project_of("vision").name == "ml-vision"  # type: ignore[union-attr]
    assert index.project_of("nlp-a") == nlp
    assert index.project_of("other") is None
    assert index.project_of("unknown") is None


def test_selector_on_the_name_label_matches_namespaces_without_objects() -> None:
    p = Project(name="p", namespace_selector=LabelSelector(match_expressions=(
        SelectorRequirement("kubernetes.io/metadata.name", "In", ("a", "b")),)))
    index = ProjectIndex.build([p], {}, namespaces=["a"])
    assert index.project_of("a") == p
    assert index.project_of("b") == p  # not known at build time: its name label still matches
    assert index.project_of("c") is None


def test_a_namespace_claimed_twice_belongs_to_neither() -> None:
    a = Project(name="a", namespace_names=("shared",))
    b = Project(name="b", namespace_selector=LabelSelector(match_labels=(("env", "dev"),)))
    index = ProjectIndex.build([b, a], {"shared": {"env": "dev"}})
    assert index.project_of("shared") is None
    assert index.conflicts == {"shared": ("a", "b")}
    assert index.conflicts_of("a") == {"shared": ("b",)}
    assert namespace_problem(index, "shared", False) == "namespace shared is claimed by projects a, b"


def test_require_project() -> None:
    index = ProjectIndex.build([_vision()], {})
    assert namespace_problem(index, "vision", True) is None
    assert namespace_problem(index, "loose", False) is None
    assert namespace_problem(index, "loose", True) == "namespace loose belongs to no Project"


def test_queue_rules() -> None:
    vision = _vision()
    other = Project(name="nlp", namespace_names=("nlp",), queues=(Q("nlp"),))
    index = ProjectIndex.build([vision, other], {})
    assert queue_problem(index, vision, "vision", Q("vision-train"), None) is None
    assert queue_problem(index, vision, "vision", Q("open"), None) is None  # listed by no Project
    assert queue_problem(index, vision, "vision", Q("nlp"), None) == (
        "project ml-vision does not allow queue nlp (allowed: vision-train, vision-infer)")
    assert queue_problem(index, vision, "vision", Q("nlp"), Q("nlp")) is None  # granted by RBAC
    assert queue_problem(index, vision, "vision", Q("nlp"), Q("other")) is not None
    assert queue_problem(index, None, "loose", Q("nlp"), None) == (
        "queue nlp belongs to project nlp, not to namespace loose's")
    assert queue_for(vision, Q("default")) == "vision-train"
    assert queue_for(None, Q("default")) == "default"


def test_priority_and_preemptibility() -> None:
    vision = _vision()
    assert priority_problem(vision, "batch") is None
    assert priority_problem(vision, None) is None
    assert priority_problem(vision, "critical") == (
        "project ml-vision does not allow priority class critical (allowed: batch)")
    assert priority_problem(Project(name="any"), "critical") is None
    assert priority_problem(None, "critical") is None
    assert non_preemptible_problem(vision, False) == "project ml-vision does not allow non-preemptible work"
    assert non_preemptible_problem(vision, True) is None
    assert non_preemptible_problem(Project(name="inf", allow_non_preemptible=True), False) is None
