"""Process-wide test settings, read before any test module is imported."""

import os

# gRPC (the device plugin's tests) runs threads of its own; with its fork support on, a test that starts a
# subprocess after a gRPC test has run crashes the interpreter. Nothing in the tests forks without exec.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

# Hypothesis draws the same examples on every run (CI replays what was run here); HYPOTHESIS_PROFILE=explore
# draws fresh ones, to look for counterexamples on purpose.
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
