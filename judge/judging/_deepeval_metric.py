"""``RelevancyJudge``: a deepeval metric that judges every retrieved passage.

Unlike deepeval's ``ContextualRelevancyMetric`` (which splits the context into statements),
this metric asks the judge once per passage of ``test_case.retrieval_context`` about
``test_case.input`` and scores the ranking:

* ``score`` (deepeval's meaning, compared with ``threshold``): the share of judged passages
  that are relevant. An empty ``retrieval_context`` scores 0.0. When no passage could be
  judged, ``score`` is 0.0 and ``error`` says why (so deepeval reports a failure, not a
  silent zero).
* ``result``: the full :class:`JudgeResult` (verdicts with reasons, AP, NDCG@k, unjudged,
  usage); ``score_breakdown`` a compact dict of the same metrics.
* qrels: ``LLMTestCase(metadata={"qrels": {"passage-id": grade, ...}})`` (deepeval also
  accepts the older name ``additional_metadata``) makes IDCG come from them;
  ``metadata["passage_ids"]`` (a list parallel to ``retrieval_context``) names the passages
  in the verdicts.

Sharing one instance across concurrent test cases is safe: a measurement keeps its state
in local variables and assigns the attributes only at the end (``deepeval.evaluate`` also
copies the metric per test case; the copies share the resolved backend and its limiter).
"""

from __future__ import annotations

import judge._env  # noqa: F401  # must precede deepeval: telemetry off, read-only file system

# isort: split
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from deepeval.errors import MissingTestCaseParamsError
from deepeval.metrics import BaseMetric
from deepeval.test_case import LLMTestCase, SingleTurnParams

from judge.backends import CallPolicy, make_backend, run_sync
from judge.judging._config import JudgeConfig, Passage, VerdictStore
from judge.judging._core import judge_query
from judge.judging._models import JudgeResult, Mode
from judge.judging._summary import check_k


class _Usage(Protocol):
    @property
    def cost(self) -> float: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...


class JudgeMetric(BaseMetric):  # type: ignore[misc,no-untyped-call]  # deepeval is untyped
    """What every ``judge`` deepeval metric shares: the resilient backend made from
    ``backend`` under ``policy``, the pass threshold (1.0 with ``strict_mode``), the cutoffs,
    the sync wrapper of ``a_measure`` and how a finished measurement is recorded on the
    metric (score, breakdown, reason, error, cost, tokens, logs, success)."""

    def __init__(
        self,
        backend: Any = None,
        *,
        threshold: float = 0.5,
        k: Sequence[int] = (5, 10),
        config: JudgeConfig | None = None,
        include_reason: bool = True,
        async_mode: bool = True,
        strict_mode: bool = False,
        store: VerdictStore | None = None,
        policy: CallPolicy | None = None,
    ) -> None:
        self.config = config if config is not None else JudgeConfig()
        self.backend = make_backend(backend, policy=policy)
        self.threshold = 1.0 if strict_mode else float(threshold)
        self.k = check_k(k)
        self.include_reason = include_reason
        self.async_mode = async_mode
        self.strict_mode = strict_mode
        self.store = store
        self.verbose_mode = False
        self.evaluation_model = self.backend.name
        self.using_native_model = False
        self.score_breakdown: dict[str, Any] = {}

    def measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        """Sync wrapper of :meth:`a_measure` (same result)."""
        return run_sync(self.a_measure(test_case))

    def _finish(
        self,
        *,
        score: float,
        breakdown: dict[str, Any],
        reason: str,
        error: str | None,
        usage: _Usage,
        verbose_logs: str,
    ) -> float:
        """Assign every attribute from one finished measurement (at the very end of it)."""
        self.score = score
        self.score_breakdown = breakdown
        self.reason = reason if self.include_reason or error else None
        self.error = error
        self.evaluation_cost = usage.cost
        self.input_tokens = usage.prompt_tokens
        self.output_tokens = usage.completion_tokens
        self.verbose_logs = verbose_logs
        self.success = error is None and score >= self._threshold()
        return score

    def _threshold(self) -> float:
        return 0.0 if self.threshold is None else float(self.threshold)

    def is_successful(self) -> bool:
        if self.error is not None or self.score is None:
            self.success = False
        else:
            self.success = bool(self.score >= self._threshold())
        return bool(self.success)


class RelevancyJudge(JudgeMetric):  # type: ignore[misc,no-untyped-call]  # deepeval is untyped
    """One LLM verdict per retrieved passage; ``score`` = share of relevant passages.

    ``backend``: spec string, Backend, ``DeepEvalBaseLLM``, LangChain model or None (from
    the environment); made resilient by :func:`judge.backends.make_backend` under ``policy``.
    ``mode``: ``binary`` or ``graded`` (overrides ``config.mode`` when both are given).
    ``threshold``: the score needed to pass (1.0 with ``strict_mode``). ``k``: NDCG
    cutoffs. ``include_reason``: ask for a summary reason. ``store``: an optional verdict
    cache.
    """

    _required_params = [  # type: ignore[assignment]  # noqa: RUF012  # deepeval's attribute
        SingleTurnParams.INPUT,
        SingleTurnParams.RETRIEVAL_CONTEXT,
    ]

    def __init__(
        self,
        backend: Any = None,
        *,
        mode: Mode | None = None,
        threshold: float = 0.5,
        k: Sequence[int] = (5, 10),
        config: JudgeConfig | None = None,
        include_reason: bool = True,
        async_mode: bool = True,
        strict_mode: bool = False,
        store: VerdictStore | None = None,
        policy: CallPolicy | None = None,
    ) -> None:
        base = config if config is not None else JudgeConfig()
        super().__init__(
            backend,
            config=replace(base, mode=mode) if mode is not None and mode != base.mode else base,
            threshold=threshold,
            k=k,
            include_reason=include_reason,
            async_mode=async_mode,
            strict_mode=strict_mode,
            store=store,
            policy=policy,
        )
        self.mode: Mode = self.config.mode
        self.result: JudgeResult | None = None

    @property
    def __name__(self) -> str:  # type: ignore[override]  # deepeval uses a property here
        return "Relevancy Judge"

    async def a_measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        query, passages, qrels = _inputs(test_case, self)
        result = await judge_query(
            self.backend,
            query,
            passages,
            self.config,
            store=self.store,
            k=self.k,
            qrels=qrels,
            with_summary=self.include_reason and bool(passages),
        )
        return self._record(result)

    def _record(self, result: JudgeResult) -> float:
        """Assign every attribute from one finished result (at the very end of a measure)."""
        judged = len(result.verdicts) - result.unjudged
        error: str | None = None
        if not result.verdicts:
            reason = "检索结果为空：没有可评估的段落。"
        elif judged == 0:
            first = next((v.error for v in result.verdicts if v.error), None)
            error = f"none of the {result.unjudged} passages could be judged: {first}"
            reason = error
        else:
            reason = result.reason
        score = result.score if result.score is not None else 0.0
        breakdown: dict[str, Any] = {
            "relevant": sum(v.verdict == "yes" for v in result.verdicts),
            "judged": judged,
            "unjudged": result.unjudged,
            "ap": result.ap,
            **{f"ndcg@{c}": value for c, value in result.ndcg.items()},
        }
        self.result = result
        return self._finish(
            score=score,
            breakdown=breakdown,
            reason=reason,
            error=error,
            usage=result.usage,
            verbose_logs=_verbose_logs(result),
        )


def _inputs(
    test_case: LLMTestCase, metric: BaseMetric
) -> tuple[str, list[Passage], Mapping[str, int] | None]:
    query = getattr(test_case, "input", None)
    context = getattr(test_case, "retrieval_context", None)
    if not isinstance(query, str) or not query.strip() or context is None:
        raise MissingTestCaseParamsError(
            f"{metric.__name__} needs 'input' and 'retrieval_context' on the test case"
        )
    if isinstance(context, str) or not all(isinstance(c, str) for c in context):
        raise TypeError("retrieval_context must be a list of strings")
    meta = getattr(test_case, "metadata", None) or {}
    ids = meta.get("passage_ids")
    if ids is not None and (len(ids) != len(context) or not all(isinstance(i, str) for i in ids)):
        raise ValueError("metadata['passage_ids'] must list one string id per passage")
    passages = [Passage(text=text, id=ids[i] if ids else None) for i, text in enumerate(context)]
    qrels = meta.get("qrels")
    if qrels is not None and not _is_qrels(qrels):
        raise ValueError("metadata['qrels'] must map passage ids to integer grades")
    return query, passages, qrels


def _is_qrels(value: object) -> bool:
    if not isinstance(value, Mapping):
        return False
    return all(
        isinstance(k, str) and isinstance(g, int) and not isinstance(g, bool) for k, g in value.items()
    )


def _verbose_logs(result: JudgeResult) -> str:
    lines = []
    for v in result.verdicts:
        grade = f" grade={v.grade}" if v.grade is not None else ""
        note = v.reason or (v.error or "")
        lines.append(f"[{v.index + 1}] {v.verdict}{grade}: {note}")
    ndcg = ", ".join(f"NDCG@{c}={x:.4f}" for c, x in result.ndcg.items())
    ap = "n/a" if result.ap is None else f"{result.ap:.4f}"
    lines.append(f"AP={ap} {ndcg} unjudged={result.unjudged}")
    return "\n".join(lines)
