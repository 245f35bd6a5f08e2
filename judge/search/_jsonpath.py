"""A small JSONPath-like reader for engine responses: ``hits.hits[*]._id``,
``response.docs[*].id``, ``data[0].results[*].url``, ``$.items[*]['id']`` is not needed:
dotted keys, ``[n]`` indexes and ``[*]`` wildcards (a leading ``$.`` is allowed)."""

from __future__ import annotations

import re
from typing import Any

_STEP = re.compile(r"\[(\*|-?\d+)\]|\.?([^.\[\]]+)")


class PathNotFound(LookupError):
    """The response has no value at the path (a missing key, not an empty list)."""


def parse_path(path: str) -> list[str | int | None]:
    """``hits.hits[*]._id`` as ``["hits", "hits", None, "_id"]`` (None: every item)."""
    text = path.strip()
    if text.startswith("$"):
        text = text[1:]
    steps: list[str | int | None] = []
    pos = 0
    while pos < len(text):
        m = _STEP.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot read the path {path!r} at {text[pos:]!r}")
        if m.group(1) is not None:
            steps.append(None if m.group(1) == "*" else int(m.group(1)))
        else:
            steps.append(m.group(2))
        pos = m.end()
    if not steps:
        raise ValueError(f"an empty path {path!r}")
    return steps


def select(data: Any, steps: list[str | int | None]) -> list[Any]:
    """Every value at the path, in document order. Raises :class:`PathNotFound` when a key
    is missing before any wildcard (the mapping is wrong); below a wildcard a missing key
    gives None for that item (one hit without the field)."""
    current: list[Any] = [data]
    under_wildcard = False
    for step in steps:
        nxt: list[Any] = []
        for item in current:
            if step is None:
                if not isinstance(item, list):
                    if under_wildcard and item is None:
                        continue
                    raise PathNotFound(f"expected a list at [*], got {type(item).__name__}")
                nxt.extend(item)
            elif isinstance(step, int):
                if isinstance(item, list) and -len(item) <= step < len(item):
                    nxt.append(item[step])
                elif under_wildcard:
                    nxt.append(None)
                else:
                    raise PathNotFound(f"no item [{step}]")
            elif isinstance(item, dict) and step in item:
                nxt.append(item[step])
            elif under_wildcard:
                nxt.append(None)
            else:
                raise PathNotFound(f"no key {step!r}")
        if step is None:
            under_wildcard = True
        current = nxt
    return current
