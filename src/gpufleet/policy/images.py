"""Image references as the container runtime reads them, and the glob patterns a Project's
``images`` and ``volumes.claimNames`` are written in (docs/semantics-notes.md, "Projects").

Pure: the admission webhook and ``gpufleet policy check`` ask the same functions.

A reference is normalised as Docker's ``reference.ParseNormalizedNamed`` does, then tagged
``latest`` when it names neither a tag nor a digest, because that is the image the kubelet pulls:

- ``ubuntu`` -> ``docker.io/library/ubuntu:latest``;
- ``foo/bar:1`` -> ``docker.io/foo/bar:1``;
- ``index.docker.io/foo/bar`` -> ``docker.io/foo/bar:latest``;
- ``ghcr.io/acme/x@sha256:<hex>`` -> unchanged (a digest, no tag added);
- ``localhost:5000/x`` -> ``localhost:5000/x:latest`` (a first component with ``.`` or ``:`` or
  ``localhost`` is a registry).

A pattern matches a reference when it matches the whole normalised reference
(``registry/repository[:tag][@digest]``) or its name alone (``registry/repository``): ``*`` is any
run of characters other than ``/``, ``**`` any run, every other character stands for itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "ImageRef",
    "glob_matches",
    "normalize_image",
    "pattern_problem",
]

DEFAULT_REGISTRY = "docker.io"
_LEGACY_REGISTRY = "index.docker.io"
OFFICIAL_PREFIX = "library/"

# The grammar of github.com/distribution/reference (regexp.go), anchored.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_PATH = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}")
_MAX_NAME = 255


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A normalised image reference: ``name`` is ``registry/repository``."""

    name: str
    tag: str | None = None
    digest: str | None = None

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text


def normalize_image(reference: str) -> ImageRef | None:
    """The reference the runtime pulls for ``reference`` (see the module docstring); None when it
    is not a valid image reference."""
    rest, at, digest = reference.partition("@")
    if at and _DIGEST.fullmatch(digest) is None:
        return None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    tag: str | None = None
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1:]
        if _TAG.fullmatch(tag) is None:
            return None
    first, sep, remainder = rest.partition("/")
    if sep and (("." in first or ":" in first or first == "localhost") or first.lower() != first):
        registry, path = first, remainder
        if _DOMAIN.fullmatch(registry) is None:
            return None
    else:
        registry, path = DEFAULT_REGISTRY, rest
    if registry == _LEGACY_REGISTRY:
        registry = DEFAULT_REGISTRY
    if registry == DEFAULT_REGISTRY and "/" not in path:
        path = OFFICIAL_PREFIX + path
    if _PATH.fullmatch(path) is None or len(registry) + 1 + len(path) > _MAX_NAME:
        return None
    if tag is None and not at:
        tag = "latest"
    return ImageRef(f"{registry}/{path}", tag, digest if at else None)


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a usable glob (None: it is): empty, with white space, or ``***``."""
    if not pattern:
        return "must not be empty"
    if any(ch.isspace() for ch in pattern):
        return f"must not contain white space, got {pattern!r}"
    if "***" in pattern:
        return f"'***' is not a glob ('*': within one path segment, '**': across segments), got {pattern!r}"
    return None


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts), re.DOTALL)


def glob_matches(pattern: str, text: str) -> bool:
    """Whether ``text`` matches ``pattern`` as a whole (``*``: no ``/``; ``**``: anything)."""
    return _compiled(pattern).fullmatch(text) is not None


def image_matches(pattern: str, image: ImageRef) -> bool:
    """Whether ``pattern`` matches the whole reference or its name alone."""
    return glob_matches(pattern, str(image)) or glob_matches(pattern, image.name)
