"""The judging core: one verdict per passage, one :class:`JudgeResult` per query.

Flow for one passage (:func:`judge_passage`):

1. With a store, look the verdict up by :func:`verdict_cache_key`; a hit is returned with
   ``cached=True`` and this position's ``index``/``passage_id``.
2. Otherwise ask: render the template (instructions and query first, passage last), call
   the backend, parse the reply strictly; an invalid reply is re-asked up to
   ``config.max_reasks`` times with the parse error appended to the conversation. Still
   invalid -> ``verdict="unjudged"`` with ``raw`` (the last reply) and ``error``.
   Probability mode makes one call with ``answer_prefix``/``candidates`` and reads the
   verdict from the token probabilities (see :class:`JudgeConfig`).
3. A :class:`TransientError` that outlived the backend's own retries, or a
   :class:`RequestError` (this prompt does not fit the model's context, a content filter
   refused it), gives an unjudged verdict with the error (the run goes on; a later run, or
   ``--retry-unjudged``, asks again). Any other :class:`PermanentError` (bad key, unknown
   model, unsupported request) propagates: every other call would fail too.
4. Only judged verdicts are stored, so a failure is never cached.

Text between ``<passage>`` tags is data: any ``<passage>``/``</passage>`` tag (with or
without attributes, e.g. ``<passage id="2">``) inside the passage or query is defused (its
angle brackets become full-width ``＜ ＞``) before rendering, so a passage cannot close its
own delimiter. Cache keys use the original text.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, Generic, TypeVar

from judge.backends import (
    PAIR_ERRORS,
    Backend,
    ChatRequest,
    Completion,
    Message,
    UnsupportedError,
    Usage,
)
from judge.io import InputError
from judge.judging._config import (
    JudgeConfig,
    Passage,
    VerdictStore,
    bind_language,
    check_templates,
    resolve_config,
    summary_template_for,
    template_for,
)
from judge.judging._examples import Example, examples_hash, examples_seen, render_examples
from judge.judging._models import (
    JudgeResult,
    LLMGrade,
    LLMVerdict,
    PassageVerdict,
    TokenUsage,
    VerdictLabel,
)
from judge.judging._parse import VerdictParseError, parse_grade, parse_verdict
from judge.judging._summary import fallback_reason, summarize, verdict_lines
from judge.judging._templates import PromptTemplate

T = TypeVar("T")

_TAG = re.compile(r"<(\s*/?\s*passage\b[^<>]*)>", re.IGNORECASE)
_CACHE_KEY_VERSION = 1


def _defuse(text: str) -> str:
    return _TAG.sub(lambda m: f"＜{m.group(1)}＞", text)


def verdict_cache_key(
    backend: Backend,
    config: JudgeConfig,
    query: str,
    passage_text: str,
    *,
    template: PromptTemplate | None = None,
    examples: Sequence[Example] = (),
) -> str:
    """sha256 hex of everything that determines a verdict: the backend's name, model and
    output-changing params, ``config.cache_params()``, the template's id and hash, the
    query and the passage text. Never includes secrets (``Backend.params()`` has none).

    ``template``: the template that judges the passage (default :func:`template_for`
    ``(config)``, the pointwise one); listwise runs pass their listwise template, so a
    listwise verdict has its own key and a listwise run resumes from the store.

    ``examples``: the worked examples the prompt shows (``--examples``); their hash
    (:func:`~judge.judging.examples_hash`) joins the key as ``examples``, so a verdict made
    with demonstrations is another verdict; none leave the key as it always was.

    The hashed text is ``json.dumps(payload, ensure_ascii=False, sort_keys=True,
    separators=(",", ":"), default=str)`` of ``{"v", "backend", "model", "backend_params",
    "config", "template_id", "template_hash", "query", "passage"}`` (and ``"examples"``
    when there are some); everything but the query, the passage and the examples is
    serialised once per (backend, params, config, template)."""
    config = bind_language(config, query, [passage_text])  # callers judging a query bind it first
    tpl = template if template is not None else template_for(config)
    params = _dumps(backend.params())
    head, tail = _key_frame(backend.name, params, config, backend.model, tpl.id, tpl.hash)
    head = _with_examples(head, examples_hash(examples))
    blob = f'{head}{_dumps(passage_text)},"query":{_dumps(query)}{tail}'
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


_MODEL_KEY = ',"model":'


def _with_examples(head: str, digest: str | None) -> str:
    """The key's text before the passage with ``"examples"`` in its sorted place (after
    ``config``, before ``model``); unchanged without examples."""
    if digest is None:
        return head
    at = head.rindex(_MODEL_KEY)
    return f'{head[:at]},"examples":{_dumps(digest)}{head[at:]}'


def cached_verdict(hit: PassageVerdict, index: int, passage: Passage) -> PassageVerdict:
    """A stored verdict served for ``passage`` at rank ``index`` (``cached=True``)."""
    return hit.model_copy(
        update={"index": index, "passage_id": passage.id, "cached": True, "truncated": passage.truncated}
    )


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


@lru_cache(maxsize=64)
def _key_frame(
    name: str, params_json: str, config: JudgeConfig, model: str, template_id: str, template_hash: str
) -> tuple[str, str]:
    """The cache-key text before the passage and after the query (keys in sorted order:
    backend, backend_params, config, model, passage, query, template_hash, template_id, v)."""
    head = (
        f'{{"backend":{_dumps(name)},"backend_params":{params_json},'
        f'"config":{_dumps(config.cache_params())},"model":{_dumps(model)},"passage":'
    )
    tail = (
        f',"template_hash":{_dumps(template_hash)},"template_id":{_dumps(template_id)},'
        f'"v":{_CACHE_KEY_VERSION}}}'
    )
    return head, tail


def _call_cost(completion: Completion) -> float:
    """The priced cost of one call (ResilientBackend fills ``Completion.cost``), else 0."""
    cost = completion.cost
    return float(cost) if cost is not None and math.isfinite(cost) and cost > 0 else 0.0


@dataclass
class _Outcome:
    """What asking about one passage produced, before it becomes a PassageVerdict."""

    verdict: VerdictLabel = "unjudged"
    grade: int | None = None
    reason: str = ""
    p_yes: float | None = None
    confidence: float | None = None
    expected_grade: float | None = None
    probs: dict[str, float] | None = None
    raw: str | None = None
    error: str | None = None
    attempts: int = 0
    reasks: int = 0
    retries: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    decided_by: str | None = None

    def add_call(self, completion: Completion) -> None:
        self.decided_by = completion.decided_by or self.decided_by
        self.attempts += 1
        self.retries += max(0, completion.attempts - 1)
        self.usage = self.usage + completion.usage
        self.cost += _call_cost(completion)


R = TypeVar("R")


@dataclass
class _Exchange(Generic[R]):
    """How one ask/re-ask exchange ended: ``value`` (the parsed valid reply, or None),
    ``problems`` (one parse error per invalid reply, in order) and ``failure`` (the backend
    error that ended it, if any)."""

    value: R | None = None
    problems: list[VerdictParseError] = field(default_factory=list)
    failure: Exception | None = None


class _Asker:
    """Makes the calls for one judgment: generation, samples, probability mode and
    listwise judging (:mod:`judge.judging._listwise`) all go through :meth:`exchange`."""

    def __init__(
        self,
        backend: Backend,
        template: PromptTemplate,
        config: JudgeConfig,
        meta: Mapping[str, str] | None = None,
    ) -> None:
        self.backend = backend
        self.template = template
        self.config = config
        self.meta = meta

    def request(self, messages: Sequence[Message], **overrides: Any) -> ChatRequest:
        fields: dict[str, Any] = {"json_schema": self.template.json_schema, "meta": self.meta}
        return self.config.chat_request(messages, **(fields | overrides))

    async def exchange(
        self,
        messages: Sequence[Message],
        parse: Callable[[str], R],
        out: _Outcome,
        *,
        seed: int | None,
        max_reasks: int | None = None,
        catch: tuple[type[Exception], ...] = PAIR_ERRORS,
        **overrides: Any,
    ) -> _Exchange[R]:
        """Ask, ``parse`` the reply, re-ask on a :class:`VerdictParseError` (the error is
        appended to the conversation) up to ``max_reasks`` times (default
        ``config.max_reasks``). Every call is tallied in ``out`` (``attempts``, ``reasks``,
        usage, cost, ``raw`` = the last reply). A backend error of a ``catch`` type ends the
        exchange (``failure``); any other propagates. Pointwise and listwise judging share
        this loop; ``overrides`` change the request (listwise: ``max_tokens``,
        ``json_schema``)."""
        result: _Exchange[R] = _Exchange()
        conversation = list(messages)
        reasks = self.config.max_reasks if max_reasks is None else max_reasks
        for attempt in range(reasks + 1):
            if attempt:
                out.reasks += 1
            try:
                completion = await self.backend.complete(self.request(conversation, seed=seed, **overrides))
            except catch as exc:
                result.failure = exc
                return result
            out.add_call(completion)
            out.raw = completion.text
            try:
                result.value = parse(completion.text)
            except VerdictParseError as exc:
                result.problems.append(exc)
                if attempt < reasks:
                    conversation += [
                        Message("assistant", completion.text),
                        Message("user", self.template.render_reask(str(exc))),
                    ]
                continue
            return result
        return result

    async def generate(self, messages: tuple[Message, ...], seed: int | None) -> _Outcome:
        """Ask, parse, re-ask on an invalid reply; unjudged after ``max_reasks`` re-asks."""
        out = _Outcome()
        turns = await self.exchange(messages, self._parse, out, seed=seed)
        if turns.failure is not None:
            exc = turns.failure
            out.error = f"backend error after retries: {type(exc).__name__}: {exc}"
        elif turns.value is None:
            last = turns.problems[-1] if turns.problems else ""
            out.error = f"no valid verdict after {out.attempts} replies: {last}"
        else:
            self._apply(out, turns.value)
            out.raw = out.raw if turns.value.extras else None  # extras ignored, not lost
        return out

    def _parse(self, text: str) -> LLMVerdict | LLMGrade:
        if self.template.mode == "graded":
            return parse_grade(text)
        return parse_verdict(text)

    def _apply(self, out: _Outcome, parsed: LLMVerdict | LLMGrade) -> None:
        out.reason = parsed.reason
        if isinstance(parsed, LLMGrade):
            out.grade = parsed.grade
            out.verdict = "yes" if parsed.grade >= self.config.grade_threshold else "no"
        else:
            out.verdict = parsed.verdict

    async def sampled(self, messages: tuple[Message, ...]) -> _Outcome:
        """``samples`` generations (seed, seed+1, ...) combined by majority vote."""
        cfg = self.config
        seeds = [None if cfg.seed is None else cfg.seed + i for i in range(cfg.samples)]
        runs = await asyncio.gather(*(self.generate(messages, s) for s in seeds))
        return _vote(runs, cfg)

    async def probability(self, messages: tuple[Message, ...]) -> _Outcome:
        """One forward pass: the verdict from the candidates' next-token probabilities."""
        template, cfg = self.template, self.config
        prefix, candidates = template.answer_prefix, template.candidates
        if prefix is None or candidates is None:  # template_for() already refuses this
            raise UnsupportedError(f"template {template.id} has no probability mode")
        out = _Outcome()
        threshold = (
            {"grade_threshold": str(cfg.grade_threshold)}
            if template.mode == "graded"
            else {"decision_threshold": repr(cfg.decision_threshold)}
        )
        request = self.request(
            messages,
            max_tokens=1,
            json_schema=None,
            answer_prefix=prefix,
            candidates=candidates,
            # A backend that keeps state for a reason (the embedded judge) keeps none when
            # no reason follows (``explain`` off: verdicts-first pooled judging).
            meta={**(self.meta or {}), **threshold, "reason": "follows" if cfg.explain else "none"},
        )
        try:
            completion = await self.backend.complete(request)
        except PAIR_ERRORS as exc:
            out.error = f"backend error after retries: {type(exc).__name__}: {exc}"
            return out
        out.add_call(completion)
        raw_probs = completion.token_probs or {}
        mass = {c: _finite_nonneg(raw_probs.get(c, 0.0)) for c in candidates}
        total = sum(mass.values())
        if total <= 0.0:
            out.raw = completion.text
            out.error = f"no probability on any candidate ({', '.join(candidates)})"
            return out
        probs = {c: mass[c] / total for c in candidates}
        out.probs = probs
        if template.mode == "graded":
            dist = [probs[str(g)] for g in range(4)]
            grade = max(range(4), key=lambda g: (dist[g], -g))  # argmax, ties to the lower grade
            out.grade = grade
            out.expected_grade = sum(g * p for g, p in enumerate(dist))
            out.p_yes = sum(dist[cfg.grade_threshold :])
            out.verdict = "yes" if grade >= cfg.grade_threshold else "no"
        else:
            out.p_yes = probs["yes"]
            out.verdict = "yes" if out.p_yes >= cfg.decision_threshold else "no"
        out.confidence = out.p_yes if out.verdict == "yes" else 1.0 - out.p_yes
        if cfg.explain:
            await self._explain(out, messages, prefix)
        return out

    async def _explain(self, out: _Outcome, messages: tuple[Message, ...], prefix: str) -> None:
        """Probability mode with ``explain``: a short generation prefilled with the chosen
        answer, so the model writes only the reason. A failure leaves the reason empty."""
        chosen = str(out.grade) if self.template.mode == "graded" else str(out.verdict)
        close = '"' if prefix.endswith('"') else ""
        forced = f'{prefix}{chosen}{close}, "reason": "'
        request = self.request(messages, json_schema=None, answer_prefix=forced)
        try:
            completion = await self.backend.complete(request)
        except PAIR_ERRORS:
            return
        out.add_call(completion)
        text = completion.text
        full = text if text.startswith(forced) else forced + text
        try:
            out.reason = self._parse(full).reason
        except VerdictParseError:
            # Truncated or unterminated: keep the text up to the closing quote.
            out.reason = full[len(forced) :].split('"', 1)[0].strip()


def _finite_nonneg(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    v = float(value)
    return v if math.isfinite(v) and v > 0.0 else 0.0


def _vote(runs: Sequence[_Outcome], config: JudgeConfig) -> _Outcome:
    """Majority vote over samples; unjudged samples don't vote (all unjudged -> unjudged)."""
    combined = _Outcome()
    for run in runs:
        combined.attempts += run.attempts
        combined.reasks += run.reasks
        combined.retries += run.retries
        combined.usage = combined.usage + run.usage
        combined.cost += run.cost
    judged = [r for r in runs if r.verdict != "unjudged"]
    if not judged:
        last = runs[-1]
        combined.raw, combined.error = last.raw, last.error
        return combined
    if config.mode == "graded":
        counts = Counter(r.grade for r in judged if r.grade is not None)
        grade = max(counts, key=lambda g: (counts[g], -g))  # most frequent, ties to the lower
        combined.grade = grade
        combined.expected_grade = sum(r.grade or 0 for r in judged) / len(judged)
        combined.verdict = "yes" if grade >= config.grade_threshold else "no"
        winner = next(r for r in judged if r.grade == grade)
    else:
        yes = sum(r.verdict == "yes" for r in judged)
        combined.verdict = "yes" if yes * 2 > len(judged) else "no"  # ties -> no
        winner = next(r for r in judged if r.verdict == combined.verdict)
    combined.p_yes = sum(r.verdict == "yes" for r in judged) / len(judged)
    combined.confidence = sum(r.verdict == combined.verdict for r in judged) / len(judged)
    combined.reason = winner.reason
    return combined


def as_passage(item: Passage | str) -> Passage:
    """A passage given as plain text or as a :class:`Passage`, as a :class:`Passage`."""
    if isinstance(item, Passage):
        return item
    if isinstance(item, str):
        return Passage(text=item)
    raise TypeError(f"a passage must be a str or a Passage, not {type(item).__name__}")


def check_probability(backend: Backend, config: JudgeConfig) -> None:
    """Refuse probability mode on a backend that gives no token probabilities."""
    if config.probability and not getattr(backend, "supports_probabilities", False):
        raise UnsupportedError(
            f"backend {backend.name} does not expose token probabilities; run without probability mode"
        )


async def judge_passage(
    backend: Backend,
    query: str,
    passage: Passage,
    index: int,
    config: JudgeConfig,
    store: VerdictStore | None = None,
    *,
    examples: Sequence[Example] = (),
) -> PassageVerdict:
    """One passage's verdict (see the module docstring for the flow). ``language="auto"``
    that no caller bound for the whole query is bound from this query and passage.
    ``examples``: worked examples shown before the passage (the template's
    ``${examples}`` slot; the verdict records them and its cache key includes them)."""
    config = bind_language(resolve_config(config, backend), query, [passage.text])
    check_probability(backend, config)
    return await _judge_bound(
        _QueryFrame(backend, config, query, template_for(config)), passage, index, store, examples
    )


class _QueryFrame:
    """What every passage of one query shares once its config is resolved and bound: the
    template, the query as it goes into the prompt, and the cache key's text around the
    passage (:func:`verdict_cache_key`'s, computed once per query instead of per passage)."""

    def __init__(self, backend: Backend, config: JudgeConfig, query: str, template: PromptTemplate) -> None:
        self.backend = backend
        self.config = config
        self.query = query
        self.template = template
        self.prompt_query = _defuse(query)
        self._key_around: tuple[str, str] | None = None

    def key(self, passage_text: str, examples: Sequence[Example] = ()) -> str:
        """``verdict_cache_key(backend, config, query, passage_text, template=template,
        examples=examples)``."""
        if self._key_around is None:
            backend, template = self.backend, self.template
            params = _dumps(backend.params())
            head, tail = _key_frame(
                backend.name, params, self.config, backend.model, template.id, template.hash
            )
            self._key_around = head, f',"query":{_dumps(self.query)}{tail}'
        head, tail = self._key_around
        head = _with_examples(head, examples_hash(examples))
        return hashlib.sha256(f"{head}{_dumps(passage_text)}{tail}".encode()).hexdigest()

    def block(self, examples: Sequence[Example]) -> dict[str, str]:
        """The ``${examples}`` value for ``examples`` (nothing for a zero-shot prompt:
        a template's slot is then empty)."""
        if not examples:
            return {}
        return {"examples": render_examples(self.template, examples)}


async def _judge_bound(
    frame: _QueryFrame,
    passage: Passage,
    index: int,
    store: VerdictStore | None,
    examples: Sequence[Example] = (),
) -> PassageVerdict:
    """:func:`judge_passage` once the config is resolved and bound for the query."""
    key: str | None = None
    if store is not None:
        key = frame.key(passage.text, examples)
        hit = await store.get(key)
        if hit is not None:
            return cached_verdict(hit, index, passage)
    template = frame.template
    messages = template.render(
        query=frame.prompt_query, passage=_defuse(passage.text), **frame.block(examples)
    )
    return await ask_verdict(
        frame.backend,
        template,
        frame.config,
        messages,
        index=index,
        key=key,
        store=store,
        passage_id=passage.id,
        truncated=passage.truncated,
        query_id=passage.query_id,
        examples=examples,
    )


async def ask_verdict(
    backend: Backend,
    template: PromptTemplate,
    config: JudgeConfig,
    messages: tuple[Message, ...],
    *,
    index: int,
    key: str | None,
    store: VerdictStore | None,
    passage_id: str | None = None,
    truncated: bool = False,
    query_id: str | None = None,
    examples: Sequence[Example] = (),
) -> PassageVerdict:
    """Ask for one verdict on rendered ``messages`` in ``config``'s decision mode
    (probability, vote over samples, or one generation with re-asks), build its
    :class:`PassageVerdict` and store it under ``key`` when judged (the store lookup is the
    caller's: it knows how a hit is re-indexed). ``passage_id``/``query_id`` travel to the
    backend as the request's ``meta``."""
    meta = {k: v for k, v in (("query_id", query_id), ("passage_id", passage_id)) if v is not None}
    asker = _Asker(backend, template, config, meta or None)
    started = time.perf_counter()
    if config.probability:
        out = await asker.probability(messages)
    elif config.samples > 1:
        out = await asker.sampled(messages)
    else:
        out = await asker.generate(messages, config.seed)
    verdict = PassageVerdict(
        index=index,
        passage_id=passage_id,
        verdict=out.verdict,
        grade=out.grade,
        reason=out.reason,
        p_yes=out.p_yes,
        confidence=out.confidence,
        expected_grade=out.expected_grade,
        probs=out.probs,
        template_id=template.id,
        template_hash=template.hash,
        backend=backend.name,
        latency_s=time.perf_counter() - started,
        tokens=TokenUsage(
            prompt_tokens=out.usage.prompt_tokens, completion_tokens=out.usage.completion_tokens
        ),
        cost=out.cost,
        attempts=out.attempts,
        reasks=out.reasks,
        retries=out.retries,
        raw=out.raw,
        error=out.error,
        truncated=truncated,
        decided_by=out.decided_by,
        examples=examples_seen(examples),
    )
    if store is not None and key is not None and verdict.judged:
        await store.put(key, verdict)
    return verdict


async def _bounded(limit: int | None, jobs: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    if not limit or limit < 1:
        return list(await asyncio.gather(*(job() for job in jobs)))
    semaphore = asyncio.Semaphore(limit)

    async def run(job: Callable[[], Awaitable[T]]) -> T:
        async with semaphore:
            return await job()

    return list(await asyncio.gather(*(run(job) for job in jobs)))


async def generate_summary(
    backend: Backend, query: str, verdicts: Sequence[PassageVerdict], config: JudgeConfig
) -> tuple[str, Usage, float, int]:
    """A summary reason for a whole result: (text, usage, cost, calls). On a transient
    failure or an empty reply the deterministic :func:`fallback_reason` is used."""
    template = summary_template_for(config)
    judged = [v for v in verdicts if v.judged]
    relevant = sum(v.verdict == "yes" for v in judged)
    messages = template.render(
        query=_defuse(query),
        total=str(len(verdicts)),
        relevant=str(relevant),
        irrelevant=str(len(judged) - relevant),
        unjudged=str(len(verdicts) - len(judged)),
        verdicts=verdict_lines(verdicts, config.mode) or "（无）",
    )
    try:
        completion = await backend.complete(config.chat_request(messages))
    except PAIR_ERRORS:
        return fallback_reason(verdicts), Usage(), 0.0, 1
    text = completion.text.strip()
    return (text or fallback_reason(verdicts)), completion.usage, _call_cost(completion), 1


async def judge_query(
    backend: Backend,
    query: str,
    passages: Sequence[Passage | str],
    config: JudgeConfig = JudgeConfig(),  # noqa: B008  # frozen dataclass: safe default
    *,
    store: VerdictStore | None = None,
    k: Sequence[int] = (5, 10),
    qrels: Mapping[str, int] | None = None,
    with_summary: bool = False,
) -> JudgeResult:
    """Judge every passage of one query (concurrently, at most ``backend.max_concurrency``
    at a time) and compute the metrics; verdicts come back in input order."""
    if not isinstance(query, str) or not query.strip():
        raise InputError("the query is empty", field="query")
    items = [as_passage(p) for p in passages]
    check_templates(config)  # fail fast on a bad template, before any call
    # ``auto``: one language for the whole query, from the query and all its passages.
    config = bind_language(resolve_config(config, backend), query, [p.text for p in items])
    check_probability(backend, config)
    frame = _QueryFrame(backend, config, query, template_for(config))
    jobs = [partial(_judge_bound, frame, p, i, store) for i, p in enumerate(items)]
    verdicts = await _bounded(getattr(backend, "max_concurrency", None), jobs)
    result = summarize(query, verdicts, config, backend.name, k=k, qrels=qrels)
    if not with_summary:
        return result
    text, usage, cost, calls = await generate_summary(backend, query, verdicts, config)
    summary_usage = result.usage.model_copy(
        update={
            "calls": result.usage.calls + calls,
            "prompt_tokens": result.usage.prompt_tokens + usage.prompt_tokens,
            "completion_tokens": result.usage.completion_tokens + usage.completion_tokens,
            "cost": result.usage.cost + cost,
        }
    )
    return result.model_copy(update={"reason": text, "usage": summary_usage})
