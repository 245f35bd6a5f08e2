"""Deterministic fake backends for tests: no network, no model, no randomness.

:class:`ScriptedBackend` replays a script. A step (what one call returns) is one of:

* ``str`` — the reply text;
* :class:`~judge.backends.Completion` — returned as is (usage, token_probs, ...);
* ``Mapping[str, float]`` — a probability-mode reply: ``token_probs`` for the request's
  candidates (missing candidates get 0.0) and the most probable one as ``text``;
* an exception instance or class — raised (e.g. ``TransientError("boom")``,
  ``RateLimitError("slow down", retry_after=2.0)``).

The script is a sequence of steps (call *i* gets step *i*; ``cycle=True`` wraps around,
otherwise an exhausted script raises :class:`ScriptExhaustedError`) or a callable
``(request, call_index) -> step``. Every request is recorded in ``.requests`` in call
order; the call index is taken when the call starts, so it is deterministic under
``asyncio.gather``. ``latency_s`` simulates latency with ``asyncio.sleep`` (injectable).

Usage is counted as one token per character (prompt: all message contents; completion:
the reply text) unless a fixed ``usage`` is given or the step is a Completion.

In probability mode (``request.candidates`` set) a text reply without probabilities gets
one-hot ``token_probs`` (1.0 for the candidate equal to the stripped, lower-cased text),
unless the backend was given fixed ``token_probs``.

:class:`RuleBackend` answers by a pure function of the request, so it stays consistent
for any passage under any concurrency; :meth:`RuleBackend.keyword` builds the common one
("yes when a marker word is in the prompt").
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from judge.backends._base import (
    ChatRequest,
    Completion,
    PermanentError,
    UnsupportedError,
    Usage,
)

__all__ = ["Reply", "RuleBackend", "ScriptExhaustedError", "ScriptFn", "ScriptedBackend"]

Reply = str | Completion | Mapping[str, float] | BaseException | type[BaseException]
ScriptFn = Callable[[ChatRequest, int], Reply]
SleepFn = Callable[[float], Awaitable[None]]


class ScriptExhaustedError(PermanentError):
    """A ScriptedBackend was called more times than its script has steps."""


class ScriptedBackend:
    """A backend that replays a script (see the module docstring)."""

    def __init__(
        self,
        script: Sequence[Reply] | ScriptFn,
        *,
        name: str = "fake:scripted",
        model: str = "scripted",
        token_probs: Mapping[str, float] | None = None,
        latency_s: float | Callable[[ChatRequest, int], float] = 0.0,
        usage: Usage | None = None,
        cycle: bool = False,
        supports_probabilities: bool = True,
        prefers_probabilities: bool = False,
        max_concurrency: int | None = None,
        params: Mapping[str, Any] | None = None,
        sleep: SleepFn = asyncio.sleep,
    ) -> None:
        if callable(script):
            self._fn: ScriptFn | None = script
            self._steps: tuple[Reply, ...] = ()
        else:
            if isinstance(script, str | bytes):
                raise TypeError("script must be a sequence of steps or a callable, not a string")
            self._fn = None
            self._steps = tuple(script)
            if cycle and not self._steps:
                raise ValueError("cycle=True needs at least one step")
        self.name = name
        self.model = model
        self.supports_probabilities = supports_probabilities
        self.prefers_probabilities = prefers_probabilities
        self.max_concurrency = max_concurrency
        self._token_probs = dict(token_probs) if token_probs is not None else None
        self._latency = latency_s
        self._usage = usage
        self._cycle = cycle
        self._params = dict(params or {})
        self._sleep = sleep
        self._lock = threading.Lock()
        self.requests: list[ChatRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, calls={self.calls})"

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (e.g. shipped to a Ray worker): a copy gets a lock of its own."""
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        """How many calls were made (= ``len(self.requests)``)."""
        return len(self.requests)

    def params(self) -> dict[str, Any]:
        return dict(self._params)

    def _step(self, request: ChatRequest, index: int) -> Reply:
        if self._fn is not None:
            return self._fn(request, index)
        if index < len(self._steps):
            return self._steps[index]
        if self._cycle:
            return self._steps[index % len(self._steps)]
        raise ScriptExhaustedError(
            f"{self.name}: script has {len(self._steps)} step(s) but call #{index + 1} was made"
        )

    async def complete(self, request: ChatRequest) -> Completion:
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
        if request.candidates is not None and not self.supports_probabilities:
            raise UnsupportedError(f"{self.name} does not expose token probabilities")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            latency = self._latency(request, index) if callable(self._latency) else self._latency
            if latency > 0:
                await self._sleep(latency)
            step = self._step(request, index)
            return self._to_completion(step, request, latency)
        finally:
            self.in_flight -= 1

    def _to_completion(self, step: Reply, request: ChatRequest, latency: float) -> Completion:
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, type) and issubclass(step, BaseException):
            raise step(f"scripted {step.__name__}")
        if isinstance(step, Completion):
            if request.candidates is not None and step.token_probs is None:
                return replace(step, token_probs=self._probs_for_text(step.text, request.candidates))
            return step
        if isinstance(step, str):
            token_probs = None
            if request.candidates is not None:
                token_probs = self._probs_for_text(step, request.candidates)
            return self._completion(request, step, latency, token_probs, "stop")
        if isinstance(step, Mapping):
            probs = {str(k): float(v) for k, v in step.items()}
            candidates = request.candidates if request.candidates is not None else tuple(probs)
            token_probs = {c: probs.get(c, 0.0) for c in candidates}
            text = max(token_probs, key=lambda c: token_probs[c]) if token_probs else ""
            return self._completion(request, text, latency, token_probs, "length")
        raise TypeError(f"{self.name}: unsupported script step {step!r}")

    def _completion(
        self,
        request: ChatRequest,
        text: str,
        latency: float,
        token_probs: dict[str, float] | None,
        finish_reason: str,
    ) -> Completion:
        """The completion of a scripted text (a string step, or a probability step's best)."""
        return Completion(
            text=text,
            usage=self._usage_for(request, text),
            model=self.model,
            latency_s=latency,
            token_probs=token_probs,
            finish_reason=finish_reason,
        )

    def _probs_for_text(self, text: str, candidates: Sequence[str]) -> dict[str, float]:
        if self._token_probs is not None:
            return {c: self._token_probs.get(c, 0.0) for c in candidates}
        norm = text.strip().lower()
        return {c: (1.0 if c.strip().lower() == norm else 0.0) for c in candidates}

    def _usage_for(self, request: ChatRequest, text: str) -> Usage:
        if self._usage is not None:
            return self._usage
        prompt = sum(len(m.content) for m in request.messages) + len(request.answer_prefix or "")
        return Usage(prompt_tokens=prompt, completion_tokens=len(text))

    async def aclose(self) -> None:
        self.closed = True


class RuleBackend(ScriptedBackend):
    """A backend whose reply is a pure function of the request: ``rule(request) -> step``."""

    def __init__(
        self,
        rule: Callable[[ChatRequest], Reply],
        *,
        name: str = "fake:rule",
        model: str = "rule",
        **kwargs: Any,
    ) -> None:
        self.rule = rule
        super().__init__(lambda request, _index: rule(request), name=name, model=model, **kwargs)

    @classmethod
    def keyword(
        cls,
        yes: str | Iterable[str] = "RELEVANT",
        *,
        grades: Mapping[str, int] | None = None,
        mode: Literal["auto", "binary", "graded"] = "auto",
        reason_yes: str = "段落包含回答查询所需的信息。",
        reason_no: str = "段落与查询无关。",
        p_match: float = 0.9,
        text_of: Callable[[ChatRequest], str] | None = None,
        name: str = "fake:keyword",
        **kwargs: Any,
    ) -> RuleBackend:
        """A judge that says yes exactly when a marker occurs in the prompt.

        ``yes``: marker(s) meaning relevant. ``grades``: optional marker → grade (0-3);
        the highest matching grade wins; without one a yes-marker means 3, else 0. The
        verdict is yes when a yes-marker matches or the grade is >= 2. The searched text is
        ``text_of(request)`` (default: all user messages), so pick markers that occur in
        the passages only, not in the query or the template.

        Replies: binary ``{"verdict": "yes"|"no", "reason": ...}``; graded ``{"grade": g,
        "reason": ...}`` (graded when ``mode="graded"``, or in ``auto`` when the request's
        JSON schema has a ``grade`` property, the candidates are digits, or the prompt
        mentions ``"grade"``). Probability mode: the chosen answer gets ``p_match``, the
        rest share ``1 - p_match``. A reply starting with ``request.answer_prefix`` is
        returned without it (the prefix is already in the assistant turn).
        """
        markers = (yes,) if isinstance(yes, str) else tuple(yes)
        grade_markers = dict(grades or {})
        if not 0.0 <= p_match <= 1.0:
            raise ValueError("p_match must be in [0, 1]")

        def default_text(request: ChatRequest) -> str:
            return "\n".join(m.content for m in request.messages if m.role == "user")

        extract = text_of or default_text

        def rule(request: ChatRequest) -> Reply:
            text = extract(request)
            matched = any(m in text for m in markers)
            hits = [g for marker, g in grade_markers.items() if marker in text]
            grade = max(hits) if hits else (3 if matched else 0)
            relevant = matched or grade >= 2
            graded = _is_graded(request, text, mode)
            if request.candidates is not None:
                chosen = str(grade) if graded else ("yes" if relevant else "no")
                return _spread(request.candidates, chosen, p_match)
            reason = reason_yes if relevant else reason_no
            payload: dict[str, Any] = (
                {"grade": grade, "reason": reason}
                if graded
                else {"verdict": "yes" if relevant else "no", "reason": reason}
            )
            reply = json.dumps(payload, ensure_ascii=False)
            prefix = request.answer_prefix
            if prefix and reply.startswith(prefix):
                reply = reply[len(prefix) :]
            return reply

        return cls(rule, name=name, **kwargs)


def _is_graded(request: ChatRequest, text: str, mode: str) -> bool:
    if mode != "auto":
        return mode == "graded"
    schema = request.json_schema or {}
    props = schema.get("properties")
    if isinstance(props, Mapping) and "grade" in props:
        return True
    if request.candidates is not None:
        return all(c.strip().isdigit() for c in request.candidates)
    return '"grade"' in text


def _spread(candidates: Sequence[str], chosen: str, p: float) -> dict[str, float]:
    others = [c for c in candidates if c.strip().lower() != chosen]
    if len(others) == len(candidates):  # the chosen answer is not a candidate
        return dict.fromkeys(candidates, 1.0 / len(candidates)) if candidates else {}
    rest = (1.0 - p) / len(others) if others else 0.0
    return {c: (p if c.strip().lower() == chosen else rest) for c in candidates}
