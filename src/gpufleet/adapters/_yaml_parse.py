"""Parse YAML text into Python objects with libyaml, safely (private to the adapters).

libyaml's composer (``yaml.CSafeLoader``) recurses in C once per level of nesting: a document
nested some 20,000 levels deep overflows an 8 MiB stack and kills the process with a segmentation
fault, which no ``except`` can catch. So the text is parsed in a worker thread whose stack is sized
from a cheap upper bound on the nesting depth; when that bound is too large to be affordable, the
exact depth is measured first from the (iterative) event stream and deep documents are refused.
"""

from __future__ import annotations

import threading
from typing import Any

import yaml

from gpufleet.adapters.errors import InputError

__all__ = ["MAX_DEPTH", "parse_documents"]

try:
    _Loader: type[Any] = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader

MAX_DEPTH = 10_000  # Kubernetes objects nest a few dozen levels deep at most
_BYTES_PER_LEVEL = 768  # measured: about 260 (sequences) to 350 (mappings) bytes of C stack per level
_MIN_STACK = 16 * 1024 * 1024
_MAX_STACK = 256 * 1024 * 1024
_stack_lock = threading.Lock()


def _depth_bound(text: str) -> int:
    """An upper bound on the nesting depth of any node in ``text``, computed at C speed.

    Block collections nest only by indentation or by compact indicators (``- - x``, ``? - x``) on
    one line, and a block sequence may sit at its parent key's indentation: 3 x the longest line
    bounds that. Flow collections nest by ``[``/``{`` (each may hold one implicit single-pair
    mapping): twice their number, empty ones aside, bounds that.
    """
    longest = max(map(len, text.split("\n")), default=0)
    flow = text.count("[") + text.count("{") - text.count("[]") - text.count("{}")
    return 3 * longest + 2 * max(flow, 0) + 8


def _malformed(err: Exception, text: str, source: str) -> InputError:
    if isinstance(err, yaml.reader.ReaderError):
        line = text.count("\n", 0, err.position) + 1
        character = err.character if isinstance(err.character, int) else ord(err.character[:1] or "\0")
        return InputError(f"{source}: line {line}: malformed YAML: character #x{character:04x}: {err.reason}")
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        problem = err.problem or err.context or "invalid YAML"
        where = f"line {mark.line + 1}: " if mark is not None else ""
        return InputError(f"{source}: {where}malformed YAML: {problem}")
    if isinstance(err, RecursionError):
        return InputError(f"{source}: malformed YAML: nested too deeply")
    # yaml.YAMLError, or a constructor's ValueError (e.g. the timestamp 2026-13-45)
    return InputError(f"{source}: malformed YAML: {err}")


def _exact_depth(text: str, source: str) -> int:
    depth = deepest = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > deepest:
                    deepest = depth
                    if deepest > MAX_DEPTH:
                        break
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except Exception as err:
        raise _malformed(err, text, source) from None
    return deepest


def _load_all(text: str, source: str) -> list[Any]:
    try:
        return list(yaml.load_all(text, Loader=_Loader))
    except Exception as err:
        raise _malformed(err, text, source) from None


def parse_documents(text: str, source: str) -> list[Any]:
    """All YAML documents of ``text`` (None for empty ones); InputError for malformed YAML."""
    bound = _depth_bound(text)
    if bound * _BYTES_PER_LEVEL > _MAX_STACK:
        bound = _exact_depth(text, source)
        if bound > MAX_DEPTH:
            raise InputError(f"{source}: malformed YAML: nested more than {MAX_DEPTH} levels deep")
        bound += 8
    stack = max(_MIN_STACK, bound * _BYTES_PER_LEVEL)
    outcome: list[Any] = []

    def work() -> None:
        try:
            outcome.append(_load_all(text, source))
        except BaseException as err:  # handed back to the calling thread below
            outcome.append(err)

    with _stack_lock:
        previous = threading.stack_size(stack)
        try:
            worker = threading.Thread(target=work, name="gpufleet-yaml", daemon=True)
            worker.start()
        finally:
            threading.stack_size(previous)
    worker.join()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    documents: list[Any] = result
    return documents
