"""Turning a model's reply into a validated verdict: strict on the verdict, lenient on extras.

Steps, in order:

1. **Extract** a JSON object (:func:`judge.backends._json.first_json_object`, the one
   extraction of the package): the first fenced block (```json ... ``` or ``` ... ```) that
   holds a parseable object, else the first balanced ``{...}`` in the reply that parses.
   Chatty text around the object is ignored.
2. **Normalise** (applied before validation):
   - keys: surrounding whitespace removed and lower-cased (``" Verdict"`` -> ``verdict``);
     two keys colliding after that is an error;
   - ``verdict``: a string is stripped and lower-cased; ``是``/``否`` map to ``yes``/``no``;
     anything else (``"relevant"``, ``true``, ``"yes."``) stays invalid;
   - ``grade``: a string holding one digit (``"2"``, ``" 3 "``) or an integral float (``2.0``)
     becomes an int; booleans, ``2.5`` and out-of-range values stay invalid;
   - ``reason``: a string is stripped; null or missing is the empty reason.
3. **Validate** with :class:`LLMVerdict` / :class:`LLMGrade`: the verdict (or grade) is
   strict: missing, ``"maybe"`` or out of range is an error, so the reply is re-asked and
   finally recorded unjudged with its raw text. Harmless extras are not: unknown keys
   (``{"verdict": "no", "reason": "...", "grade": 0}``) are ignored for the verdict and
   kept in ``extras`` (the judging core keeps such a reply in the verdict's ``raw``).
   A reason that is neither a string nor null is an error.

Any failure raises :class:`VerdictParseError` whose message is short and meant to be shown to
the model in the re-ask turn. Listwise items go through :func:`verdict_from_object` /
:func:`grade_from_object`, the same rules on an already-extracted object.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from judge.backends import first_json_object
from judge.judging._models import LLMGrade, LLMVerdict

_VERDICT_ALIASES = {"yes": "yes", "no": "no", "是": "yes", "否": "no"}


class VerdictParseError(ValueError):
    """The reply holds no valid verdict; the message says why (in English, for the re-ask)."""


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply (fenced block first, else the first balanced object)."""
    if not text or not text.strip():
        raise VerdictParseError("the reply is empty")
    found = first_json_object(text)
    if found is None:
        raise VerdictParseError("the reply contains no JSON object")
    return found


def _normalise_keys(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        norm = str(key).strip().lower()
        if norm in out:
            raise VerdictParseError(f"field '{norm}' appears twice")
        out[norm] = value
    return out


def _normalise_reason(obj: dict[str, Any]) -> None:
    if isinstance(obj.get("reason"), str):
        obj["reason"] = obj["reason"].strip()


def _describe(exc: ValidationError, obj: dict[str, Any]) -> str:
    parts: list[str] = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "reply"
        kind = err["type"]
        if kind == "missing":
            # Name the keys the model wrote instead: "relevant" for "verdict" is the usual slip.
            others = [k for k in obj if k not in (loc, "reason")]
            hint = "".join(f" (unexpected field '{k}')" for k in others)
            parts.append(f"missing field '{loc}'{hint}")
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
    return verdict_from_object(extract_json_object(text))


def parse_grade(text: str) -> LLMGrade:
    """A graded verdict ``{"grade": 0..3, "reason": "..."}`` from a reply."""
    return grade_from_object(extract_json_object(text))


def verdict_from_object(raw: dict[str, Any]) -> LLMVerdict:
    """:func:`parse_verdict` on an object already extracted (e.g. one listwise item)."""
    obj = _normalise_keys(raw)
    verdict = obj.get("verdict")
    if isinstance(verdict, str):
        obj["verdict"] = _VERDICT_ALIASES.get(verdict.strip().lower(), verdict)
    _normalise_reason(obj)
    try:
        return LLMVerdict.model_validate(obj)
    except ValidationError as exc:
        raise VerdictParseError(_describe(exc, obj)) from None


def grade_from_object(raw: dict[str, Any]) -> LLMGrade:
    """:func:`parse_grade` on an object already extracted (e.g. one listwise item)."""
    obj = _normalise_keys(raw)
    grade = obj.get("grade")
    if (isinstance(grade, str) and re.fullmatch(r"\s*[0-9]\s*", grade)) or (
        isinstance(grade, float) and grade.is_integer()
    ):
        obj["grade"] = int(grade)
    _normalise_reason(obj)
    try:
        return LLMGrade.model_validate(obj)
    except ValidationError as exc:
        raise VerdictParseError(_describe(exc, obj)) from None
