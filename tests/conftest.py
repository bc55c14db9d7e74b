"""Process-wide test settings, read before any test module is imported."""

import os

# gRPC (the device plugin's tests) runs threads of its own; with its fork support on, a test that starts a
# subprocess after a gRPC test has run crashes the interpreter. Nothing in the tests forks without exec.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
