"""`gpufleet replay BAD.yaml` exits 2 with one clear line on stderr and never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BAD_SNAPSHOTS = {
    "malformed-yaml": ("apiVersion: v1\nkind: Node\nmetadata: {name: [n1\n", "line 4: malformed YAML"),
    "queue-cycle": (
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: a}\nspec: {parent: b}\n---\n"
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: b}\nspec: {parent: a}\n",
        "document 1 (Queue a): spec.parent: cycle in the queue tree: a -> b -> a",
    ),
    "negative-quantity": (
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\n"
        "spec: {resources: {nvidia.com/gpu: {quota: '-1'}}}\n",
        'document 1 (Queue team-a): spec.resources.nvidia.com/gpu.quota: negative quantity "-1"',
    ),
    "min-runtime": (
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\n"
        "spec: {preemption: {minRuntime: 10 minutes}}\n",
        'document 1 (Queue team-a): spec.preemption.minRuntime: must be a duration like 90, 30m, 1h30m or 2d, '
        'got "10 minutes"',
    ),
    "preemption-delay": (
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\n"
        "spec: {preemption: {preemptionDelay: 5w}}\n",
        "document 1 (Queue team-a): spec.preemption.preemptionDelay: must be a duration like 90, 30m, 1h30m or 2d, "
        'got "5w"',
    ),
    "usage-half-life": (
        "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nmetadata: {name: c}\n"
        "spec: {fairShare: {usageHalfLife: -1h}}\n",
        'spec.fairShare.usageHalfLife: must be a duration like 90, 30m, 1h30m or 2d, got "-1h"',
    ),
    "usage-half-life-infinite": (
        "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nmetadata: {name: c}\n"
        "spec: {fairShare: {usageHalfLife: 1e999h}}\n",
        'spec.fairShare.usageHalfLife: must be a finite duration >= 0, got "1e999h"',
    ),
    "usage-half-life-boolean": (
        "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nmetadata: {name: c}\n"
        "spec: {fairShare: {usageHalfLife: true}}\n",
        "spec.fairShare.usageHalfLife: must be a duration like 90, 30m, 1h30m or 2d, got true",
    ),
    "observed-runtime": (
        "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nmetadata: {name: c}\n"
        "spec: {reservation: {after: 1h, observedRuntime: {team-a: 1h-5m}}}\n",
        'spec.reservation.observedRuntime.team-a: must be a duration like 90, 30m, 1h30m or 2d, got "1h-5m"',
    ),
    "decayed-usage": (
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\n"
        "status: {decayedUsage: {nvidia.com/gpu: lots}}\n",
        'document 1 (Queue team-a): status.decayedUsage[nvidia.com/gpu]: malformed quantity "lots"',
    ),
    "gpu-blocks": (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: nb-1, namespace: ml, annotations: {gpufleet.dev/gpu-blocks: '150'}}\n"
        "spec: {schedulerName: gpufleet, containers: [{name: main}]}\n",
        "document 1 (Pod ml/nb-1): metadata.annotations.gpufleet.dev/gpu-blocks: must be an integer 1..100",
    ),
    "claim-storage": (
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: ml}\n"
        "spec: {resources: {requests: {storage: 10Gx}}}\n",
        'document 1 (PersistentVolumeClaim ml/data): spec.resources.requests.storage: malformed quantity "10Gx"',
    ),
    "binding-mode": (
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: local}\n"
        "provisioner: x\nvolumeBindingMode: Later\n",
        'document 1 (StorageClass local): volumeBindingMode: must be one of Immediate, WaitForFirstConsumer, got "Later"',
    ),
    "claim-selector": (
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: ml}\n"
        "spec: {selector: {matchExpressions: [{key: a, operator: Gt, values: ['1']}]}}\n",
        "document 1 (PersistentVolumeClaim ml/data): spec.selector.matchExpressions[0].operator: must be one of",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SNAPSHOTS))
def test_replay_of_bad_input_exits_2_with_one_line(case: str, tmp_path: Path) -> None:
    text, expected = BAD_SNAPSHOTS[case]
    snapshot = tmp_path / f"{case}.yaml"
    snapshot.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "replay", str(snapshot)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"gpufleet replay: {snapshot}: ")
    assert expected in lines[0]
    assert proc.stdout == ""


def test_replay_with_a_bad_config_file_exits_2(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap.yaml"
    snapshot.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nspec: {placement: random}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "replay", str(snapshot), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.splitlines() == [
        f"gpufleet replay: {config}: document 1 (SchedulerConfig): spec.placement: must be one of 'binpack', 'spread' or 'defrag', "
        'got "random"'
    ]


def test_replay_with_a_bad_now_exits_2_naming_the_option(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap.yaml"
    snapshot.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "replay", str(snapshot), "--now", "yesterday"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "--now" in lines[0] and '"yesterday"' in lines[0], proc.stderr


def test_a_bad_config_now_exits_2_naming_the_field(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap.yaml"
    snapshot.write_text("apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nspec: {now: soon}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "replay", str(snapshot)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "spec.now: must be an RFC 3339 timestamp" in proc.stderr
