"""What installs gpufleet in a cluster: the CRDs, the RBAC rules and the rendered manifests."""
