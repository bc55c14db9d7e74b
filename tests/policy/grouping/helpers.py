from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpufleet.adapters import owner_from_dict
from gpufleet.domain import Project, QueueName
from gpufleet.policy import ProjectIndex
from gpufleet.policy.grouping import GroupFacts, Owner

DATA = Path(__file__).parent / "data"

ML = Project("ml-team", namespace_names=("ml",), queues=(QueueName("vision-train"), QueueName("vision-batch")),
             default_queue=QueueName("vision-batch"), priority_classes=("batch", "train"))
INFER = Project("inference", namespace_names=("infer",), queues=(QueueName("serving"),),
                default_queue=QueueName("serving"), priority_classes=("inference-critical", "serve-low"),
                allow_non_preemptible=True)
NLP = Project("nlp", namespace_names=("nlp",), queues=(QueueName("nlp"),), default_queue=QueueName("nlp"))

FACTS = GroupFacts(
    projects=ProjectIndex.build([ML, INFER, NLP], {}),
    priority_values={"batch": 10, "train": 50, "inference-critical": 1000, "serve-low": 5},
    topology_levels=("topology.gpufleet.dev/block", "topology.gpufleet.dev/rack"),
)


def manifest(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((DATA / name).read_text())
    assert isinstance(doc, dict)
    return doc


def owner(name: str) -> Owner:
    return owner_from_dict(manifest(name))
