"""Where the kubelet's device plugins live (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/constants.go),
in a module of its own so that the command's options need neither gRPC nor the generated code."""

from __future__ import annotations

__all__ = ["DEFAULT_KUBELET_DIR"]

DEFAULT_KUBELET_DIR = "/var/lib/kubelet/device-plugins"
