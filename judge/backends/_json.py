"""Finding the JSON object in a model's reply: the one extraction the whole package uses.

Models wrap their JSON in Markdown fences, chat around it, or write an example object
before the real one. :func:`json_objects` yields every candidate object in the order it
should be tried:

1. the objects inside fenced blocks (```json ... ```, ``` ... ```, any info string, any
   case), block by block;
2. then the objects of the whole reply, left to right.

Within one text, a candidate is every balanced ``{...}`` substring that ``json.loads``
reads as an object, in order of its opening brace (so an outer object comes before the
objects nested in it; brace matching is string-aware, so braces inside strings don't
confuse it). Judging takes the first candidate (:func:`first_json_object`); the deepeval
adapter takes the first that validates against its schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["first_json_object", "json_objects"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)


def _balanced(text: str) -> Iterator[str]:
    """Every balanced ``{...}`` substring, by position of its opening brace (string-aware)."""
    n = len(text)
    start = text.find("{")
    while start >= 0:
        depth = 0
        in_string = False
        escaped = False
        for j in range(start, n):
            ch = text[j]
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    yield text[start : j + 1]
                    break
        start = text.find("{", start + 1)


def _objects(text: str) -> Iterator[dict[str, Any]]:
    for candidate in _balanced(text):
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            yield value


def json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object candidate in ``text``: fenced blocks first, then the whole text."""
    for match in _FENCE.finditer(text):
        yield from _objects(match.group(2))
    yield from _objects(text)


def first_json_object(text: str) -> dict[str, Any] | None:
    """The first candidate of :func:`json_objects`, or None when the text holds none."""
    if "```" not in text:
        # The usual reply is one bare object. With no fence, the first candidate starts at
        # the first brace; when the whole (stripped) reply parses as an object, that brace's
        # match is the last character, so the candidate is the whole reply: parse it once
        # instead of scanning it brace by brace first.
        stripped = text.strip()
        if stripped.startswith("{") and stripped.endswith("}"):
            try:
                value = json.loads(stripped)
            except json.JSONDecodeError:
                value = None
            if isinstance(value, dict):
                return value
    return next(json_objects(text), None)
