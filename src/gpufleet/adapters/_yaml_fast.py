"""YAML through yaml-rs (a Rust parser, 4-5x faster than libyaml) where it returns what PyYAML returns.

PyYAML's safe loader reads YAML 1.1; yaml-rs reads YAML 1.2. On the documents Kubernetes tools write
they agree, but not on everything (measured with yaml-rs 0.1.6): YAML 1.1 booleans (``yes``/``no``/
``on``/``off``), octal ``0755`` and ``012``, sexagesimal ``1:20``, exponents without a dot or sign
(``1e3``, ``1.0e3``), ``-.5``, ``_1``, ``09``, the value key ``=``, unquoted timestamps, ``<<`` merge
keys, ``!!binary``/``!!omap`` and custom tags, duplicate keys (an error to yaml-rs), collections as
keys, empty keys, block scalars holding only blank lines (``"\n"`` to yaml-rs, ``""`` to PyYAML), tabs,
the NEL and other YAML 1.1 line breaks, anchor names, document-end markers followed by bare
documents, and flow forms PyYAML refuses (``[x:]``, ``{a:?}``, ``{a: |}``, a flow collection or quoted
scalar going on past its line). yaml-rs also reads *quoted* timestamps as datetimes when
``parse_datetime`` is on (so it is off), and returns a lone document that is a list unwrapped.

The rule (PyYAML stays the reference, its results and messages): yaml-rs reads a text only when
none of these occurs in it (text searches at C speed, over the text's distinct lines where a form
lies within one line; cautious: they may send a text to PyYAML that yaml-rs would have read right,
never the reverse):

- ``!!``, a backslash, ``<<``, a tab, a character PyYAML's reader refuses or reads as a YAML 1.1 line
  break (NEL, U+2028, U+2029, a byte-order mark), a carriage return not before a line feed;
- a tag, anchor, alias, ``@`` or backtick where a node begins; a directive, a document-end marker, an
  explicit or empty key, a block scalar whose next line is not indented deeper than its header;
- a flow collection as a key, a quoted key followed by ``:`` without a space, and in a line holding a
  flow collection: more openers than closers, an odd number of quotes, ``:?``, ``::``, ``:`` before
  ``]``/``}``/``,``, ``|``, ``>``, ``:``, ``,`` or ``?`` beginning a scalar;
- a plain scalar that one of the two may read as other than a string, unless both read it the same:
  every spelling of true/false/null/yes/no/on/off/``~``/``=`` but ``true``, ``True``, ``TRUE``,
  ``false``, ``False``, ``FALSE``, ``null``, ``Null``, ``NULL`` and ``~``; every number-like token
  but plain decimal integers and decimals (``42``, ``-7``, ``0.5``); anything that begins like a date;

and yaml-rs raises nothing and returns as many documents as the text holds. Everything else goes to
PyYAML. ``tests/adapters/test_yaml_parsers.py`` holds the two to equal results on every YAML file of
the project, on the forms above and on random scalars (and an offline fuzzer of some 700,000 texts
found no difference left).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_FAST_DEPTH", "fast_available", "fast_documents", "fast_stack_bytes"]

try:
    import yaml_rs

    _loads: Callable[..., Any] | None = yaml_rs.loads
except ImportError:  # pragma: no cover - yaml-rs is a dependency; without its wheel PyYAML reads all
    _loads = None

# Stack per level of nesting that yaml-rs needs (measured: 670 to 790 bytes; doubled).
_BYTES_PER_LEVEL = 1536
_FLOW_LIMIT = 256
MAX_FAST_DEPTH = 170_000  # x 1,536 bytes: a 256 MiB thread stack at most

_END = r"(?=[ \t]*(?:[\r\n#,\]}]|:(?:[ \t\r\n]|$)|$))"  # where a plain scalar may end
_AGREED_WORDS = r"(?:true|True|TRUE|false|False|FALSE|null|Null|NULL|~)"
_DECIMAL = r"[-+]?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?"
# A plain scalar the two parsers may read differently, from its first character on.
_SCALAR = (
    r"(?=[-+._0-9~=tTfFnNyYoO])(?:"
    # words: YAML 1.1 booleans, null spellings, the value key "="
    rf"(?!{_AGREED_WORDS}{_END})(?i:true|false|null|yes|no|on|off|~|=){_END}"
    # numbers other than plain decimals: octal, hex, binary, sexagesimal, exponents, underscores
    rf"|(?!{_DECIMAL}{_END})[-+]?(?:0[xXoObB][0-9a-fA-F_]*|[0-9_:]+(?:\.[0-9_]*)?|\.[0-9_]+)(?:[eE][-+]?[0-9_]*)?{_END}"
    rf"|[-+]?\.(?i:inf|nan){_END}"
    r"|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"  # a date or a timestamp
    r")"
)
_FIRST_SCALAR = re.compile(_SCALAR)
# after white space or a flow indicator: where a plain scalar may begin
_LATER_SCALAR = re.compile(r"[\s\[{,]" + _SCALAR)


def _node_start(indicator: str) -> re.Pattern[str]:
    """``indicator`` where a node begins: a line's start, after an indicator, a flow opener or ``---``."""
    return re.compile(r"(?:^[ \t]*|[-?:][ \t]+|[\[{,][ \t]*|---[ \t]+)" + indicator, re.MULTILINE)


# Rare forms, each looked for only when a character it needs occurs (a str search is at memchr speed),
# in the distinct lines of the text (all these forms lie within one line).
_RARE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("%", re.compile(r"^%", re.MULTILINE)),  # a directive
    ("...", re.compile(r"^\.\.\.(?=[ \t\r\n]|$)", re.MULTILINE)),  # a document-end marker
    ("?", re.compile(r"(?:^|(?<=[\s\[{,]))\?(?=[ \t\r\n\],}]|$)", re.MULTILINE)),  # an explicit key
    ('":', re.compile(r"\":[^ \t\r\n]")),  # JSON-like "key":value
    ("':", re.compile(r"':[^ \t\r\n]")),
    (":", re.compile(r"(?:^|[\[{,?]|[-:][ \t])[ \t]*:(?=[ \t\r\n,\]}]|$)", re.MULTILINE)),  # an empty key
    # flow collections: one as a key; ":" after a scalar right before "]", "}" or ","; ":", ",", "|" or
    # ">" beginning a scalar (PyYAML refuses all these, yaml-rs reads some)
    ("]", re.compile(r"\][ \t]*:")),
    ("}", re.compile(r"}[ \t]*:")),
    (":", re.compile(r":[\],}]")),
    ("[", re.compile(r"\[[ \t]*[:,|>]")),
    ("{", re.compile(r"{[ \t]*[:,|>]")),
    (",", re.compile(r",[ \t]*[:,|>]")),
    # where a node begins (a line's start, after an indicator or a flow opener): a tag, an anchor, an
    # alias, a reserved indicator ("a: x != y && z" is a plain scalar to both)
    ("!", _node_start("!")),
    ("&", _node_start("&")),
    ("*", _node_start(r"\*")),
    ("@", _node_start("@")),
    ("`", _node_start("`")),
)
# Forms that span lines, looked for in the whole text: a block scalar whose next line is not indented
# deeper than the header's line (no content, or blank lines only), a carriage return alone.
_BLOCK_EMPTY = re.compile(r"^([ \t]*)(?:[^\n]*[ \t])?[|>][-+0-9]*[ \t]*(?:#[^\n]*)?\r?(?:\n|\Z)(?!\1[ \t]+[^ \t\r\n])",
                          re.MULTILINE)
_LONE_CR = re.compile(r"\r(?!\n)")
# characters PyYAML refuses or reads as YAML 1.1 line breaks (NEL, LS, PS), a byte-order mark
_UNSAFE_CHAR = re.compile("[^\t\n\r\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
_UNSAFE_ASCII = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_UNSAFE_STRINGS = ("!!", "\\", "<<", "\t")  # a standard tag, an escape, a merge key, a tab
_MARKER = re.compile(r"^---(?=[ \t\r\n]|$)", re.MULTILINE)
_CONTENT = re.compile(r"^[ \t]*[^ \t\r\n#]", re.MULTILINE)


def fast_available() -> bool:
    return _loads is not None


def fast_stack_bytes(longest_line: int, flow: int) -> int:
    """The thread stack yaml-rs needs for a text with this longest line and this many non-empty flow
    collections (it refuses flow collections nested deeper than 256); 0 when that is more than
    :data:`MAX_FAST_DEPTH` levels deep (PyYAML then reads the text)."""
    bound = 3 * longest_line + 2 * min(flow, _FLOW_LIMIT) + 8
    return 0 if bound > MAX_FAST_DEPTH else bound * _BYTES_PER_LEVEL


def _markers(text: str) -> int:
    """How many lines are ``---`` document markers (``---`` then white space or the line's end)."""
    starts = text.count("\n---") + text.startswith("---")
    quick = sum(text.count("\n---" + after) for after in ("\n", " ", "\t", "\r")) + text.endswith("\n---")
    if text.startswith("---"):
        quick += len(text) == 3 or text[3] in " \t\r\n"
    if quick == starts:
        return quick
    return len(_MARKER.findall(text))  # "----" lines, or "---" lines one after another


def _document_count(text: str) -> int:
    """How many documents the text holds: one per ``---`` marker, and one before the first marker
    when something other than comments stands there (directives send the text to PyYAML)."""
    first = _MARKER.search(text)
    if first is None:
        return 1 if _CONTENT.search(text) else 0
    return _markers(text) + (1 if _CONTENT.search(text, 0, first.start()) else 0)


# In a line with a flow collection, quoted scalars left out: ":" followed by "?" or ":", "|", ">", ":" or "?"
# beginning a value, "?" beginning a scalar (PyYAML refuses the first two, for it no plain scalar in a flow
# collection begins with "?" or ":"; it reads the last as an explicit key).
_FLOW_LINE = re.compile(r":[?:]|:[ \t]+[|>:?]|[\[{,][ \t]*\?")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _unsafe_flow(lines: set[str]) -> bool:
    """Whether a line with a flow collection may differ: the collection (or a quoted scalar in it) goes on
    past the line's end, or :data:`_FLOW_LINE` holds."""
    for line in lines:
        if "[" in line or "{" in line:
            if line.count("[") + line.count("{") > line.count("]") + line.count("}"):
                return True
            if line.count('"') % 2 or line.count("'") % 2:
                return True
            bare = _QUOTED.sub("''", line)
            if _FLOW_LINE.search(bare) or _collection_key(bare):
                return True
    return False


def _collection_key(line: str) -> bool:
    """Whether a flow collection stands where a key of a flow mapping begins (``{[1]}``, ``{a, {b: c}}``):
    PyYAML refuses a collection as a key, yaml-rs makes it a tuple or frozenset."""
    stack: list[str] = []
    previous = ""
    for char in line:
        if char in "[{":
            if stack and stack[-1] == "{" and previous in "{,":
                return True
            stack.append(char)
        elif char in "]}" and stack:
            stack.pop()
        if char not in " \t":
            previous = char
    return False


def _unsafe(text: str, lines: list[str]) -> bool:
    """Whether the rule above sends ``text`` (split at line feeds into ``lines``) to PyYAML."""
    distinct_lines = set(lines)
    if _unsafe_flow(distinct_lines):
        return True
    distinct = "\n".join(distinct_lines)  # a snapshot repeats most of its lines: a tenth of it is left
    if any(string in distinct for string in _UNSAFE_STRINGS):
        return True
    if (_UNSAFE_ASCII if text.isascii() else _UNSAFE_CHAR).search(distinct):
        return True
    if any(needle in distinct and pattern.search(distinct) for needle, pattern in _RARE):
        return True
    if ("|" in distinct or ">" in distinct) and _BLOCK_EMPTY.search(text):
        return True
    if "\r" in distinct and _LONE_CR.search(text):
        return True
    return bool(_FIRST_SCALAR.match(distinct) or _LATER_SCALAR.search(distinct))


def fast_documents(text: str, lines: list[str] | None = None) -> list[Any] | None:
    """The documents of ``text`` as PyYAML's safe loader returns them, read by yaml-rs; None when
    the rule above sends the text to PyYAML (or yaml-rs is not installed). ``lines``: the text split
    at line feeds, when the caller has it already."""
    if _loads is None or _unsafe(text, text.split("\n") if lines is None else lines):
        return None
    try:
        value: Any = _loads(text, parse_datetime=False)
    except Exception:  # YAMLDecodeError (PyYAML words the message) and anything unforeseen
        return None
    count = _document_count(text)
    if count == 0:
        return [] if value is None else None
    if count == 1:
        return [value]
    if isinstance(value, list) and len(value) == count:
        return value
    return None
