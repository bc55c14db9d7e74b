"""Parse YAML text into Python objects, safely (private to the adapters): with yaml-rs where it
returns what PyYAML returns (the rule is in :mod:`gpufleet.adapters._yaml_fast`), else with libyaml.

libyaml's composer (``yaml.CSafeLoader``) recurses in C once per level of nesting: a document
nested some 20,000 levels deep overflows an 8 MiB stack and kills the process with a segmentation
fault, which no ``except`` can catch. So the text is parsed in a worker thread whose stack is sized
from a cheap upper bound on the nesting depth; when that bound is too large to be affordable, the
exact depth is measured first from the (iterative) event stream and deep documents are refused.
yaml-rs recurses in Rust the same way and is run in the same kind of thread, sized for its own
cost per level.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import yaml

from gpufleet.adapters._yaml_fast import fast_available, fast_documents, fast_stack_bytes
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
T = TypeVar("T")


def _longest_line_and_flow(text: str, lines: list[str]) -> tuple[int, int]:
    """The longest of ``lines`` (``text`` split at line feeds) and the number of non-empty flow
    collections, computed at C speed: an upper bound on the nesting depth of any node in ``text`` is
    3 x the first + 2 x the second + 8.

    Block collections nest only by indentation or by compact indicators (``- - x``, ``? - x``) on
    one line, and a block sequence may sit at its parent key's indentation: 3 x the longest line
    bounds that. Flow collections nest by ``[``/``{`` (each may hold one implicit single-pair
    mapping): twice their number, empty ones aside, bounds that.
    """
    longest = max(map(len, lines), default=0)
    flow = text.count("[") + text.count("{") - text.count("[]") - text.count("{}")
    return longest, max(flow, 0)


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


def _in_thread(work: Callable[[], T], stack: int) -> T:
    """``work()`` in a thread with a stack of ``stack`` bytes; what it raises is raised here."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as err:  # handed back to the calling thread below
            outcome.append(err)

    with _stack_lock:
        previous = threading.stack_size(stack)
        try:
            worker = threading.Thread(target=run, name="gpufleet-yaml", daemon=True)
            worker.start()
        finally:
            threading.stack_size(previous)
    worker.join()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    done: T = result
    return done


def parse_documents(text: str, source: str) -> list[Any]:
    """All YAML documents of ``text`` (None for empty ones); InputError for malformed YAML."""
    lines = text.split("\n")
    longest, flow = _longest_line_and_flow(text, lines)
    fast_stack = fast_stack_bytes(longest, flow) if fast_available() else 0
    if fast_stack:
        documents = _in_thread(lambda: fast_documents(text, lines), max(_MIN_STACK, fast_stack))
        if documents is not None:
            return documents
    bound = 3 * longest + 2 * flow + 8
    if bound * _BYTES_PER_LEVEL > _MAX_STACK:
        bound = _exact_depth(text, source)
        if bound > MAX_DEPTH:
            raise InputError(f"{source}: malformed YAML: nested more than {MAX_DEPTH} levels deep")
        bound += 8
    return _in_thread(lambda: _load_all(text, source), max(_MIN_STACK, bound * _BYTES_PER_LEVEL))
