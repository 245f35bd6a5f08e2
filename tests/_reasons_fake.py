"""A fake judge for the reasons-on-request browser test: P(yes) written in each passage, as
``_review:p_backend`` does (it prefers probabilities, so a comparison asks reasons after its
verdicts); asked to explain a passage marked ``[无理由]`` it fails, so the review page shows
the server's error. Importable as ``_reasons_fake:backend`` for ``judge serve
--backend-factory``."""

from __future__ import annotations

from typing import Any

from _review import p_backend

from judge.backends import ChatRequest, RuleBackend, TransientError

NO_REASON = "[无理由]"


def backend() -> RuleBackend:
    inner = p_backend()

    def rule(request: ChatRequest) -> Any:
        text = "\n".join(m.content for m in request.messages if m.role == "user")
        if request.candidates is None and NO_REASON in text:
            raise TransientError("the reason's generation failed")
        return inner.rule(request)

    return RuleBackend(
        rule, name="fake:p-reasons", model="p", supports_probabilities=True, prefers_probabilities=True
    )
