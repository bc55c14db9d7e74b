"""Image references as the runtime reads them, and the glob patterns of Projects."""

from __future__ import annotations

import pytest

from gpufleet.policy import glob_matches, normalize_image, pattern_problem
from gpufleet.policy.images import image_matches

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(("reference", "normalised"), [
    ("ubuntu", "docker.io/library/ubuntu:latest"),
    ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
    ("foo/bar:1", "docker.io/foo/bar:1"),
    ("docker.io/foo/bar", "docker.io/foo/bar:latest"),
    ("index.docker.io/foo/bar:2", "docker.io/foo/bar:2"),
    ("docker.io/ubuntu", "docker.io/library/ubuntu:latest"),
    (f"ghcr.io/acme/x@{DIGEST}", f"ghcr.io/acme/x@{DIGEST}"),
    (f"ghcr.io/acme/x:1@{DIGEST}", f"ghcr.io/acme/x:1@{DIGEST}"),
    ("localhost:5000/x", "localhost:5000/x:latest"),
    ("localhost/x:3", "localhost/x:3"),
    ("registry.local:5000/a/b/c:v1.2", "registry.local:5000/a/b/c:v1.2"),
    ("Acme/x", "Acme/x:latest"),  # an upper-case first component is a registry, as Docker reads it
])
def test_references_are_read_as_the_runtime_reads_them(reference: str, normalised: str) -> None:
    ref = normalize_image(reference)
    assert ref is not None and str(ref) == normalised


@pytest.mark.parametrize("reference", [
    "", " ubuntu", "ubuntu ", "UBUNTU", "ghcr.io/Acme/x", "x@sha256:short", "x:", "x:" + "t" * 200,
    "ghcr.io/acme/x@md5", "-x", "a//b", "ghcr.io/", "ghcr.io:notaport/x",
])
def test_invalid_references_are_none(reference: str) -> None:
    assert normalize_image(reference) is None


@pytest.mark.parametrize(("pattern", "text", "matches"), [
    ("ghcr.io/acme/*", "ghcr.io/acme/x", True),
    ("ghcr.io/acme/*", "ghcr.io/acme/x/y", False),  # * stays within a path segment
    ("ghcr.io/acme/**", "ghcr.io/acme/x/y:1", True),
    ("ghcr.io/acme/x", "ghcr.io/acme/xy", False),
    ("ghcr.io/acme/x.y", "ghcr.io/acme/xzy", False),  # every other character stands for itself
    ("team-a-*", "team-a-data", True),
    ("team-a-*", "team-b-data", False),
    ("**", "", True),
])
def test_globs(pattern: str, text: str, matches: bool) -> None:
    assert glob_matches(pattern, text) is matches


def test_a_pattern_matches_the_whole_reference_or_its_name() -> None:
    ref = normalize_image("ghcr.io/acme/x:1")
    assert ref is not None
    assert image_matches("ghcr.io/acme/x", ref)  # the name: any tag
    assert image_matches("ghcr.io/acme/x:1", ref)  # a pinned tag
    assert not image_matches("ghcr.io/acme/x:2", ref)
    assert image_matches("ghcr.io/acme/*", ref)
    assert not image_matches("ghcr.io/*", ref)


@pytest.mark.parametrize(("pattern", "problem"), [
    ("", "must not be empty"),
    ("ghcr.io/ acme", "must not contain white space, got 'ghcr.io/ acme'"),
    ("ghcr.io/***", "'***' is not a glob ('*': within one path segment, '**': across segments), got 'ghcr.io/***'"),
    ("ghcr.io/**", None),
])
def test_pattern_problems(pattern: str, problem: str | None) -> None:
    assert pattern_problem(pattern) == problem
