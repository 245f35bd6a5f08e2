"""From per-passage verdicts to one query's :class:`JudgeResult` (pure: no LLM calls).

Conventions (echoed in ``JudgeResult.conventions``):

* ``score`` = yes / judged; None when nothing was judged.
* Unjudged passages are *dropped* from the ranking before AP and NDCG (the passages after
  them move up); they are counted in ``unjudged`` and never treated as "no".
* ``ap``: average precision over the judged ranking with the no-ground-truth denominator
  (the number of relevant passages among the judged ones); 0.0 when none is relevant.
* ``ndcg[k]``: graded NDCG@k with linear gain; gains are the grades in graded mode and
  yes=1/no=0 in binary mode. IDCG comes from the judged list itself, or, with ``qrels``,
  from the pool of the judged list plus the qrels passages that were *not* retrieved
  (graded mode: their grades; binary mode: 1 for each qrels grade >= 1). A retrieved
  passage counts once, with the judge's gain, so the ideal ranking is always at least as
  good as the judged one and NDCG stays within [0, 1] however lenient the judge is.
  Empty when nothing was judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from judge.judging._config import JudgeConfig, resolve_config, template_for
from judge.judging._models import JudgeResult, PassageVerdict, UsageSummary
from judge.metrics import average_precision, ndcg

QRELS_BINARY_LEVEL = 1


def check_k(k: Sequence[int]) -> tuple[int, ...]:
    """Cutoffs as a tuple of positive ints, duplicates removed, order kept."""
    out: list[int] = []
    for value in k:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"cutoffs k must be positive integers, not {value!r}")
        if value not in out:
            out.append(value)
    return tuple(out)


def _gains(judged: Sequence[PassageVerdict], config: JudgeConfig) -> list[float]:
    gains: list[float] = []
    for v in judged:
        if config.mode == "graded":
            if v.grade is None:
                raise ValueError(f"verdict #{v.index} has no grade but the mode is graded")
            gains.append(float(v.grade))
        else:
            gains.append(1.0 if v.verdict == "yes" else 0.0)
    return gains


def _ideal(
    judged: Sequence[PassageVerdict],
    gains: Sequence[float],
    config: JudgeConfig,
    qrels: Mapping[str, int] | None,
) -> list[float]:
    pool = list(gains)
    if qrels is not None:
        retrieved = {v.passage_id for v in judged if v.passage_id is not None}
        missed = [g for pid, g in qrels.items() if pid not in retrieved]
        if config.mode == "graded":
            pool.extend(float(g) for g in missed if g > 0)
        else:
            pool.extend(1.0 for g in missed if g >= QRELS_BINARY_LEVEL)
    return sorted(pool, reverse=True)


def usage_of(verdicts: Sequence[PassageVerdict]) -> UsageSummary:
    """Calls, tokens and cost spent by *this* run: cached verdicts are counted as hits only."""
    fresh = [v for v in verdicts if not v.cached]
    return UsageSummary(
        calls=sum(v.attempts for v in fresh),
        cached=len(verdicts) - len(fresh),
        retries=sum(v.retries for v in fresh),
        reasks=sum(v.reasks for v in fresh),
        prompt_tokens=sum(v.tokens.prompt_tokens for v in fresh),
        completion_tokens=sum(v.tokens.completion_tokens for v in fresh),
        cost=sum(v.cost for v in fresh),
    )


def conventions_of(config: JudgeConfig, *, qrels_given: bool) -> dict[str, str | int | float]:
    # Callers that judged resolve the config against their backend first (judge_query, the
    # batch runner); a config that is still automatic here is read as having no backend.
    config = resolve_config(config, None)
    template = template_for(config)
    conventions: dict[str, str | int | float] = {
        "mode": config.mode,
        "decision": "p_yes" if config.probability else ("vote" if config.samples > 1 else "generated"),
        "ap_denominator": "judged_relevant",
        "idcg": "judged+unretrieved_qrels" if qrels_given else "judged",
        "gain": "linear",
        "ndcg_gains": "grade" if config.mode == "graded" else "yes=1,no=0",
        "grade_threshold": config.grade_threshold,
        "p_yes_threshold": config.decision_threshold,
        "unjudged": "dropped",
        "samples": config.samples,
        "template_id": template.id,
        "template_hash": template.hash,
    }
    if config.samples > 1:
        conventions["vote_ties"] = "lower grade" if config.mode == "graded" else "no"
    if config.probability and config.mode == "graded":
        conventions["graded_probability_grade"] = "argmax (ties to the lower grade)"
    if qrels_given and config.mode == "binary":
        conventions["qrels_relevance_level"] = QRELS_BINARY_LEVEL
    return conventions


def summarize(
    query: str,
    verdicts: Sequence[PassageVerdict],
    config: JudgeConfig,
    backend_name: str,
    *,
    k: Sequence[int] = (5, 10),
    qrels: Mapping[str, int] | None = None,
    reason: str = "",
) -> JudgeResult:
    """The metrics of one query from its verdicts, given in rank order (pure)."""
    cutoffs = check_k(k)
    judged = [v for v in verdicts if v.judged]
    score: float | None = None
    ap: float | None = None
    ndcgs: dict[int, float] = {}
    if judged:
        rel = np.array([1 if v.verdict == "yes" else 0 for v in judged], dtype=np.int64)
        score = float(rel.sum()) / len(judged)
        ap = float(average_precision(rel))
        gains = _gains(judged, config)
        ideal = np.array(_ideal(judged, gains, config, qrels), dtype=np.float64)
        gain_arr = np.array(gains, dtype=np.float64)
        ndcgs = {c: float(ndcg(gain_arr, ideal=ideal, k=c, gain="linear")) for c in cutoffs}
    return JudgeResult(
        query=query,
        mode=config.mode,
        backend=backend_name,
        verdicts=list(verdicts),
        score=score,
        ap=ap,
        ndcg=ndcgs,
        unjudged=len(verdicts) - len(judged),
        reason=reason,
        usage=usage_of(verdicts),
        conventions=conventions_of(config, qrels_given=qrels is not None),
    )


_LABELS = {"yes": "相关", "no": "不相关", "unjudged": "未判定"}


def verdict_lines(verdicts: Sequence[PassageVerdict], mode: str) -> str:
    """One line per passage for the summary prompt: ``[rank] label (grade g)：reason``."""
    lines = []
    for rank, v in enumerate(verdicts, start=1):
        grade = f"（{v.grade} 分）" if mode == "graded" and v.grade is not None else ""
        reason = v.reason.replace("\n", " ").strip() or ("无理由" if v.judged else (v.error or ""))
        lines.append(f"[{rank}] {_LABELS[v.verdict]}{grade}：{reason}")
    return "\n".join(lines)


def fallback_reason(verdicts: Sequence[PassageVerdict]) -> str:
    """A deterministic summary used when the summary call fails."""
    judged = [v for v in verdicts if v.judged]
    relevant = [rank for rank, v in enumerate(verdicts, start=1) if v.verdict == "yes"]
    text = f"共 {len(verdicts)} 个段落，{len(relevant)} 个相关，{len(judged) - len(relevant)} 个不相关"
    unjudged = len(verdicts) - len(judged)
    if unjudged:
        text += f"，{unjudged} 个未判定"
    if relevant:
        text += f"；第一个相关段落排在第 {relevant[0]} 位"
    return text + "。"
