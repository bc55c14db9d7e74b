"""Inter-pod affinity terms and topology spread constraints as the loader reads them (issue 9)."""

from __future__ import annotations

from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.domain import LabelSelector, PodAffinityTerm, SelectorRequirement, SpreadConstraint

POD = """apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: shop, labels: {app: web, rev: r7}}
spec:
  schedulerName: gpufleet
  containers: [{name: main}]
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {app: cache}}
        namespaces: [infra]
        topologyKey: kubernetes.io/hostname
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 30
        podAffinityTerm: {topologyKey: zone, labelSelector: {}, namespaceSelector: {}}
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchExpressions: [{key: app, operator: In, values: [web]}]}
        topologyKey: kubernetes.io/hostname
        matchLabelKeys: [rev, missing]
        mismatchLabelKeys: [app]
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}},
     matchLabelKeys: [rev], minDomains: 3, nodeTaintsPolicy: Honor}
  - {maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway}
"""


def test_terms_and_constraints_are_read_with_label_keys_merged() -> None:
    pod = load_snapshot_text(POD, "snap.yaml").pods[0]
    assert pod.affinity_terms == (
        PodAffinityTerm("kubernetes.io/hostname", LabelSelector((("app", "cache"),)), ("infra",)),
        PodAffinityTerm("zone", LabelSelector(), namespace_selector=LabelSelector(), weight=30),
    )
    assert pod.anti_affinity_terms == (
        PodAffinityTerm("kubernetes.io/hostname", LabelSelector((), (
            SelectorRequirement("app", "In", ("web",)),
            SelectorRequirement("rev", "In", ("r7",)),
            SelectorRequirement("app", "NotIn", ("web",)),
        ))),
    )
    assert pod.spread_constraints == (
        SpreadConstraint(1, "zone", "DoNotSchedule", LabelSelector(
            (("app", "web"),), (SelectorRequirement("rev", "In", ("r7",)),)), 3, "Honor", "Honor"),
        SpreadConstraint(2, "kubernetes.io/hostname", "ScheduleAnyway", None),
    )


NODE_PREFERENCES = """apiVersion: v1
kind: Pod
metadata: {name: train-0, namespace: ml}
spec:
  schedulerName: gpufleet
  containers: [{name: main}]
  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 80
        preference: {matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [z1, z2]}]}
      - weight: 1
        preference: {matchFields: [{key: metadata.name, operator: NotIn, values: [n3]}]}
"""


def test_preferred_node_affinity_is_read_with_weights() -> None:
    from gpufleet.domain import SelectorTerm

    pod = load_snapshot_text(NODE_PREFERENCES, "snap.yaml").pods[0]
    assert pod.affinity == ()
    assert pod.preferred_affinity == (
        (80, SelectorTerm(expressions=(SelectorRequirement("topology.kubernetes.io/zone", "In", ("z1", "z2")),))),
        (1, SelectorTerm(fields=(SelectorRequirement("metadata.name", "NotIn", ("n3",)),))),
    )
