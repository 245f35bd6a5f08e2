"""A cascade of two judges (``--cascade CHEAP,EXPENSIVE --margin M``): the cheap one first,
the expensive one only where the cheap one is unsure.

A probability-mode request (``candidates`` set) goes to ``cheap``; its P(yes) (binary: yes
over yes + no; graded: the mass of grades >= the grade threshold) is compared with the
threshold the judging core uses (``request.meta["decision_threshold"]`` /
``["grade_threshold"]``, else 0.5 / 2). When it lies within ``margin`` of the threshold
(or the cheap judge put no mass on any candidate) the request goes to ``expensive``: as is
when it exposes probabilities, else as a generation request (prefix and candidates dropped)
whose JSON verdict becomes a one-hot distribution. Other requests (generation, re-asks,
``--explain``) go to the cheap judge.

Every completion says which judge decided it (``Completion.decided_by``: the judge's
name); the judging core records it on the verdict. The name, cache params and fingerprint
name both judges and the margin, so a cascade's verdicts are never mixed with either judge
alone. ``cheap_calls`` / ``expensive_calls`` count the calls each judge got.

Both judges are raw backends; :func:`~judge.backends.make_backend` wraps the cascade once
(retries, limits, accounting apply to the pair). A cost is accounted from the completion
returned, i.e. the deciding judge's usage.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from judge.backends._base import Backend, ChatRequest, Completion, ConfigurationError
from judge.backends._json import first_json_object

__all__ = ["CascadeBackend"]


def _fingerprint(backend: Backend) -> str:
    from judge.backends._fingerprint import backend_fingerprint

    return backend_fingerprint(backend)


class CascadeBackend:
    """Cheap judge first, expensive judge within ``margin`` of the threshold."""

    prefers_probabilities = True

    def __init__(self, cheap: Backend, expensive: Backend, *, margin: float = 0.1) -> None:
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0.0 <= margin <= 0.5:
            raise ConfigurationError(f"must be in [0, 0.5], not {margin!r}", field="margin")
        if not getattr(cheap, "supports_probabilities", False):
            raise ConfigurationError(
                f"the cheap judge {cheap.name} exposes no token probabilities, so it cannot say how "
                "sure it is; pick one that does (e.g. local:..., qrels:...)",
                field="cascade",
            )
        self.cheap = cheap
        self.expensive = expensive
        self.margin = float(margin)
        self.name = f"cascade:{cheap.name},{expensive.name}@{self.margin:g}"
        self.model = f"{cheap.model}+{expensive.model}"
        self.supports_probabilities = True
        limits = [c for c in (cheap.max_concurrency, expensive.max_concurrency) if c is not None]
        self.max_concurrency: int | None = min(limits) if limits else None
        self.free = bool(getattr(cheap, "free", False) and getattr(expensive, "free", False))
        self.cheap_calls = 0
        self.expensive_calls = 0

    @property
    def fingerprint(self) -> str:
        cheap, expensive = _fingerprint(self.cheap), _fingerprint(self.expensive)
        return f"cascade|cheap={cheap}|expensive={expensive}|margin={self.margin:g}"

    def params(self) -> dict[str, Any]:
        return {
            "cheap": {"name": self.cheap.name, "model": self.cheap.model, "params": self.cheap.params()},
            "expensive": {
                "name": self.expensive.name,
                "model": self.expensive.model,
                "params": self.expensive.params(),
            },
            "margin": self.margin,
        }

    def p_yes(self, request: ChatRequest, probs: dict[str, float]) -> float | None:
        """P(yes) of a probability reply (None: no mass on any candidate)."""
        candidates = request.candidates or ()
        mass = {c: max(0.0, float(probs.get(c, 0.0))) for c in candidates}
        total = sum(v for v in mass.values() if math.isfinite(v))
        if total <= 0.0:
            return None
        meta = request.meta or {}
        if all(c.strip().isdigit() for c in candidates):
            level = int(meta.get("grade_threshold", "2"))
            return sum(v for c, v in mass.items() if int(c) >= level) / total
        return mass.get("yes", 0.0) / total

    def threshold(self, request: ChatRequest) -> float:
        meta = request.meta or {}
        if request.candidates and all(c.strip().isdigit() for c in request.candidates):
            return 0.5  # graded: P(grade >= threshold) against one half
        return float(meta.get("decision_threshold", "0.5"))

    async def complete(self, request: ChatRequest) -> Completion:
        self.cheap_calls += 1
        first = await self.cheap.complete(request)
        if request.candidates is None:
            return replace(first, decided_by=self.cheap.name)
        p = self.p_yes(request, first.token_probs or {})
        if p is not None and abs(p - self.threshold(request)) > self.margin:
            return replace(first, decided_by=self.cheap.name)
        self.expensive_calls += 1
        if getattr(self.expensive, "supports_probabilities", False):
            second = await self.expensive.complete(request)
            return replace(second, decided_by=self.expensive.name)
        return await self._generated(request)

    async def _generated(self, request: ChatRequest) -> Completion:
        """The expensive judge without probabilities: ask for the JSON verdict, one-hot it."""
        asked = replace(request, answer_prefix=None, candidates=None, max_tokens=None)
        reply = await self.expensive.complete(asked)
        candidates = request.candidates or ()
        found = first_json_object(reply.text) or {}
        answer = str(found.get("grade", found.get("verdict", ""))).strip().lower()
        probs = {c: (1.0 if c.strip().lower() == answer else 0.0) for c in candidates}
        return replace(reply, token_probs=probs, decided_by=self.expensive.name)

    async def aclose(self) -> None:
        await self.cheap.aclose()
        await self.expensive.aclose()
