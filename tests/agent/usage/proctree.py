"""A directory laid out like ``/proc`` (``<pid>/stat``, ``<pid>/cgroup``) for :class:`HostProcReader`."""

from __future__ import annotations

from pathlib import Path


def stat_text(pid: int, start_time: int, comm: str = "python3") -> str:
    """A ``/proc/<pid>/stat`` line with ``start_time`` as field 22."""
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", *["0"] * 12, "20", "0", "8", "0"]
    fields[19] = str(start_time)
    return f"{pid} ({comm}) {' '.join(fields)} 123456 789\n"


class ProcTree:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def add(self, pid: int, cgroup: str, start_time: int = 1000) -> None:
        directory = self.root / str(pid)
        directory.mkdir(exist_ok=True)
        (directory / "stat").write_text(stat_text(pid, start_time))
        (directory / "cgroup").write_text(cgroup)

    def remove(self, pid: int) -> None:
        for name in ("stat", "cgroup"):
            (self.root / str(pid) / name).unlink(missing_ok=True)
        (self.root / str(pid)).rmdir()
