"""The :class:`ProcReader` port (a process's ``stat`` and ``cgroup`` texts) and its one adapter,
:class:`HostProcReader`, over a proc file system mounted at a configurable root.

NVML names processes by their PIDs in the host's PID namespace, so the agent reads the host's proc
file system: with ``hostPID: true`` that is ``/proc``; otherwise the DaemonSet mounts the host's
``/proc`` (a ``hostPath``) elsewhere, e.g. ``/host/proc``, and passes that root. The tests run the
adapter on directories laid out like ``/proc`` with recorded texts (and on this machine's ``/proc``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

__all__ = ["DEFAULT_PROC_ROOT", "HostProcReader", "ProcReader"]

DEFAULT_PROC_ROOT = "/proc"


class ProcReader(Protocol):
    """Reads one process's files; ``None`` when the process is gone or its file cannot be read
    (it may end between NVML's answer and the read: never an error)."""

    def stat(self, pid: int) -> str | None:
        """The text of ``<root>/<pid>/stat``."""
        ...

    def cgroup(self, pid: int) -> str | None:
        """The text of ``<root>/<pid>/cgroup``."""
        ...


class HostProcReader:
    """:class:`ProcReader` over the proc file system at ``root`` (default ``/proc``)."""

    def __init__(self, root: str | Path = DEFAULT_PROC_ROOT) -> None:
        self.root = str(root).rstrip("/") or "/"

    def _read(self, pid: int, name: str) -> str | None:
        try:
            with open(f"{self.root}/{pid}/{name}", "rb") as file:
                return file.read(65536).decode("utf-8", errors="replace")
        except OSError:  # gone (ENOENT, ESRCH), not ours to read (EACCES), or no such root
            return None

    def stat(self, pid: int) -> str | None:
        return self._read(pid, "stat")

    def cgroup(self, pid: int) -> str | None:
        return self._read(pid, "cgroup")
