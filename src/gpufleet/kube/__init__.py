"""Kubernetes integration: CRDs, controller, webhook, snapshots of a live cluster."""
