"""How deep a config file's values nest: bounded before anything walks them.

Python's TOML parser reads an array or inline table by recursion, and a 20,000-deep one
raises RecursionError, not a TOML error. Tables nested by dotted keys or headers
(``[a.b.c...]``) parse without recursion but come out as deep dicts, which repr, equality
and every reader of the settings would walk by recursion. So the text is measured before it
is parsed, and the parsed document before it is read: either deeper than any reaper file
needs is refused in one line. Both walks are loops.
"""

from __future__ import annotations

import re
from typing import Any

from reaper.config.values import shown

# The deepest a reaper file needs is 6: [sweeps.NAME] > rule > [[...]] > where > column >
# [values]. Deeper is a mistake or an attack; past a few hundred the parser would fail.
MAX_DEPTH = 16


class TooDeep(ValueError):
    """A value nests deeper than :data:`MAX_DEPTH`."""


def check_text(text: str) -> None:
    """Refuse TOML text that nests deeper than :data:`MAX_DEPTH`: arrays and inline tables
    (``[`` and ``{``), or a dotted key (``a.b.c``, in a key or a table header) of more
    parts. Only what is outside strings and comments counts; a table header (``[a]``,
    ``[[a]]``) counts as one or two levels that close on its line.

    A dotted key is refused before it is parsed, not after: the parser takes time that grows
    with the square of its parts (20 s for 20,000).

    Raises:
        TooDeep: with the line where the bound is passed.
    """
    depth, parts, i = 0, 1, 0
    while (mark := _MARK.search(text, i)) is not None:
        ch, i = mark.group(), mark.start()
        if ch == "#":
            i = text.find("\n", i)
            if i < 0:
                return
            continue
        if ch in "\"'":
            i = _string_end(text, i)
            continue
        if ch == ".":
            # A float (1.5) or a time's fraction has one dot between two separators.
            parts += 1
            if parts > MAX_DEPTH:
                raise TooDeep(f"line {_line(text, i)}: a dotted key nests deeper than {MAX_DEPTH}")
        else:
            parts = 1
            if ch in "[{":
                depth += 1
                if depth > MAX_DEPTH:
                    raise TooDeep(
                        f"line {_line(text, i)}: arrays or inline tables nest deeper than "
                        f"{MAX_DEPTH}"
                    )
            elif ch in "]}":
                depth = max(0, depth - 1)
        i += 1


def _line(text: str, i: int) -> int:
    return text.count("\n", 0, i) + 1


# What the scan stops at: a comment, a string, a bracket, a dot, and what ends a dotted key.
_MARK = re.compile(r"[#\"'\[\]{}.=,\n]")
# The end of each kind of string (an escape is skipped in a basic one); a one-line string
# ends at a newline too (the parser reports it). A multi-line string may end with up to two
# more quotes than its delimiter.
_STRING_END = {
    '"': re.compile(r'\\.|["\n]', re.DOTALL),
    "'": re.compile(r"['\n]"),
    '"""': re.compile(r'\\.|"""(?:"{0,2})', re.DOTALL),
    "'''": re.compile(r"'''(?:'{0,2})"),
}


def _string_end(text: str, start: int) -> int:
    """The index just past the string that starts at ``start``; the text's end when it has
    none."""
    quote = text[start] * 3 if text.startswith(text[start] * 3, start) else text[start]
    end = _STRING_END[quote]
    i = start + len(quote)
    while (found := end.search(text, i)) is not None:
        if found.group().startswith("\\"):
            i = found.end()
            continue
        return found.end()
    return len(text)


def check_value(value: Any) -> None:
    """Refuse a parsed document whose tables and arrays nest deeper than :data:`MAX_DEPTH`.

    Raises:
        TooDeep: naming the first keys of the path that goes too deep.
    """
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(value, 0, ())]
    while stack:
        node, depth, trail = stack.pop()
        if depth > MAX_DEPTH:
            raise TooDeep(f"{'.'.join(trail)}... nests deeper than {MAX_DEPTH}")
        children = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in children:
            # Only containers (a TOML document's are dicts and lists) go on the stack; the
            # trail names the first keys of a path.
            if isinstance(child, dict | list):
                stack.append((child, depth + 1, trail if len(trail) >= 3 else (*trail, _key(key))))


def _key(key: Any) -> str:
    """A key as an error names it: bare when it is a plain name, else quoted (shown)."""
    text = str(key)
    return text if text.isidentifier() and len(text) <= 40 else shown(text)
