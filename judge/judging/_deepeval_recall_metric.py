"""``ContextualRecallJudge``: contextual recall as a deepeval metric (beside ``RelevancyJudge``).

Reads ``test_case.input`` (the query), ``test_case.retrieval_context`` (the ranked passages)
and ``test_case.expected_output`` (the reference answer). The judge splits the reference
into claims and checks each against the passages (:mod:`judge.judging._recall`); ``score``
is recall@k at the largest cutoff of ``k`` (supported claims / judged claims), compared
with ``threshold``. When no claim could be extracted or judged, ``score`` is 0.0 and
``error`` says why (deepeval reports a failure, not a silent zero). ``result`` holds the
full :class:`ContextualRecall`; ``score_breakdown`` recall per k and the claim counts;
``reason`` lists the unsupported claims (in Chinese).
"""

from __future__ import annotations

import judge._env  # noqa: F401  # must precede deepeval: telemetry off, read-only file system

# isort: split
from typing import Any

from deepeval.errors import MissingTestCaseParamsError
from deepeval.test_case import LLMTestCase, SingleTurnParams

from judge.judging._config import Passage
from judge.judging._deepeval_metric import JudgeMetric
from judge.judging._dimension_models import ContextualRecall
from judge.judging._recall import contextual_recall


class ContextualRecallJudge(JudgeMetric):  # type: ignore[misc,no-untyped-call]  # deepeval is untyped
    """Share of the reference answer's claims that the top-k passages support.

    ``backend``: spec string, Backend, ``DeepEvalBaseLLM`` or None (from the environment);
    wrapped in ``ResilientBackend``. ``k``: cutoffs (``score`` uses the largest).
    ``config``: language (templates), probability mode, re-asks. ``store``: a verdict cache.
    """

    _required_params = [  # type: ignore[assignment]  # noqa: RUF012  # deepeval's attribute
        SingleTurnParams.INPUT,
        SingleTurnParams.RETRIEVAL_CONTEXT,
        SingleTurnParams.EXPECTED_OUTPUT,
    ]

    result: ContextualRecall | None = None  # the last measurement's

    @property
    def __name__(self) -> str:  # type: ignore[override]  # deepeval uses a property here
        return "Contextual Recall Judge"

    async def a_measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        query = getattr(test_case, "input", None)
        context = getattr(test_case, "retrieval_context", None)
        reference = getattr(test_case, "expected_output", None)
        if not isinstance(query, str) or not query.strip() or context is None or not reference:
            raise MissingTestCaseParamsError(
                f"{self.__name__} needs 'input', 'retrieval_context' and 'expected_output' on the test case"
            )
        if isinstance(context, str) or not all(isinstance(c, str) for c in context):
            raise TypeError("retrieval_context must be a list of strings")
        result = await contextual_recall(
            self.backend,
            query,
            [Passage(text=c) for c in context],
            str(reference),
            self.config,
            store=self.store,
            k=self.k,
        )
        return self._record(result)

    def _record(self, result: ContextualRecall) -> float:
        top = max(self.k)
        value = result.recall.get(top)
        error: str | None = None
        if result.error is not None:
            error = f"no claims could be extracted from the reference: {result.error}"
        elif value is None:
            error = f"none of the {len(result.claims)} claims could be judged against the top {top} passages"
        if error is not None:
            reason = error
        elif result.unsupported_claims:
            listed = "；".join(result.unsupported_claims)
            reason = (
                f"前 {top} 个段落支持 {result.supported[top]}/{len(result.claims)} 条陈述；未被支持：{listed}"
            )
        else:
            reason = f"前 {top} 个段落支持参考答案的全部 {result.supported[top]} 条陈述。"
        self.result = result
        return self._finish(
            score=value if value is not None else 0.0,
            breakdown={
                **{f"recall@{c}": r for c, r in result.recall.items()},
                "claims": len(result.claims),
                "supported": result.supported.get(top, 0),
                "unsupported": result.unsupported.get(top, 0),
                "unjudged": result.unjudged.get(top, 0),
            },
            reason=reason,
            error=error,
            usage=result.usage,
            verbose_logs="\n".join(
                f"[{c.index + 1}] {c.status} (rank {c.support_rank}): {c.claim}" for c in result.claims
            ),
        )
