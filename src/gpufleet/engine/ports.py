"""Host ports in use per node (kube-scheduler's NodePorts filter), as counts over the node array.

A pod that asks for a host port (``containers[].ports[].hostPort``) cannot go to a node where a
bound pod uses the same port and protocol on the same host IP; the wildcard IP (``0.0.0.0``, what
an empty ``hostIP`` means) conflicts with every IP. Only pods that ask for host ports touch this:
one count array per (protocol, port) in use, made on first use, changed as pods bind and leave
(trial placements included, so a rollback gives the ports back).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.domain import WILDCARD_IP, HostPort
from gpufleet.engine.cluster import BoolArray, IntArray

__all__ = ["HostPorts", "describe_port"]

_ANY_IP = "*"  # key of the per-node count of a port's users over every IP


def describe_port(port: HostPort) -> str:
    protocol, ip, number = port
    return f"{number}/{protocol}" + ("" if ip == WILDCARD_IP else f" on {ip}")


class HostPorts:
    def __init__(self, n_nodes: int) -> None:
        self.n_nodes = n_nodes
        # (protocol, ip, port) -> users per node; ip ANY_IP counts the users of every IP
        self._used: dict[HostPort, IntArray] = {}

    def change(self, node: int, ports: Sequence[HostPort], by: int) -> None:
        """``by`` = 1: a pod with ``ports`` binds to ``node``; -1: it leaves."""
        for protocol, ip, number in ports:
            for key in ((protocol, _ANY_IP, number), (protocol, ip, number)):
                used = self._used.get(key)
                if used is None:
                    used = self._used[key] = np.zeros(self.n_nodes, dtype=np.int64)
                used[node] += by

    def free_mask(self, ports: Sequence[HostPort]) -> BoolArray:
        """Nodes where none of ``ports`` is in use."""
        mask = np.ones(self.n_nodes, dtype=np.bool_)
        for port in ports:
            mask &= ~self.conflicts(port)
        return mask

    def conflicts(self, port: HostPort) -> BoolArray:
        """Nodes where a bound pod uses ``port``: the same port and protocol on the same IP, or
        where either side binds every IP."""
        protocol, ip, number = port
        keys = [(protocol, _ANY_IP, number)] if ip == WILDCARD_IP else [(protocol, WILDCARD_IP, number), port]
        out = np.zeros(self.n_nodes, dtype=np.bool_)
        for key in keys:
            used = self._used.get(key)
            if used is not None:
                out |= used > 0
        return out
