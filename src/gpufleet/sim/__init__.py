"""Simulator: virtual-time runs of workload traces through the engine (the same ``schedule``)."""
