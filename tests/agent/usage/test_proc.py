"""HostProcReader on a proc-like tree, on this machine's /proc, and PID -> owner with its cache."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.agent.usage import UNREADABLE, CgroupOwner, HostProcReader, ProcessOwners, parse_start_time

from .proctree import ProcTree, stat_text

UID_A = "0c9e2f4a-6b1d-48e3-a7f5-3d2b9c1e8a60"
UID_B = "7d3a1f5c-2e4b-4c6d-8e9f-0a1b2c3d4e5f"
CID = "ab" * 32


def pod_cgroup(uid: str, cid: str = CID) -> str:
    return f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/" \
           f"cri-containerd-{cid}.scope\n"


class CountingReader(HostProcReader):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.cgroups: list[int] = []

    def cgroup(self, pid: int) -> str | None:
        self.cgroups.append(pid)
        return super().cgroup(pid)


def test_the_reader_reads_a_tree_at_a_configured_root(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path / "host" / "proc")
    tree.add(4242, pod_cgroup(UID_A), start_time=777)
    reader = HostProcReader(str(tree.root) + "/")
    assert reader.cgroup(4242) == pod_cgroup(UID_A)
    stat = reader.stat(4242)
    assert stat == stat_text(4242, 777) and parse_start_time(stat) == 777
    assert reader.stat(4243) is None and reader.cgroup(4243) is None
    assert HostProcReader(tmp_path / "nowhere").stat(4242) is None


def test_the_reader_reads_this_machine_proc() -> None:
    reader = HostProcReader()
    assert reader.root == "/proc"
    stat, cgroup = reader.stat(os.getpid()), reader.cgroup(os.getpid())
    assert stat is not None and parse_start_time(stat) is not None
    assert cgroup is not None and cgroup.startswith(("0::", "1:", "2:", "3:", "4:", "5:", "6:", "7:", "8:", "9:", "1"))


def test_owners_are_read_once_per_process(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path)
    tree.add(10, pod_cgroup(UID_A))
    tree.add(11, "0::/system.slice/nvidia-persistenced.service\n")
    reader = CountingReader(tmp_path)
    owners = ProcessOwners(reader)
    first = owners.owners([10, 11, 10])
    assert first == {10: CgroupOwner(UID_A, CID), 11: None}
    assert owners.owners([10, 11]) == first
    assert reader.cgroups == [10, 11] and owners.cgroup_reads == 2


def test_a_reused_pid_is_read_again_not_taken_for_the_old_process(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path)
    tree.add(10, pod_cgroup(UID_A), start_time=1000)
    owners = ProcessOwners(HostProcReader(tmp_path))
    assert owners.owners([10]) == {10: CgroupOwner(UID_A, CID)}
    tree.remove(10)
    tree.add(10, pod_cgroup(UID_B), start_time=5000)  # the same PID, a later process of another pod
    assert owners.owners([10]) == {10: CgroupOwner(UID_B, CID)}


def test_a_process_gone_is_unreadable_and_forgotten(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path)
    tree.add(10, pod_cgroup(UID_A))
    reader = CountingReader(tmp_path)
    owners = ProcessOwners(reader)
    owners.owners([10])
    tree.remove(10)
    assert owners.owners([10]) == {10: UNREADABLE}
    tree.add(10, pod_cgroup(UID_A))
    assert owners.owners([10]) == {10: CgroupOwner(UID_A, CID)}
    assert reader.cgroups == [10, 10]  # read again: nothing of the gone process was kept


def test_the_cache_holds_only_the_last_poll_processes_and_never_more_than_its_capacity(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path)
    for pid in range(100, 110):
        tree.add(pid, pod_cgroup(UID_A))
    reader = CountingReader(tmp_path)
    owners = ProcessOwners(reader, capacity=4)
    owners.owners(range(100, 110))
    assert len(owners.cached) == 4
    owners.owners([108, 109])  # the newest two were kept
    assert reader.cgroups == list(range(100, 110))
    owners.owners([100])
    assert list(owners.cached) == [100]
