"""Sub-commands of ``gpufleet`` beyond replay and bench, one module per group."""
