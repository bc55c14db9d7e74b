"""Reading a live cluster for people: ``gpufleet snapshot`` and ``gpufleet explain``."""
