"""pod_shares, pure: every process counted once, memory conserved, shares bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.agent.gpus import GpuUtilisation, ProcessUtilisation
from gpufleet.agent.usage import UNREADABLE, Attribution, CgroupOwner, Owner, PodEntry, pod_shares

PODS = {f"uid-{n}": PodEntry(f"ns-{n % 2}", f"pod-{n}", {f"c{n}": f"main-{n}"}) for n in range(4)}
GPUS = [GpuUtilisation(index=i, uuid=f"GPU-{i}", gpu_util_percent=50, memory_used_mib=1000, memory_total_mib=80000)
        for i in range(3)]
_owners: st.SearchStrategy[Owner] = st.one_of(
    st.none(), st.just(UNREADABLE),
    st.builds(CgroupOwner, st.sampled_from([*PODS, "uid-unknown"]), st.sampled_from(["c0", "c1", "c2", "c3", ""])))


@st.composite
def polls(draw: st.DrawFn) -> tuple[list[ProcessUtilisation], dict[int, Owner]]:
    count = draw(st.integers(0, 30))
    processes = [ProcessUtilisation(index=(gpu := draw(st.integers(0, 2))), uuid=f"GPU-{gpu}",
                                    pid=draw(st.integers(1, 40)), sm_util_percent=draw(st.floats(0, 100)),
                                    memory_used_mib=draw(st.integers(0, 80000)))
                 for _ in range(count)]
    owners = {p.pid: draw(_owners) for p in processes}
    for pid in draw(st.lists(st.sampled_from([p.pid for p in processes]), max_size=3)) if processes else []:
        owners.pop(pid, None)  # a PID the resolver did not answer for: unreadable
    return processes, owners


@given(polls())
def test_every_process_is_counted_once_and_pod_memory_is_conserved(poll: tuple[list[ProcessUtilisation],
                                                                              dict[int, Owner]]) -> None:
    processes, owners = poll
    sample = pod_shares(GPUS, processes, owners, PODS, at=5.0)
    assert sum(sample.processes.values()) == len(processes)
    in_pods = [p for p in processes if isinstance(owners.get(p.pid), CgroupOwner)
               and owners[p.pid].pod_uid in PODS]  # type: ignore[union-attr]
    assert sum(sample.processes.get((i, Attribution.POD), 0) for i in range(3)) == len(in_pods)
    assert sum(s.fb_used_mib for s in sample.shares) == sum(p.memory_used_mib for p in in_pods)
    assert all(0 <= s.util_percent <= 100 for s in sample.shares)
    keys = [(s.gpu_uuid, s.namespace, s.pod) for s in sample.shares]
    assert len(keys) == len(set(keys))  # one series per (GPU, pod)


def test_a_pod_share_sums_its_processes_and_names_its_containers() -> None:
    processes = [ProcessUtilisation(0, "GPU-0", 10, 30, 100), ProcessUtilisation(0, "GPU-0", 11, 20, 50),
                 ProcessUtilisation(1, "GPU-1", 12, 7, 10)]
    owners: dict[int, Owner] = {10: CgroupOwner("uid-1", "c1"), 11: CgroupOwner("uid-1", "unknown-container"),
                                12: None}
    sample = pod_shares(GPUS, processes, owners, PODS, at=5.0)
    [share] = sample.shares
    assert (share.gpu_index, share.pod, share.util_percent, share.fb_used_mib, share.container) == (
        0, "pod-1", 50, 150, "main-1")
    assert sample.processes == {(0, Attribution.POD): 2, (1, Attribution.HOST): 1}
