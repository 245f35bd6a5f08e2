"""The Python API: ``judge.evaluate`` / ``await judge.aevaluate``.

One query and its ranked passages in, one :class:`~judge.judging.JudgeResult` out: a
verdict per passage (input order) with reasons, the share of relevant passages (``score``),
AP, NDCG@k, the unjudged count, a summary reason and the usage (calls, tokens, cost).
``evaluate`` is ``aevaluate`` made synchronous (:func:`judge.backends.synchronous`: same signature, same
result). The settings of the call go through the one run resolution
(:func:`judge.batch.run_spec_from_kwargs`), as the command line's and the server's do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from judge.backends import CallPolicy, make_backend, synchronous
from judge.batch import run_spec_from_kwargs
from judge.io import SitePriors, read_site_priors
from judge.judging import (
    ExtraOptions,
    JudgeConfig,
    JudgeResult,
    Mode,
    Passage,
    VerdictStore,
    as_passage,
    judge_extras,
    judge_query,
    with_extras,
    with_measures,
)
from judge.metrics import parse_named_measures

__all__ = ["aevaluate", "evaluate"]


def _priors(value: SitePriors | Mapping[str, int] | str | Path | None) -> SitePriors | None:
    if value is None or isinstance(value, SitePriors):
        return value
    if isinstance(value, str | Path):
        return read_site_priors(value)
    return SitePriors(value)


async def aevaluate(
    query: str,
    retrieval_context: Sequence[str | Passage],
    *,
    backend: Any = None,
    mode: Mode | None = None,
    k: Sequence[int] = (5, 10),
    config: JudgeConfig | None = None,
    qrels: Mapping[str, int] | None = None,
    store: VerdictStore | None = None,
    summary: bool = True,
    base_url: str | None = None,
    measures: Sequence[str] = (),
    policy: CallPolicy | None = None,
    expected_output: str | None = None,
    source_quality: bool = False,
    site_priors: SitePriors | Mapping[str, int] | str | Path | None = None,
    concurrency: int | None = None,
    max_retries: int | None = None,
    timeout_s: float | None = None,
) -> JudgeResult:
    """Judge every passage of ``retrieval_context`` (rank order) for ``query``.

    ``backend``: a spec string (``qwen:qwen-plus``, ``openai:<model>``, ``local``), a
    Backend, a ``deepeval.models.DeepEvalBaseLLM``, a LangChain model (``Tongyi``,
    ``ChatTongyi``, any ``BaseLanguageModel``), or None (from the environment:
    ``DASHSCOPE_API_KEY`` -> Qwen, ``OPENAI_BASE_URL`` -> OpenAI-compatible, else the
    embedded model); always made resilient by :func:`judge.backends.make_backend` under
    ``policy`` (a :class:`~judge.backends.CallPolicy`; default: 16 calls in flight capped by
    the backend's limit, 60 s per call, 5 retries; a backend that is already resilient keeps
    its own policy unless one is given). ``concurrency``, ``max_retries``, ``timeout_s``: the
    same settings one by one instead of ``policy`` (None: the policy's default). ``mode``: ``binary`` or
    ``graded`` (default: ``config.mode``, i.e. binary). ``config``: every other judging
    setting (probability mode, thresholds, samples, template). ``qrels``: passage id ->
    grade, makes NDCG's IDCG come from them (passages need ids: pass :class:`Passage`).
    ``store``: a verdict cache. ``summary``: also ask for a summary reason (one more call).
    ``measures``: registry measures to report besides score, AP and NDCG@k (``["P@3",
    "AP(rel=2)", "rbp(p=0.8)"]``), in ``result.measures`` under the names given, computed
    with the label-free conventions echoed in ``result.measure_conventions``.
    ``expected_output``: a reference answer; adds ``result.contextual_recall`` (its claims,
    recall@k for each ``k``, the unsupported claims). ``source_quality``: grade each
    passage's source (``Passage(url=...)``) 0-3 and add ``result.source_quality``
    (quality@k, low-quality share, quality-weighted NDCG); ``site_priors`` (domain -> grade,
    or a priors file) override the judge for the sites they cover (alone, without
    ``source_quality``, they grade from the priors only). These calls are added to ``usage``.

    A backend resolved here from a spec or the environment is closed when the call ends
    (the embedded model is unloaded); to judge many queries, resolve it once with
    ``judge.resolve_backend()`` and pass the object.
    """
    if isinstance(retrieval_context, str):
        raise TypeError("retrieval_context must be a list of passages, not a single string")
    parse_named_measures(measures)  # a bad measure fails before any call
    priors = _priors(site_priors)
    passages = [as_passage(p) for p in retrieval_context]
    extras = ExtraOptions(
        recall=expected_output is not None, source_quality=source_quality, site_priors=priors
    )
    spec = run_spec_from_kwargs(
        config=config,
        mode=mode,
        policy=policy,
        concurrency=concurrency,
        max_retries=max_retries,
        timeout_s=timeout_s,
    )
    # No policy asked for: a backend that is already resilient keeps its own.
    asked = policy is not None or any(v is not None for v in (concurrency, max_retries, timeout_s))
    resolved = make_backend(backend, policy=spec.policy if asked else None, base_url=base_url)
    try:
        cfg = spec.config
        result = await judge_query(
            resolved, query, passages, cfg, store=store, k=k, qrels=qrels, with_summary=summary
        )
        if expected_output is None and not extras.wants_sources:
            return with_measures(result, measures, qrels=qrels)
        recall, sources = await judge_extras(
            resolved,
            query,
            passages,
            result.verdicts,
            cfg,
            extras,
            expected_output=expected_output,
            store=store,
            k=k,
        )
        return with_measures(with_extras(result, recall, sources), measures, qrels=qrels)
    finally:
        if backend is None or isinstance(backend, str):
            # Created here from a spec or the environment: ours to close. A backend object
            # passed in stays open (its owner closes it).
            await resolved.aclose()


evaluate = synchronous(aevaluate, "evaluate")
