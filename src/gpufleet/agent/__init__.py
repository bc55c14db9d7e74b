"""The node agent: what runs on each GPU node (docs/architecture.md).

- :mod:`gpufleet.agent.gpus`: the node's GPUs (the :class:`~gpufleet.agent.gpus.GpuReader` port and
  its NVML adapter, the only place NVML is imported);
- :mod:`gpufleet.agent.discovery`: the Node labels and annotations the GPUs call for (pure), and the
  patch that writes them;
- :mod:`gpufleet.agent.deviceplugin`: ``gpufleet device-plugin``, the kubelet device plugin (the only
  place gRPC is imported);
- :mod:`gpufleet.agent.service`: ``gpufleet agent``'s loop, which keeps the Node true to its GPUs
  (discovery labels, unhealthy GPUs, the ``GPUHealthy`` condition, Events; docs/agent.md).

The rooms are imported by their names; this face imports nothing, so that a command that does not
run on a node pays nothing for them.
"""

__all__: list[str] = []
