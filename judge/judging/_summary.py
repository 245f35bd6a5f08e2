"""From per-passage verdicts to one query's :class:`JudgeResult` (pure: no LLM calls).

Every figure is a registry measure (:mod:`judge.metrics`) computed with the label-free
conventions (:data:`judge.metrics.LABEL_FREE`) on the verdicts turned into arrays by
:func:`judged_list`. Conventions (echoed in ``JudgeResult.conventions``):

* ``score`` = yes / judged (``set_P``); None when nothing was judged.
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
* ``measures``: any other registry measure (``P@3``, ``AP(rel=2)``, ``rbp(p=0.8)``) under
  the same conventions, by the name the caller gave it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from judge.judging._config import JudgeConfig, bind_language, resolve_config, template_for
from judge.judging._models import JudgeResult, Mode, PassageVerdict, UsageSummary
from judge.metrics import JudgedList, NamedMeasure, judge_measure, parse_named_measures

QRELS_BINARY_LEVEL = 1

JUDGE_AP = "AP"
JUDGE_SCORE = "set_P"


def check_k(k: Sequence[int]) -> tuple[int, ...]:
    """Cutoffs as a tuple of positive ints, duplicates removed, order kept."""
    out: list[int] = []
    for value in k:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"cutoffs k must be positive integers, not {value!r}")
        if value not in out:
            out.append(value)
    return tuple(out)


def judged_list(
    verdicts: Sequence[PassageVerdict],
    mode: Mode,
    *,
    qrels: Mapping[str, int] | None = None,
    grade_threshold: int = QRELS_BINARY_LEVEL,
) -> JudgedList:
    """The verdicts (rank order) as the arrays registry measures are computed on.

    Relevance is the verdict (``yes`` = 1); the gain is the grade in graded mode, yes=1/no=0
    in binary mode; an unjudged passage is -1 in both. With ``qrels``, the qrels passages
    no judged passage matches by id join the pool: gain = their grade (binary mode: 1 when
    the grade is >= 1, else 0), relevant when the grade is >= ``grade_threshold`` (graded
    mode; binary: >= 1). Negative qrels grades are left out.
    """
    relevant: list[int] = []
    gains: list[int] = []
    for v in verdicts:
        if not v.judged:
            relevant.append(-1)
            gains.append(-1)
            continue
        yes = 1 if v.verdict == "yes" else 0
        relevant.append(yes)
        if mode == "graded":
            if v.grade is None:
                raise ValueError(f"verdict #{v.index} has no grade but the mode is graded")
            gains.append(int(v.grade))
        else:
            gains.append(yes)
    pool_relevant: list[int] = []
    pool_gains: list[int] = []
    if qrels is not None:
        retrieved = {v.passage_id for v in verdicts if v.judged and v.passage_id is not None}
        level = grade_threshold if mode == "graded" else QRELS_BINARY_LEVEL
        for pid, grade in qrels.items():
            if pid in retrieved or grade < 0:
                continue
            pool_relevant.append(1 if grade >= level else 0)
            if mode == "graded":
                pool_gains.append(int(grade))
            else:
                pool_gains.append(1 if grade >= QRELS_BINARY_LEVEL else 0)
    return JudgedList(  # already normalised: -1 for unjudged in both arrays
        np.array(relevant, dtype=np.int64),
        np.array(gains, dtype=np.int64),
        np.array(pool_relevant, dtype=np.int64),
        np.array(pool_gains, dtype=np.int64),
    )


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
        "language": config.language,
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
    measures: Sequence[str] = (),
) -> JudgeResult:
    """The metrics of one query from its verdicts, given in rank order (pure).

    ``measures``: registry measures to compute besides score, AP and NDCG@k (``["P@3",
    "AP(rel=2)"]``, comma lists allowed), reported under the names given; ValueError names a
    bad one.
    """
    cutoffs = check_k(k)
    named = parse_named_measures(measures)
    if config.language == "auto":  # the language the verdicts' template says, else the query's
        by_template = {tid: lang for lang, tid in config.template_ids().items()}
        used = next((by_template[v.template_id] for v in verdicts if v.template_id in by_template), None)
        config = bind_language(config, query, language=used)
    listed = judged_list(verdicts, config.mode, qrels=qrels, grade_threshold=config.grade_threshold)
    score, ap, ndcgs = _figures(listed, cutoffs)
    return JudgeResult(
        query=query,
        mode=config.mode,
        backend=backend_name,
        verdicts=list(verdicts),
        score=score,
        ap=ap,
        ndcg=ndcgs,
        unjudged=len(verdicts) - listed.judged,
        reason=reason,
        usage=usage_of(verdicts),
        conventions=conventions_of(config, qrels_given=qrels is not None),
        measures=listed.values(named),
        measure_conventions=measure_conventions(named),
    )


Figures = tuple[float | None, float | None, dict[int, float]]
_FIGURES: dict[tuple[bytes, bytes, bytes, bytes, tuple[int, ...]], Figures] = {}
_FIGURES_KEPT = 4096


def _figures(listed: JudgedList, cutoffs: tuple[int, ...]) -> Figures:
    """``(score, ap, {k: ndcg@k})`` of a judged list. They depend on its arrays and the
    cutoffs only, and a query has few passages, so the same arrays recur all the time (5
    binary verdicts have 3^5 patterns): each is computed once and kept (the most recent
    few thousand), instead of a dozen small numpy operations per query."""
    key = (
        listed.relevant.tobytes(),
        listed.gains.tobytes(),
        listed.pool_relevant.tobytes(),
        listed.pool_gains.tobytes(),
        cutoffs,
    )
    found = _FIGURES.get(key)
    if found is None:
        ndcgs: dict[int, float] = {}
        if listed.judged:
            for c in cutoffs:
                value = listed.value(judge_measure(f"ndcg_cut_{c}"))
                assert value is not None  # pragma: no cover - judged passages exist
                ndcgs[c] = value
        found = (listed.value(judge_measure(JUDGE_SCORE)), listed.value(judge_measure(JUDGE_AP)), ndcgs)
        if len(_FIGURES) >= _FIGURES_KEPT:
            _FIGURES.pop(next(iter(_FIGURES)), None)
        _FIGURES[key] = found
    score, ap, ndcgs = found
    return score, ap, dict(ndcgs)


def measure_conventions(named: Sequence[NamedMeasure]) -> dict[str, dict[str, object]]:
    """``{name: parameters}`` of each user-chosen measure as computed on verdicts."""
    return {m.name: m.judge_conventions for m in named}


def with_measures(
    result: JudgeResult,
    measures: Sequence[str],
    *,
    qrels: Mapping[str, int] | None = None,
) -> JudgeResult:
    """``result`` with ``measures`` (registry measure names) computed on its verdicts, as
    :func:`summarize` computes them (``qrels``: the ones ``result`` was computed with)."""
    named = parse_named_measures(measures)
    if not named:
        return result
    threshold = int(result.conventions.get("grade_threshold", QRELS_BINARY_LEVEL))
    listed = judged_list(result.verdicts, result.mode, qrels=qrels, grade_threshold=threshold)
    return result.model_copy(
        update={
            "measures": {**result.measures, **listed.values(named)},
            "measure_conventions": {**result.measure_conventions, **measure_conventions(named)},
        }
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
