"""The cgroup parser on each layout (recorded texts in data/cgroup) and on anything (hypothesis)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.agent.usage import CgroupOwner, parse_cgroup, parse_start_time

DATA = Path(__file__).parent / "data" / "cgroup"
UID = "5f2c9a1e-3b7d-4e8f-9a06-1c2d3e4f5a6b"
CID = "4c1e0b9d8a7f6e5d4c3b2a19087f6e5d4c3b2a19087f6e5d4c3b2a1908f7e6d5"

IN_POD = {
    "v1-systemd-containerd-burstable": CgroupOwner(UID, CID),
    "v1-cgroupfs-docker-besteffort": CgroupOwner(UID, CID),
    "v1-systemd-cri-dockerd-guaranteed": CgroupOwner(UID, CID),
    "v2-systemd-containerd-burstable": CgroupOwner(UID, CID),
    "v2-systemd-containerd-besteffort": CgroupOwner(UID, CID),
    "v2-systemd-containerd-guaranteed": CgroupOwner(UID, CID),
    "v2-systemd-crio-burstable": CgroupOwner(UID, CID),
    "v2-systemd-crio-conmon": CgroupOwner(UID, ""),  # the pod's, no container's
    "v2-cgroupfs-containerd-burstable": CgroupOwner(UID, CID),
    "v2-cgroupfs-containerd-guaranteed": CgroupOwner(UID, CID),
    "v2-systemd-private-cgroupns": CgroupOwner(UID, CID),
    "v2-kind-nested": CgroupOwner(UID, CID),
    "v2-systemd-nested-in-container": CgroupOwner(UID, CID),
    "v2-systemd-static-pod": CgroupOwner("8b1f0e2d4c6a48e09f7b3d5c1a2e4f60", CID),
}
IN_NO_POD = ["v1-host-session", "v1-recorded-this-sandbox", "v2-host-not-kubepods", "v2-host-service",
             "v2-host-session"]


def test_every_recorded_text_has_an_expectation() -> None:
    assert {p.stem for p in DATA.glob("*.txt")} == set(IN_POD) | set(IN_NO_POD)


@pytest.mark.parametrize("name", sorted(IN_POD))
def test_a_pod_process_gives_its_pod_and_container(name: str) -> None:
    assert parse_cgroup((DATA / f"{name}.txt").read_text()) == IN_POD[name]


@pytest.mark.parametrize("name", IN_NO_POD)
def test_a_host_process_gives_none(name: str) -> None:
    assert parse_cgroup((DATA / f"{name}.txt").read_text()) is None


def test_upper_case_hex_is_read_in_lower_case() -> None:
    text = f"0::/kubepods/burstable/pod{UID.upper()}/{CID.upper()}\n"
    assert parse_cgroup(text) == CgroupOwner(UID, CID)


def test_the_first_line_naming_a_pod_decides_and_other_lines_are_skipped() -> None:
    text = f"garbage\n3:cpu:/\n2:memory:/kubepods/pod{UID}/{CID}\n1:name=systemd:/kubepods/pod{UID}/{CID}\n"
    assert parse_cgroup(text) == CgroupOwner(UID, CID)


@pytest.mark.parametrize("path", [
    f"/kubepods/burstable/pod{UID}.slice/{CID}",  # a slice suffix without the kubepods prefix
    f"/system.slice/foo-pod{UID.replace('-', '_')}.slice",  # a unit of another tree
    f"/kubepods/burstable/pod{UID[:-1]}/{CID}",  # a UID one digit short
    "/kubepods/burstable/podcast/x",
])
def test_near_misses_are_no_pod(path: str) -> None:
    assert parse_cgroup(f"0::{path}\n") is None


def test_a_pod_cgroup_without_a_container_gives_an_empty_container() -> None:
    assert parse_cgroup(f"0::/kubepods/besteffort/pod{UID}\n") == CgroupOwner(UID, "")
    assert parse_cgroup(f"0::/kubepods/besteffort/pod{UID}/not-an-id\n") == CgroupOwner(UID, "")


_layouts = st.sampled_from([
    "0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{us}.slice/{rt}-{cid}.scope",
    "0::/kubepods.slice/kubepods-pod{us}.slice/{rt}-{cid}.scope",
    "7:memory:/kubepods/{qos}/pod{uid}/{cid}\n1:name=systemd:/kubepods/{qos}/pod{uid}/{cid}\n0::/",
    "0::/kubepods/pod{uid}/{cid}",
    "0::/../../kubepods-{qos}.slice/kubepods-{qos}-pod{us}.slice/{rt}-{cid}.scope",
])


@given(uid=st.uuids(), cid=st.binary(min_size=32, max_size=32), layout=_layouts,
       qos=st.sampled_from(["burstable", "besteffort"]), rt=st.sampled_from(["cri-containerd", "crio", "docker"]))
def test_any_uid_and_container_round_trip(uid: uuid.UUID, cid: bytes, layout: str, qos: str, rt: str) -> None:
    text = layout.format(qos=qos, rt=rt, uid=uid, us=str(uid).replace("-", "_"), cid=cid.hex())
    assert parse_cgroup(text) == CgroupOwner(str(uid), cid.hex())


@given(uid=st.binary(min_size=16, max_size=16), cid=st.binary(min_size=32, max_size=32),
       systemd=st.booleans())
def test_any_static_pod_hash_round_trips(uid: bytes, cid: bytes, systemd: bool) -> None:
    path = (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid.hex()}.slice/crio-{cid.hex()}.scope"
            if systemd else f"/kubepods/besteffort/pod{uid.hex()}/{cid.hex()}")
    assert parse_cgroup(f"0::{path}\n") == CgroupOwner(uid.hex(), cid.hex())


@given(st.text())
def test_garbage_never_raises(text: str) -> None:
    owner = parse_cgroup(text)
    assert owner is None or isinstance(owner, CgroupOwner)


@given(st.text(alphabet=st.sampled_from("0123456789:/-_.podkubeslice\n"), max_size=200))
def test_cgroup_like_garbage_gives_a_uid_shaped_answer_or_none(text: str) -> None:
    owner = parse_cgroup(text)
    assert owner is None or (len(owner.pod_uid) in (32, 36) and owner.pod_uid == owner.pod_uid.lower())


def test_the_start_time_is_field_22_even_with_parentheses_in_the_name() -> None:
    fields = " ".join(str(n) for n in range(3, 53)).replace("3 ", "S ", 1)
    assert parse_start_time(f"4242 (python3) {fields}") == 22
    assert parse_start_time(f"4242 (a) b (c) {fields}") == 22  # comm "a) b (c"


@given(st.text())
def test_a_garbage_stat_never_raises(text: str) -> None:
    start = parse_start_time(text)
    assert start is None or start >= 0


def test_this_process_stat_reads() -> None:
    start = parse_start_time(Path("/proc/self/stat").read_text())
    assert start is not None and start > 0


def test_a_start_time_of_non_ascii_digits_is_none() -> None:
    fields = ["S", *map(str, range(4, 22)), "\u00b2", "23"]
    assert parse_start_time(f"1 (x) {' '.join(fields)}") is None
