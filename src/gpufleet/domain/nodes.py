"""Node rules every reader of a cluster shares: how many GPUs a node may advertise.

The engine applies them to every snapshot it is given (a node over the bound is left out, a
fractional GPU count is rounded down, both with a warning) and the controller writes the same
words in an Event on the Node, so that a bad Node object never stops the scheduling of the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.domain.model import GPU, MILLI, Node, NodeName

__all__ = ["MAX_GPUS_PER_NODE", "FractionalGpus", "GpuCountProblem", "TooManyGpus", "gpu_count_problem"]

# More GPUs than any machine holds (the largest NVLink/NVSwitch systems hold 576): a node that
# advertises more is a broken device plugin or a hostile object, and the engine's per-GPU arrays
# ([nodes, GPUs of the largest node]) must stay small.
MAX_GPUS_PER_NODE = 1024


@dataclass(frozen=True, slots=True)
class TooManyGpus:
    """``node`` advertises ``gpus`` whole GPUs, more than :data:`MAX_GPUS_PER_NODE`: left out."""

    node: NodeName
    gpus: int

    @property
    def text(self) -> str:
        return f"node {self.node} advertises {self.gpus} GPUs, more than {MAX_GPUS_PER_NODE} per node: left out"


@dataclass(frozen=True, slots=True)
class FractionalGpus:
    """``node`` advertises ``milli`` thousandths of a GPU, not a whole number: rounded down."""

    node: NodeName
    milli: int

    @property
    def text(self) -> str:
        return (f"node {self.node} advertises {self.milli / MILLI:g} GPUs, not a whole number: "
                f"counted as {self.milli // MILLI}")


GpuCountProblem = TooManyGpus | FractionalGpus


def gpu_count_problem(node: Node) -> GpuCountProblem | None:
    """What is wrong with the GPU count ``node`` advertises (None: nothing)."""
    milli = node.allocatable.get(GPU, 0)
    if milli // MILLI > MAX_GPUS_PER_NODE:
        return TooManyGpus(node.name, milli // MILLI)
    if milli % MILLI:
        return FractionalGpus(node.name, milli)
    return None
