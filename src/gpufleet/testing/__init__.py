"""Test doubles that the tests and the scripts share; production code never imports them (an
import-linter contract says so).

- :mod:`gpufleet.testing.fake_cluster`: the one in-memory fake of the API port
  (:class:`~gpufleet.kube.client.port.ClusterApi`): :class:`FakeCluster` (the store, with fault
  injection and a call log), :class:`FakeClient` (one caller's port) and :class:`VirtualClock`.
- :mod:`gpufleet.testing.fake_gpus`: :class:`FakeGpuReader`, the fake of the node agent's GPU port
  (:class:`~gpufleet.agent.gpus.GpuReader`), with a contract test against the NVML reader.
- :mod:`gpufleet.testing.fake_nvml`: :class:`FakeNvml`, used in place of the ``pynvml`` module by the
  NVML reader (Xid storms, lost GPUs, MIG reconfiguration, NVLink topologies, process samples), with a
  contract test against nvidia-ml-py's definitions (tests/testing/test_fake_nvml.py).
- :mod:`gpufleet.testing.emulator`: the same store behind a real HTTP API server (kmock), for the
  contract tests of the lightkube adapter and for ``scripts/bench_controller.py``. kmock is a dev
  dependency (``pip install gpufleet[dev]``), so the emulator is imported by its module name only,
  never from here.

Every fake keeps a contract test against the real protocol: the controller's scenarios run over
:class:`FakeCluster` and, through lightkube, over the emulator (tests/kube/controller), and
``gpufleet snapshot`` reads the same objects through both (tests/kube/inspect).
"""

from gpufleet.testing.fake_cluster import FakeClient, FakeCluster, VirtualClock, merge_patch
from gpufleet.testing.fake_gpus import FakeGpuReader, fake_gpus
from gpufleet.testing.fake_nvml import FakeNvml

__all__ = ["FakeClient", "FakeCluster", "FakeGpuReader", "FakeNvml", "VirtualClock", "fake_gpus", "merge_patch"]
