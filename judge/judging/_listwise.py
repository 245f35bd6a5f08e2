"""Listwise judging: every passage of one query judged in one call, one verdict each.

Flow of :func:`judge_listwise`:

1. Render the listwise template (``listwise.<language>.v1`` in binary mode,
   ``listwise_graded.<language>.v1`` in graded mode, or the ``template`` given) with the
   query and the passages numbered 1..n, each inside ``<passage id="i">...</passage>``
   (``<passage>`` tags inside the text are defused exactly as in pointwise judging).
2. Ask once, with a JSON schema for ``{"verdicts": [{"id", "verdict"|"grade", "reason"}]}``
   whose array has exactly n items (backends with a grammar or JSON mode use it).
3. **Check** the reply: each id 1..n must appear exactly once with a valid verdict, parsed
   with the same normalisation as pointwise replies (:func:`verdict_from_object` /
   :func:`grade_from_object`). Ids outside 1..n, duplicated ids, missing ids and invalid items
   are listed in the error, which is sent back in a re-ask turn (up to ``max_reasks``
   times; default ``config.max_reasks``). Steps 2-3 are pointwise judging's own request
   builder and ask/re-ask loop (``_Asker.exchange`` in :mod:`judge.judging._core`), with
   the listwise schema, token budget and check.
4. The verdicts come from the **last** reply: passages it covers validly keep them; every
   other passage is judged **pointwise** with :func:`judge_passage` and the same
   ``config`` (and ``store``), and its index is listed in ``ListwiseResult.pointwise``.
   A listwise call that fails outright (a transient error after retries, or a permanent
   one such as a prompt longer than the model's context) sends every passage pointwise.

Accounting: each listwise verdict carries an equal share of the listwise calls' tokens,
cost and latency (integer token shares, the remainder on the first passages), so the sum
over verdicts equals the totals; ``attempts`` is 0 on those verdicts (the calls are counted
once, in ``ListwiseResult.listwise_calls``). ``ListwiseResult.calls`` is every backend
call made: listwise calls plus the pointwise fallbacks' attempts.

Probability mode does not apply here (one generation judges all passages); ``config``'s
``mode``, ``grade_threshold``, ``temperature``, ``seed`` and ``max_reasks`` are used.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from judge.backends import Backend, PermanentError, TransientError, Usage
from judge.io import InputError
from judge.judging._config import JudgeConfig, Passage, VerdictStore, bind_language
from judge.judging._core import _Asker, _defuse, _Outcome, judge_passage
from judge.judging._models import PassageVerdict, TokenUsage
from judge.judging._parse import (
    VerdictParseError,
    extract_json_object,
    grade_from_object,
    verdict_from_object,
)
from judge.judging._templates import PromptTemplate, TemplateError, list_templates, load_template

__all__ = [
    "ITEM_TOKENS",
    "ListwiseResult",
    "judge_listwise",
    "listwise_schema",
    "listwise_template_id",
    "parse_listwise",
    "render_passages",
]

#: Completion-token budget per passage for the listwise reply (id, verdict, short reason).
ITEM_TOKENS = 96


@dataclass(frozen=True)
class ListwiseResult:
    """One query judged listwise.

    ``verdicts``: one per passage, in input order (``index`` = position). ``pointwise``:
    indices judged pointwise because the listwise replies did not cover them validly.
    ``listwise_calls``: listwise calls made (1 + re-asks; 0 for no passages).
    ``problems``: what was wrong with each invalid listwise reply (or the call's error).
    ``usage``/``cost``/``latency_s``: the listwise calls only.
    """

    verdicts: list[PassageVerdict]
    pointwise: tuple[int, ...]
    listwise_calls: int
    problems: tuple[str, ...] = ()
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    latency_s: float = 0.0

    @property
    def calls(self) -> int:
        """Every backend call: listwise calls plus the pointwise fallbacks' attempts."""
        return self.listwise_calls + sum(self.verdicts[i].attempts for i in self.pointwise)


def listwise_template_id(config: JudgeConfig) -> str:
    """The built-in listwise template for ``config``'s mode and language; the Chinese one
    where the language has none (listwise templates exist in Chinese only; the template a
    verdict was judged with is recorded in it)."""
    stem = "listwise" if config.mode == "binary" else "listwise_graded"
    own = f"{stem}.{config.language}.v1"
    return own if own in {t.id for t in list_templates()} else f"{stem}.zh.v1"


def load_listwise_template(config: JudgeConfig, template: str | None) -> PromptTemplate:
    """The listwise template ``template`` (default: the mode's), checked against the mode and
    the variables a listwise prompt must use."""
    tpl = load_template(template or listwise_template_id(config))
    if tpl.mode != config.mode:
        raise TemplateError(
            f"template {tpl.id} is a {tpl.mode} template but mode is {config.mode}", field="template"
        )
    if set(tpl.variables) != {"query", "count", "passages"}:
        raise TemplateError(
            f"listwise template {tpl.id} must use exactly ${{query}}, ${{count}} and ${{passages}}",
            path=tpl.path,
            field="variables",
        )
    return tpl


def render_passages(passages: Sequence[Passage]) -> str:
    """The numbered passage block: ``<passage id="1">`` ... ``</passage>``, one per passage."""
    return "\n\n".join(
        f'<passage id="{i}">\n{_defuse(p.text)}\n</passage>' for i, p in enumerate(passages, 1)
    )


def listwise_schema(mode: str, n: int) -> dict[str, Any]:
    """JSON schema of a listwise reply for ``n`` passages (key order = output order)."""
    answer: dict[str, Any] = (
        {"type": "string", "enum": ["yes", "no"]}
        if mode == "binary"
        else {"type": "integer", "enum": [0, 1, 2, 3]}
    )
    key = "verdict" if mode == "binary" else "grade"
    item = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "enum": list(range(1, n + 1))},
            key: answer,
            "reason": {"type": "string"},
        },
        "required": ["id", key, "reason"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"verdicts": {"type": "array", "items": item, "minItems": n, "maxItems": n}},
        "required": ["verdicts"],
        "additionalProperties": False,
    }


def _item_id(item: dict[str, Any]) -> int | None:
    value = item.get("id")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def parse_listwise(text: str, n: int, mode: str) -> tuple[dict[int, tuple[str, int | None, str]], list[str]]:
    """Valid items of a listwise reply and the problems found.

    Returns ``({id: (verdict, grade, reason)}, problems)``: ids 1..n that appear exactly once
    with a valid verdict (grade is None in binary mode), and a list of problems (empty iff
    every passage 1..n has exactly one valid verdict). In graded mode the verdict is left
    as ``""``; the caller applies the grade threshold.
    """
    try:
        obj = extract_json_object(text)
    except VerdictParseError as exc:
        return {}, [str(exc)]
    items = {k.strip().lower(): v for k, v in obj.items()}.get("verdicts")
    if not isinstance(items, list):
        return {}, ["the reply has no 'verdicts' list"]
    problems: list[str] = []
    found: dict[int, list[tuple[str, int | None, str] | None]] = {}
    unknown: list[str] = []
    for position, item in enumerate(items, 1):
        if not isinstance(item, dict):
            problems.append(f"item {position} is not an object")
            continue
        norm = {str(k).strip().lower(): v for k, v in item.items()}
        ident = _item_id(norm)
        if ident is None or not 1 <= ident <= n:
            unknown.append(repr(norm.get("id")))
            continue
        rest = {k: v for k, v in norm.items() if k != "id"}
        parsed: tuple[str, int | None, str] | None
        try:
            if mode == "graded":
                grade = grade_from_object(rest)
                parsed = ("", grade.grade, grade.reason)
            else:
                verdict = verdict_from_object(rest)
                parsed = (verdict.verdict, None, verdict.reason)
        except VerdictParseError as exc:
            problems.append(f"passage {ident}: {exc}")
            parsed = None
        found.setdefault(ident, []).append(parsed)
    valid = {i: got[0] for i, got in found.items() if len(got) == 1 and got[0] is not None}
    duplicated = sorted(i for i, got in found.items() if len(got) > 1)
    missing = [i for i in range(1, n + 1) if i not in found]
    if unknown:
        problems.append(f"unknown passage id {', '.join(unknown)} (ids are 1 to {n})")
    if duplicated:
        problems.append(f"more than one verdict for passage {', '.join(map(str, duplicated))}")
    if missing:
        problems.append(f"no verdict for passage {', '.join(map(str, missing))}")
    return valid, problems


class _Incomplete(VerdictParseError):
    """A listwise reply that does not cover every passage validly; ``valid`` holds the
    items it does cover (used when it is the last reply)."""

    def __init__(self, message: str, valid: dict[int, tuple[str, int | None, str]]) -> None:
        super().__init__(message)
        self.valid = valid


def _shares(total: int, n: int) -> list[int]:
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


async def judge_listwise(
    backend: Backend,
    query: str,
    passages: Sequence[Passage | str],
    config: JudgeConfig = JudgeConfig(),  # noqa: B008  # frozen dataclass: safe default
    *,
    template: str | None = None,
    max_reasks: int | None = None,
    store: VerdictStore | None = None,
) -> ListwiseResult:
    """Judge all ``passages`` of ``query`` in one call (see the module docstring)."""
    if not isinstance(query, str) or not query.strip():
        raise InputError("the query is empty", field="query")
    items = [p if isinstance(p, Passage) else Passage(text=p) for p in passages]
    config = bind_language(config, query, [p.text for p in items])  # auto: this query's language
    tpl = load_listwise_template(config, template)
    if not items:
        return ListwiseResult(verdicts=[], pointwise=(), listwise_calls=0)
    n = len(items)
    messages = tpl.render(query=_defuse(query), count=str(n), passages=render_passages(items))
    asker = _Asker(backend, tpl, config)
    tally = _Outcome()

    def check(text: str) -> dict[int, tuple[str, int | None, str]]:
        valid, found = parse_listwise(text, n, config.mode)
        if found:
            raise _Incomplete("; ".join(found), valid)
        return valid

    started = time.perf_counter()
    turns = await asker.exchange(
        messages,
        check,
        tally,
        seed=config.seed,
        max_reasks=max_reasks,
        catch=(TransientError, PermanentError),
        max_tokens=ITEM_TOKENS * n + 32,
        json_schema=listwise_schema(config.mode, n),
    )
    latency = time.perf_counter() - started
    problems = [str(p) for p in turns.problems]
    valid: dict[int, tuple[str, int | None, str]]
    if turns.failure is not None:
        exc = turns.failure
        problems.append(f"listwise call failed: {type(exc).__name__}: {exc}")
        valid = {}
    elif turns.value is not None:
        valid = turns.value
    else:  # the last reply was incomplete: keep what it covered validly
        last = turns.problems[-1]
        valid = last.valid if isinstance(last, _Incomplete) else {}
    usage, cost, calls = tally.usage, tally.cost, tally.attempts

    prompt_shares = _shares(usage.prompt_tokens, n)
    completion_shares = _shares(usage.completion_tokens, n)
    verdicts: list[PassageVerdict | None] = [None] * n
    fallback: list[int] = []
    for index, passage in enumerate(items):
        got = valid.get(index + 1)
        if got is None:
            fallback.append(index)
            continue
        label, grade, reason = got
        if config.mode == "graded" and grade is not None:
            label = "yes" if grade >= config.grade_threshold else "no"
        verdicts[index] = PassageVerdict(
            index=index,
            passage_id=passage.id,
            verdict=label,  # type: ignore[arg-type]  # yes/no by construction
            grade=grade,
            reason=reason,
            template_id=tpl.id,
            template_hash=tpl.hash,
            backend=backend.name,
            latency_s=latency / n,
            tokens=TokenUsage(prompt_tokens=prompt_shares[index], completion_tokens=completion_shares[index]),
            cost=cost / n,
            attempts=0,
            reasks=0,
            truncated=passage.truncated,
        )
    for index in fallback:
        verdicts[index] = await judge_passage(backend, query, items[index], index, config, store)
    return ListwiseResult(
        verdicts=[v for v in verdicts if v is not None],
        pointwise=tuple(fallback),
        listwise_calls=calls,
        problems=tuple(problems),
        usage=usage,
        cost=cost,
        latency_s=latency,
    )
