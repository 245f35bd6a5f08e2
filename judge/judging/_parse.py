"""Turning a model's reply into a validated verdict.

Steps, in order:

1. **Extract** a JSON object: the first fenced block (```json ... ``` or ``` ... ```) that
   holds a parseable object, else the first balanced ``{...}`` in the reply that parses
   (string-aware brace matching, so braces inside strings don't confuse it). Chatty text
   around the object is ignored.
2. **Normalise** (the only leniency, applied before strict validation):
   - keys: surrounding whitespace removed and lower-cased (``" Verdict"`` -> ``verdict``);
     two keys colliding after that is an error;
   - ``verdict``: a string is stripped and lower-cased; ``是``/``否`` map to ``yes``/``no``;
     anything else (``"relevant"``, ``true``, ``"yes."``) stays invalid;
   - ``grade``: a string holding one digit (``"2"``, ``" 3 "``) or an integral float (``2.0``)
     becomes an int; booleans, ``2.5`` and out-of-range values stay invalid;
   - ``reason``: a string is stripped.
3. **Validate** with the strict pydantic models :class:`LLMVerdict` / :class:`LLMGrade`:
   exactly the keys ``verdict``/``grade`` and ``reason``; extra or missing keys, a grade
   outside 0..3 or a non-string reason are errors.

Any failure raises :class:`VerdictParseError` whose message is short and meant to be shown to
the model in the re-ask turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from judge.judging._models import LLMGrade, LLMVerdict

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)
_VERDICT_ALIASES = {"yes": "yes", "no": "no", "是": "yes", "否": "no"}


class VerdictParseError(ValueError):
    """The reply holds no valid verdict; the message says why (in English, for the re-ask)."""


def _balanced_objects(text: str) -> Iterator[str]:
    """Every top-level balanced ``{...}`` substring, left to right (string-aware)."""
    i = 0
    n = len(text)
    while i < n:
        start = text.find("{", i)
        if start < 0:
            return
        depth = 0
        in_string = False
        escaped = False
        end = -1
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
                    end = j
                    break
        if end < 0:
            # Unbalanced from here on: try the next opening brace.
            i = start + 1
            continue
        yield text[start : end + 1]
        i = start + 1


def _first_object(text: str) -> dict[str, Any] | None:
    for candidate in _balanced_objects(text):
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply (fenced block first, else the first balanced object)."""
    if not text or not text.strip():
        raise VerdictParseError("the reply is empty")
    for match in _FENCE.finditer(text):
        found = _first_object(match.group(2))
        if found is not None:
            return found
    found = _first_object(text)
    if found is None:
        raise VerdictParseError("the reply contains no JSON object")
    return found


def _normalise_keys(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        norm = key.strip().lower()
        if norm in out:
            raise VerdictParseError(f"field '{norm}' appears twice")
        out[norm] = value
    return out


def _normalise_reason(obj: dict[str, Any]) -> None:
    if isinstance(obj.get("reason"), str):
        obj["reason"] = obj["reason"].strip()


def _describe(exc: ValidationError) -> str:
    parts: list[str] = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "reply"
        kind = err["type"]
        if kind == "extra_forbidden":
            parts.append(f"unexpected field '{loc}'")
        elif kind == "missing":
            parts.append(f"missing field '{loc}'")
        elif kind == "literal_error":
            parts.append(f'\'{loc}\' must be "yes" or "no"')
        elif loc == "grade":
            parts.append("'grade' must be an integer 0, 1, 2 or 3")
        elif loc == "reason":
            parts.append("'reason' must be a string")
        else:
            parts.append(f"'{loc}': {err['msg']}")
    return "; ".join(parts)


def parse_verdict(text: str) -> LLMVerdict:
    """A binary verdict ``{"verdict": "yes"|"no", "reason": "..."}`` from a reply."""
    obj = _normalise_keys(extract_json_object(text))
    verdict = obj.get("verdict")
    if isinstance(verdict, str):
        obj["verdict"] = _VERDICT_ALIASES.get(verdict.strip().lower(), verdict)
    _normalise_reason(obj)
    try:
        return LLMVerdict.model_validate(obj)
    except ValidationError as exc:
        raise VerdictParseError(_describe(exc)) from None


def parse_grade(text: str) -> LLMGrade:
    """A graded verdict ``{"grade": 0..3, "reason": "..."}`` from a reply."""
    obj = _normalise_keys(extract_json_object(text))
    grade = obj.get("grade")
    if (isinstance(grade, str) and re.fullmatch(r"\s*[0-9]\s*", grade)) or (
        isinstance(grade, float) and grade.is_integer()
    ):
        obj["grade"] = int(grade)
    _normalise_reason(obj)
    try:
        return LLMGrade.model_validate(obj)
    except ValidationError as exc:
        raise VerdictParseError(_describe(exc)) from None
