"""gpufleet: a gang-aware, quota-aware GPU scheduler for shared Kubernetes clusters."""

__version__ = "0.1.0"
