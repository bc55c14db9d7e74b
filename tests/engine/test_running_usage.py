"""Queue usage of running pods is added by the same rule that eviction subtracts by."""

from __future__ import annotations

from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.engine.scheduler import Engine

NODE = ("apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {nvidia.com/gpu.memory: '16384'}}\n"
        "status: {allocatable: {cpu: '8', memory: 64Gi, pods: '110', nvidia.com/gpu: '1'}}\n")
QUEUE = ("apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: a}\n"
         "spec: {resources: {nvidia.com/gpu: {quota: '1'}}}\n")


def running(name: str) -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml, labels: {{gpufleet.dev/queue: a}},"
            " annotations: {gpufleet.dev/gpu-memory: 12Gi}}\nspec:\n  schedulerName: gpufleet\n  nodeName: n1\n"
            "  containers: [{name: c, resources: {requests: {cpu: '1'}}}]\nstatus: {phase: Running}\n")


def test_a_running_share_with_no_gpu_left_counts_what_its_eviction_takes_back() -> None:
    # Two 12 GiB shares on one 16 GiB GPU: the second finds no GPU and holds cpu and memory only.
    # Its quota entry must be the same when it is added (binding the running pods) as when its
    # eviction takes it back, or the queue's usage drifts.
    engine = Engine(load_snapshot_text("---\n".join([NODE, QUEUE, running("s1"), running("s2")]), "snap.yaml"))
    leaf = engine.forest.index["a"]
    ours = [info for info in engine.pods if info.queue == leaf]
    expected = [sum(col) for col in zip(*(engine.quota.quota_vec(info) for info in ours), strict=True)]
    assert list(engine.forest.usage[leaf]) == expected
