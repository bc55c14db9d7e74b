"""Every kind of bad input gives one InputError line naming the file, document, object and field."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import load_config_text, load_snapshot_file, load_snapshot_text

from .test_dra_objects import BAD as DRA_CASES
from .test_volume_objects import BAD as VOLUME_CASES

NODE = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '8', nvidia.com/gpu: '8'}}\n"
QUEUES = (
    "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: research}\n---\n"
    "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec: {parent: research}\n"
)
CONTAINERS = "containers: [{name: main, resources: {limits: {nvidia.com/gpu: '1'}}}]"


def pod(
    name: str = "nb-1",
    labels: str = "{}",
    annotations: str = "{}",
    spec: str = "",
    containers: str = CONTAINERS,
    status: str = "{phase: Pending}",
) -> str:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml, labels: {labels}, "
        f"annotations: {annotations}}}\nspec:\n  schedulerName: gpufleet\n  {containers}\n"
        + "".join(f"  {line}\n" for line in spec.splitlines())
        + f"status: {status}\n"
    )


def queue(name: str, spec: str) -> str:
    return f"apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {name}}}\nspec: {spec}\n"


def flavor(name: str, labels: str) -> str:
    return f"apiVersion: gpufleet.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {{name: {name}}}\nspec: {{nodeLabels: {labels}}}\n"


FLAVOR_H100 = flavor("h100", "{nvidia.com/gpu.product: H100}")
NODE_H100 = ("apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {nvidia.com/gpu.product: H100, "
             "nvidia.com/gpu.count: '8'}}\nstatus: {allocatable: {cpu: '8', nvidia.com/gpu: '8'}}\n")


def docs(*parts: str) -> str:
    return "---\n".join(parts)


CASES: list[tuple[str, str, str]] = [
    # (id, snapshot text, expected message after "snap.yaml: ")
    # --- document structure
    ("not-a-mapping", "- a\n- b\n", "document 1: expected a Kubernetes object (a mapping), got a list"),
    ("scalar-document", docs(NODE, "just text\n"), 'document 2: expected a Kubernetes object (a mapping), got "just text"'),
    ("missing-kind", docs(NODE, "apiVersion: v1\nmetadata: {name: x}\n"), "document 2: kind: required field missing"),
    ("missing-apiVersion", "kind: Node\nmetadata: {name: x}\n", "document 1 (Node): apiVersion: required field missing"),
    ("kind-not-string", "apiVersion: v1\nkind: [Node]\n", "document 1: kind: must be a string, got a list"),
    ("list-items-not-list", "apiVersion: v1\nkind: List\nitems: {a: 1}\n", "document 1 (List): items: must be a list, got a mapping"),
    ("list-item-not-mapping", "apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: ConfigMap}, 3]\n",
     "document 1, item 2: expected a Kubernetes object (a mapping), got 3"),
    ("list-item-field", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n}, spec: {unschedulable: 'yes'}}\n",
     'document 1, item 1 (Node n): spec.unschedulable: must be true or false, got "yes"'),
    ("our-group-wrong-version", "apiVersion: gpufleet.dev/v1beta1\nkind: Queue\nmetadata: {name: q}\n",
     'document 1 (Queue q): apiVersion: unsupported version "gpufleet.dev/v1beta1" (expected gpufleet.dev/v1alpha1)'),
    ("our-group-unknown-kind", "apiVersion: gpufleet.dev/v1alpha1\nkind: Queues\nmetadata: {name: q}\n",
     'document 1 (Queues q): kind: unknown kind "Queues" in gpufleet.dev (expected one of Queue, PodGroup, SchedulerConfig, Project, ResourceFlavor)'),
    # --- missing required fields
    ("node-without-name", "apiVersion: v1\nkind: Node\nmetadata: {labels: {}}\n", "document 1 (Node): metadata.name: required field missing"),
    ("pod-without-metadata", "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c}]}\n", "document 1 (Pod): metadata.name: required field missing"),
    ("pod-without-containers", docs(NODE, pod(containers="nodeName: n1")), "document 2 (Pod ml/nb-1): spec.containers: required field missing"),
    ("pod-without-spec", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "document 1 (Pod default/p): spec: required field missing"),
    ("priorityclass-without-value", "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: hi}\n",
     "document 1 (PriorityClass hi): value: required field missing"),
    ("podgroup-without-minMember", "apiVersion: gpufleet.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\nspec: {queue: a}\n",
     "document 1 (PodGroup ml/g): spec.minMember: required field missing"),
    ("podgroup-without-spec", "apiVersion: gpufleet.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\n",
     "document 1 (PodGroup default/g): spec: required field missing"),
    ("taint-without-effect", "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {taints: [{key: a}]}\n",
     "document 1 (Node n): spec.taints[0].effect: required field missing"),
    # --- the queue tree
    ("unknown-parent", docs(NODE, queue("team-a", "{parent: nope}")), 'document 2 (Queue team-a): spec.parent: unknown queue "nope"'),
    ("cycle", docs(queue("root", "{}"), queue("a", "{parent: b}"), queue("b", "{parent: c}"), queue("c", "{parent: a}")),
     "document 2 (Queue a): spec.parent: cycle in the queue tree: a -> b -> c -> a"),
    ("self-parent", queue("a", "{parent: a}"), "document 1 (Queue a): spec.parent: cycle in the queue tree: a -> a"),
    ("duplicate-queue", docs(queue("a", "{}"), NODE, queue("a", "{weight: 2}")),
     "document 3 (Queue a): metadata.name: duplicate Queue a (first in document 1)"),
    # --- quantities
    ("negative-quota", docs(NODE, NODE.replace("n1", "n2"), NODE.replace("n1", "n3"), NODE.replace("n1", "n4"), QUEUES,
                            queue("team-b", "{parent: research, resources: {nvidia.com/gpu: {quota: '-1'}}}")),
     'document 7 (Queue team-b): spec.resources.nvidia.com/gpu.quota: negative quantity "-1"'),
    ("malformed-limit", queue("q", "{resources: {cpu: {limit: 8 cores}}}"),
     'document 1 (Queue q): spec.resources.cpu.limit: malformed quantity "8 cores"'),
    ("quantity-wrong-type", queue("q", "{resources: {cpu: {quota: [1]}}}"),
     'document 1 (Queue q): spec.resources.cpu.quota: must be a quantity such as "8", "500m" or "80Gi", got a list'),
    ("negative-allocatable", "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: '-2'}}\n",
     'document 1 (Node n): status.allocatable.cpu: negative quantity "-2"'),
    ("malformed-capacity", "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {capacity: {memory: 12XB}}\n",
     'document 1 (Node n): status.capacity.memory: malformed quantity "12XB"'),
    ("malformed-container-request", pod(containers="containers: [{name: a}, {name: b, resources: {requests: {memory: lots}}}]"),
     'document 1 (Pod ml/nb-1): spec.containers[1].resources.requests.memory: malformed quantity "lots"'),
    ("negative-init-limit", pod(spec="initContainers: [{name: i, resources: {limits: {cpu: -1}}}]"),
     'document 1 (Pod ml/nb-1): spec.initContainers[0].resources.limits.cpu: negative quantity "-1"'),
    ("negative-overhead", pod(spec="overhead: {cpu: -250m}"),
     'document 1 (Pod ml/nb-1): spec.overhead.cpu: negative quantity "-250m"'),
    ("malformed-overhead", pod(spec="overhead: {memory: 120 Mi}"),
     'document 1 (Pod ml/nb-1): spec.overhead.memory: malformed quantity "120 Mi"'),
    ("scheduling-gates-not-list", pod(spec="schedulingGates: {name: a}"),
     "document 1 (Pod ml/nb-1): spec.schedulingGates: must be a list, got a mapping"),
    ("scheduling-gate-without-name", pod(spec="schedulingGates: [{name: a}, {}]"),
     "document 1 (Pod ml/nb-1): spec.schedulingGates[1].name: required field missing"),
    ("scheduling-gate-name-not-string", pod(spec="schedulingGates: [{name: [a]}]"),
     "document 1 (Pod ml/nb-1): spec.schedulingGates[0].name: must be a string, got a list"),
    ("host-port-not-a-number", pod(containers="containers: [{name: a, ports: [{containerPort: 80, hostPort: http}]}]"),
     'document 1 (Pod ml/nb-1): spec.containers[0].ports[0].hostPort: must be a port number 1..65535, got "http"'),
    ("host-port-out-of-range", pod(containers="containers: [{name: a}, {name: b, ports: [{hostPort: 70000}]}]"),
     "document 1 (Pod ml/nb-1): spec.containers[1].ports[0].hostPort: must be a port number 1..65535, got 70000"),
    ("host-port-negative", pod(containers="containers: [{name: a, ports: [{hostPort: -1}]}]"),
     "document 1 (Pod ml/nb-1): spec.containers[0].ports[0].hostPort: must be a port number 1..65535, got -1"),
    ("host-port-bad-protocol", pod(containers="containers: [{name: a, ports: [{hostPort: 80, protocol: HTTP}]}]"),
     'document 1 (Pod ml/nb-1): spec.containers[0].ports[0].protocol: must be one of TCP, UDP, SCTP, got "HTTP"'),
    ("host-ip-not-string", pod(containers="containers: [{name: a, ports: [{hostPort: 80, hostIP: [1]}]}]"),
     "document 1 (Pod ml/nb-1): spec.containers[0].ports[0].hostIP: must be a string, got a list"),
    ("ports-not-list", pod(containers="containers: [{name: a, ports: {hostPort: 80}}]"),
     "document 1 (Pod ml/nb-1): spec.containers[0].ports: must be a list, got a mapping"),
    ("fractional-whole-gpu", pod(containers="containers: [{name: a, resources: {limits: {nvidia.com/gpu: '0.5'}}}]"),
     'document 1 (Pod ml/nb-1): spec.containers[0].resources.limits.nvidia.com/gpu: extended resource must be a '
     'whole number, got "0.5"; use the gpufleet.dev/gpu-blocks annotation for a fraction'),
    ("gpu-memory-zero", pod(annotations="{gpufleet.dev/gpu-memory: '0'}", containers="containers: [{name: a}]"),
     'document 1 (Pod ml/nb-1): metadata.annotations.gpufleet.dev/gpu-memory: must be a positive amount of memory, got "0"'),
    ("gpu-memory-malformed", pod(annotations="{gpufleet.dev/gpu-memory: 20 GiB}", containers="containers: [{name: a}]"),
     'document 1 (Pod ml/nb-1): metadata.annotations.gpufleet.dev/gpu-memory: malformed quantity "20 GiB"'),
    # --- pods and their queues
    ("pod-missing-queue", docs(QUEUES, pod(labels="{gpufleet.dev/queue: nope}")),
     'document 3 (Pod ml/nb-1): metadata.labels.gpufleet.dev/queue: unknown queue "nope"'),
    ("pod-non-leaf-queue", docs(QUEUES, pod(labels="{gpufleet.dev/queue: research}")),
     'document 3 (Pod ml/nb-1): metadata.labels.gpufleet.dev/queue: queue "research" is not a leaf '
     '(it is the parent of "team-a")'),
    ("bound-pod-missing-queue", docs(NODE, pod(labels="{gpufleet.dev/queue: gone}", spec="nodeName: n1", status="{phase: Running}")),
     'document 2 (Pod ml/nb-1): metadata.labels.gpufleet.dev/queue: unknown queue "gone"'),
    ("podgroup-missing-queue", docs(QUEUES, "apiVersion: gpufleet.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\n"
                                    "spec: {minMember: 2, queue: nope}\n", pod(labels="{gpufleet.dev/pod-group: g}")),
     'document 3 (PodGroup ml/g): spec.queue: unknown queue "nope"'),
    ("podgroup-non-leaf-queue", docs(QUEUES, "apiVersion: gpufleet.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\n"
                                     "spec: {minMember: 2, queue: research}\n", pod(labels="{gpufleet.dev/pod-group: g}")),
     'document 3 (PodGroup ml/g): spec.queue: queue "research" is not a leaf (it is the parent of "team-a")'),
    ("default-queue-not-leaf", docs(queue("default", "{}"), queue("child", "{parent: default}"), pod()),
     'document 3 (Pod ml/nb-1): metadata.labels.gpufleet.dev/queue: no queue given, and the default queue: '
     'queue "default" is not a leaf (it is the parent of "child")'),
    ("duplicate-pod", docs(NODE, pod(), pod()), "document 3 (Pod ml/nb-1): metadata.name: duplicate Pod ml/nb-1 (first in document 2)"),
    # --- pod group
    ("minMember-zero", "apiVersion: gpufleet.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\nspec: {minMember: 0}\n",
     "document 1 (PodGroup ml/g): spec.minMember: must be >= 1, got 0"),
    ("minMember-string", "apiVersion: gpufleet.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\nspec: {minMember: '4'}\n",
     'document 1 (PodGroup ml/g): spec.minMember: must be an integer, got "4"'),
    ("podgroup-unknown-field", "apiVersion: gpufleet.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\nspec: {minMember: 2, topology: {requird: rack}}\n",
     "document 1 (PodGroup default/g): spec.topology.requird: unknown field"),
    # --- pod annotations and labels
    ("gpu-blocks-too-big", docs(NODE, NODE.replace("n1", "n2"), pod(annotations="{gpufleet.dev/gpu-blocks: '150'}", containers="containers: [{name: a}]")),
     'document 3 (Pod ml/nb-1): metadata.annotations.gpufleet.dev/gpu-blocks: must be an integer 1..100, got "150"'),
    ("gpu-blocks-zero", pod(annotations="{gpufleet.dev/gpu-blocks: '0'}", containers="containers: [{name: a}]"),
     'document 1 (Pod ml/nb-1): metadata.annotations.gpufleet.dev/gpu-blocks: must be an integer 1..100, got "0"'),
    ("gpu-blocks-not-int", pod(annotations="{gpufleet.dev/gpu-blocks: '2.5'}", containers="containers: [{name: a}]"),
     'document 1 (Pod ml/nb-1): metadata.annotations.gpufleet.dev/gpu-blocks: must be an integer 1..100, got "2.5"'),
    ("gpu-blocks-and-whole-gpus", pod(annotations="{gpufleet.dev/gpu-blocks: '20'}"),
     "document 1 (Pod ml/nb-1): metadata.annotations.gpufleet.dev/gpu-blocks: a fractional GPU annotation cannot "
     "be combined with a nvidia.com/gpu request (1 GPUs)"),
    ("preemptible-yes", pod(labels="{gpufleet.dev/preemptible: 'yes'}"),
     'document 1 (Pod ml/nb-1): metadata.labels.gpufleet.dev/preemptible: must be "true" or "false", got "yes"'),
    ("gpu-index-malformed", docs(NODE, pod(annotations="{gpufleet.dev/gpu-index: '0-3'}", spec="nodeName: n1")),
     'document 2 (Pod ml/nb-1): metadata.annotations.gpufleet.dev/gpu-index: must be GPU indices such as "0,1", got "0-3"'),
    ("gpu-index-repeated", docs(NODE, pod(annotations="{gpufleet.dev/gpu-index: '1,1'}", spec="nodeName: n1")),
     'document 2 (Pod ml/nb-1): metadata.annotations.gpufleet.dev/gpu-index: repeats a GPU index: "1,1"'),
    # --- pod spec types
    ("labels-a-list", pod(labels="[a, b]"), "document 1 (Pod ml/nb-1): metadata.labels: must be a mapping, got a list"),
    ("label-value-mapping", pod(labels="{team: {a: b}}"), "document 1 (Pod ml/nb-1): metadata.labels.team: must be a string, got a mapping"),
    ("containers-a-mapping", pod(containers="containers: {name: main}"), "document 1 (Pod ml/nb-1): spec.containers: must be a list, got a mapping"),
    ("container-a-string", pod(containers="containers: [main]"), 'document 1 (Pod ml/nb-1): spec.containers[0]: must be a mapping, got "main"'),
    ("priority-string", pod(spec="priority: high"), 'document 1 (Pod ml/nb-1): spec.priority: must be an integer, got "high"'),
    ("priority-too-big", pod(spec="priority: 99999999999"), "document 1 (Pod ml/nb-1): spec.priority: must be a 32-bit integer, got 99999999999"),
    ("nodeName-number", pod(spec="nodeName: 12"), "document 1 (Pod ml/nb-1): spec.nodeName: must be a string, got 12"),
    ("bad-timestamp", pod(status="{startTime: yesterday}"), 'document 1 (Pod ml/nb-1): status.startTime: must be an RFC 3339 timestamp, got "yesterday"'),
    # --- inter-pod affinity and topology spread (issue 9)
    ("pod-affinity-bad-operator", pod(spec="affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
     "[{topologyKey: zone, labelSelector: {matchExpressions: [{key: app, operator: Gt, values: ['1']}]}}]}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]."
     'labelSelector.matchExpressions[0].operator: must be one of In, NotIn, Exists, DoesNotExist, got "Gt"'),
    ("pod-affinity-malformed-selector", pod(spec="affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
     "[{topologyKey: zone, labelSelector: {matchLabels: [app]}}]}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]."
     "labelSelector.matchLabels: must be a mapping, got a list"),
    ("pod-affinity-in-without-values", pod(spec="affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
     "[{topologyKey: zone, labelSelector: {matchExpressions: [{key: app, operator: In}]}}]}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]."
     "labelSelector.matchExpressions[0].values: must list at least one value for operator In"),
    ("pod-affinity-no-topology-key", pod(spec="affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
     "[{labelSelector: {matchLabels: {app: x}}}]}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]."
     "topologyKey: required field missing"),
    ("pod-affinity-weight", pod(spec="affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: "
     "[{weight: 0, podAffinityTerm: {topologyKey: zone}}]}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]."
     "weight: must be an integer 1..100, got 0"),
    ("node-affinity-preferred-weight", pod(spec="affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: "
     "[{weight: 101, preference: {matchExpressions: [{key: zone, operator: In, values: [a]}]}}]}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]."
     "weight: must be an integer 1..100, got 101"),
    ("node-affinity-preferred-no-preference", pod(spec="affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: "
     "[{weight: 5}]}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]."
     "preference: required field missing"),
    ("node-affinity-preferred-bad-operator", pod(spec="affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: "
     "[{weight: 5, preference: {matchExpressions: [{key: zone, operator: Near, values: [a]}]}}]}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]."
     "preference.matchExpressions[0].operator: must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt, got \"Near\""),
    ("spread-max-skew-zero", pod(spec="topologySpreadConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]"),
     "document 1 (Pod ml/nb-1): spec.topologySpreadConstraints[0].maxSkew: must be at least 1, got 0"),
    ("spread-unknown-when", pod(spec="topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Sometimes}]"),
     "document 1 (Pod ml/nb-1): spec.topologySpreadConstraints[0].whenUnsatisfiable: must be one of DoNotSchedule, "
     'ScheduleAnyway, got "Sometimes"'),
    ("spread-bad-operator", pod(spec="topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: "
     "DoNotSchedule, labelSelector: {matchExpressions: [{key: app, operator: Like, values: [a]}]}}]"),
     "document 1 (Pod ml/nb-1): spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].operator: "
     'must be one of In, NotIn, Exists, DoesNotExist, got "Like"'),
    ("spread-min-domains-zero", pod(spec="topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: "
     "DoNotSchedule, minDomains: 0}]"),
     "document 1 (Pod ml/nb-1): spec.topologySpreadConstraints[0].minDomains: must be at least 1, got 0"),
    ("spread-bad-policy", pod(spec="topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: "
     "DoNotSchedule, nodeTaintsPolicy: Maybe}]"),
     "document 1 (Pod ml/nb-1): spec.topologySpreadConstraints[0].nodeTaintsPolicy: must be one of Honor, Ignore, "
     'got "Maybe"'),
    ("selector-bad-operator", pod(spec="affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
                                       "[{matchExpressions: [{key: a, operator: Equals, values: [b]}]}]}}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
     'nodeSelectorTerms[0].matchExpressions[0].operator: must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt, got "Equals"'),
    ("selector-gt-two-values", pod(spec="affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
                                        "[{}, {matchExpressions: [{key: a, operator: Gt, values: ['1', '2']}]}]}}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
     "nodeSelectorTerms[1].matchExpressions[0].values: must be exactly one integer for operator Gt"),
    ("selector-lt-not-integer", pod(spec="affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
                                         "[{matchExpressions: [{key: a, operator: Lt, values: [x]}]}]}}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
     "nodeSelectorTerms[0].matchExpressions[0].values: must be exactly one integer for operator Lt"),
    ("selector-fields-key", pod(spec="affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
                                     "[{matchFields: [{key: metadata.labels, operator: In, values: [x]}]}]}}}"),
     "document 1 (Pod ml/nb-1): spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
     'nodeSelectorTerms[0].matchFields[0].key: only "metadata.name" is supported, got "metadata.labels"'),
    ("toleration-bad-operator", pod(spec="tolerations: [{key: a, operator: Maybe}]"),
     'document 1 (Pod ml/nb-1): spec.tolerations[0].operator: must be Equal or Exists, got "Maybe"'),
    ("toleration-bad-effect", pod(spec="tolerations: [{key: a, operator: Exists, effect: NoRun}]"),
     'document 1 (Pod ml/nb-1): spec.tolerations[0].effect: must be one of NoSchedule, PreferNoSchedule, NoExecute, got "NoRun"'),
    # --- node annotations and labels
    ("taint-bad-effect", "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {taints: [{key: a, effect: Never}]}\n",
     'document 1 (Node n): spec.taints[0].effect: must be one of NoSchedule, PreferNoSchedule, NoExecute, got "Never"'),
    ("unhealthy-gpus-malformed", "apiVersion: v1\nkind: Node\nmetadata: {name: n, annotations: {gpufleet.dev/unhealthy-gpus: 'gpu3'}}\n",
     'document 1 (Node n): metadata.annotations.gpufleet.dev/unhealthy-gpus: must be GPU indices such as "0,1", got "gpu3"'),
    ("nvlink-malformed", "apiVersion: v1\nkind: Node\nmetadata: {name: n, annotations: {gpufleet.dev/nvlink-domains: '3-0'}}\n",
     'document 1 (Node n): metadata.annotations.gpufleet.dev/nvlink-domains: must be GPU index groups such as "0-3;4-7" '
     'or "0,1;2,3", got "3-0"'),
    ("nvlink-overlap", "apiVersion: v1\nkind: Node\nmetadata: {name: n, annotations: {gpufleet.dev/nvlink-domains: '0-3;3-7'}}\n",
     'document 1 (Node n): metadata.annotations.gpufleet.dev/nvlink-domains: GPU 3 appears twice in "0-3;3-7"'),
    ("gpu-memory-label", "apiVersion: v1\nkind: Node\nmetadata: {name: n, labels: {nvidia.com/gpu.memory: 80GB}}\n",
     'document 1 (Node n): metadata.labels.nvidia.com/gpu.memory: must be the memory of one GPU in MiB (a positive '
     'integer), got "80GB"'),
    ("duplicate-node", docs(NODE, NODE), "document 2 (Node n1): metadata.name: duplicate Node n1 (first in document 1)"),
    # --- our CRDs: typos and types
    ("queue-unknown-field", queue("q", "{resources: {nvidia.com/gpu: {quotas: '8'}}}"),
     "document 1 (Queue q): spec.resources.nvidia.com/gpu.quotas: unknown field"),
    ("queue-weight-zero", queue("q", "{weight: 0}"), "document 1 (Queue q): spec.weight: must be > 0, got 0"),
    ("queue-weight-string", queue("q", "{weight: heavy}"), 'document 1 (Queue q): spec.weight: must be a number, got "heavy"'),
    ("queue-withinQueue", queue("q", "{preemption: {withinQueue: Always}}"),
     "document 1 (Queue q): spec.preemption.withinQueue: must be one of 'LowerPriority' or 'Never', got \"Always\""),
    ("queue-reclaim-string", queue("q", "{preemption: {reclaimBorrowed: 'yes'}}"),
     'document 1 (Queue q): spec.preemption.reclaimBorrowed: must be true or false, got "yes"'),
    ("queue-spec-list", queue("q", "[a]"), "document 1 (Queue q): spec: must be a mapping, got a list"),
    ("config-placement", "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nmetadata: {name: c}\nspec: {placement: random}\n",
     "document 1 (SchedulerConfig c): spec.placement: must be one of 'binpack', 'spread' or 'defrag', got \"random\""),
    ("config-levels", "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nspec: {topologyLevels: rack}\n",
     'document 1 (SchedulerConfig): spec.topologyLevels: must be a list, got "rack"'),
    ("config-twice", docs("apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\n", NODE,
                          "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\n"),
     "document 3 (SchedulerConfig): a second SchedulerConfig (the first is in document 1); there may be only one"),
    ("priorityclass-two-defaults", docs(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: a}\nvalue: 1\nglobalDefault: true\n",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: b}\nvalue: 2\nglobalDefault: true\n"),
     'document 2 (PriorityClass b): globalDefault: only one PriorityClass may be the global default ("a" is too)'),
    ("priorityclass-value-float", "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: a}\nvalue: 1.5\n",
     "document 1 (PriorityClass a): value: must be an integer, got 1.5"),
    # --- ResourceFlavors and Queue flavors (docs/semantics.md, "GPU-model quotas")
    ("flavor-unknown", docs(NODE, FLAVOR_H100, queue("team", "{flavors: [{name: h100}, {name: l40s}]}")),
     'document 3 (Queue team): spec.flavors[1].name: unknown ResourceFlavor "l40s"'),
    ("flavor-twice", docs(NODE, FLAVOR_H100, queue("team", "{flavors: [{name: h100}, {name: h100}]}")),
     'document 3 (Queue team): spec.flavors[1].name: flavor "h100" listed twice'),
    ("flavor-overlap", docs(NODE_H100, FLAVOR_H100, flavor("any-gpu", "{nvidia.com/gpu.count: '8'}")),
     "document 3 (ResourceFlavor any-gpu): spec.nodeLabels: node n1 is of flavors h100 and any-gpu (overlapping flavors)"),
    ("flavor-no-labels", docs(NODE, flavor("h100", "{}")), "document 2 (ResourceFlavor h100): spec.nodeLabels: must not be empty"),
    ("flavor-no-spec", docs(NODE, "apiVersion: gpufleet.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {name: h100}\n"),
     "document 2 (ResourceFlavor h100): spec: required field missing"),
    ("flavor-bad-quota", docs(NODE, FLAVOR_H100, queue("team", "{flavors: [{name: h100, resources: {nvidia.com/gpu: {quota: -1}}}]}")),
     "document 3 (Queue team): spec.flavors[0].resources.nvidia.com/gpu.quota: negative quantity \"-1\""),
]


CASES += VOLUME_CASES  # PersistentVolumeClaim, PersistentVolume, StorageClass, pod volumes
CASES += DRA_CASES  # ResourceSlice, DeviceClass, ResourceClaim(Template), pod resourceClaims


@pytest.mark.parametrize(("text", "expected"), [pytest.param(t, e, id=i) for i, t, e in CASES])
def test_bad_input_names_document_object_and_field(text: str, expected: str) -> None:
    with pytest.raises(InputError) as err:
        load_snapshot_text(text, "snap.yaml")
    message = str(err.value)
    assert message == f"snap.yaml: {expected}"
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("apiVersion: v1\nkind: Node\nmetadata: {name: [n1\n", 4),
        ("apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n labels: x\n", 5),
        (NODE + "---\napiVersion: v1\n\tkind: Pod\n", 7),
        ("a: b\nc\n", 3),
        ("key: 'unterminated\n", 2),
        ("a: *nowhere\n", 1),
    ],
)
def test_malformed_yaml_names_the_line(text: str, line: int) -> None:
    with pytest.raises(InputError) as err:
        load_snapshot_text(text, "snap.yaml")
    message = str(err.value)
    assert re.fullmatch(rf"snap\.yaml: line {line}: malformed YAML: \S.*", message), message


def test_a_yaml_value_python_cannot_build_is_malformed_yaml() -> None:
    with pytest.raises(InputError, match=r"^snap\.yaml: malformed YAML: "):
        load_snapshot_text("apiVersion: v1\nkind: Node\nmetadata: {creationTimestamp: 2026-13-45}\n", "snap.yaml")


def test_config_file_errors_name_the_config_file() -> None:
    text = "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nspec: {nonPreemptiblePriority: high}\n"
    with pytest.raises(InputError) as err:
        load_config_text(text, "cfg.yaml")
    assert str(err.value) == (
        'cfg.yaml: document 1 (SchedulerConfig): spec.nonPreemptiblePriority: must be an integer, got "high"'
    )


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing\.yaml: cannot read: "):
        load_snapshot_file(tmp_path / "missing.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"kind: \xff\xfe\n")
    with pytest.raises(InputError, match=r"binary\.yaml: not UTF-8 text"):
        load_snapshot_file(binary)
    with pytest.raises(InputError, match=r"cannot read"):
        load_snapshot_file(tmp_path)  # a directory


def test_explicit_config_changes_what_the_default_queue_must_be() -> None:
    from gpufleet.domain import QueueName, SchedulerConfig

    text = docs(QUEUES, pod())
    # the default queue "default" does not exist: created implicitly, fine
    assert len(load_snapshot_text(text, "snap.yaml").pods) == 1
    with pytest.raises(InputError, match=r'default queue: queue "research" is not a leaf'):
        load_snapshot_text(text, "snap.yaml", config=SchedulerConfig(default_queue=QueueName("research")))


@pytest.mark.parametrize(
    "expression",
    [
        "'[' * 200_000",  # refused by depth before parsing
        "'- ' * 200_000 + 'x'",
        "'{a: ' * 25_000 + 'x' + '}' * 25_000",  # deeper than an 8 MiB stack holds, parsed in a big one
        "'- ' * 30_000 + 'x'",
        # no flow collection: yaml-rs's path, 20,000 deep (past an 8 MiB stack), in a thread to match
        "'- ' * 20_000 + 'x'",
        "''.join(' ' * i + 'a:\\n' for i in range(3_000)) + ' ' * 3_000 + 'x\\n'",
        "'- ' * 100_000 + 'x'",  # too deep a bound for yaml-rs: PyYAML's path, refused by depth
        "'[' * 5_000 + ']' * 5_000",  # deeper than yaml-rs takes flow collections (256): PyYAML's path
    ],
)
def test_deep_nesting_never_crashes_the_process(expression: str) -> None:
    # libyaml's composer recurses in C: without care this is a segmentation fault, so run it apart
    code = (
        "from gpufleet.adapters.errors import InputError\n"
        "from gpufleet.adapters.k8s_yaml import load_snapshot_text\n"
        "try:\n"
        f"    load_snapshot_text({expression}, 'deep.yaml')\n"
        "except InputError as err:\n"
        "    print(err)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("deep.yaml: "), proc.stdout
    assert proc.stdout.count("\n") == 1
