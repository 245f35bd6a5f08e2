"""``--adapt``: the decision rule a run's labels teach, applied to a run's records.

:func:`adapt_records` reads every passage's model verdict (an earlier adaptation and any
human override undone first, so applying it again is idempotent), pairs it with the run's
labels (put on the binary scale by the stated mapping, as for agreement), and fits
:func:`judge.metrics.fit_adaptation`: the judge's log-odds at its threshold, the same centred
on its query's judged passages, weighted by a ridge logistic regression on the labels,
judged by leaving each labelled query out, with any extra feature columns from the caller
(``features``, e.g. the encoder's query similarity and relevance feedback) in the same
fit. When the held-out κ of the rule beats the judge alone's, every
judged passage keeps its ``p_yes``, gains ``p_adapted`` and takes the rule's verdict
(``adapted`` records the method, the labels' hash and the judge's own verdict); a labelled
passage's ``p_adapted`` comes from the rule fitted without its query's labels. Otherwise
the records keep the judge's verdicts and the block says why. The labels themselves are
applied afterwards by :func:`judge.batch.apply_labels`, as without ``--adapt``.

The block (the summary's ``adaptation``) names the labels it learned from by their
SHA-256 (``labels_sha256``): the verdict cache holds the model's verdicts only, so a rerun
with another label set re-decides every passage from them, shows the new hash, and says
that it did (``relearned``, with the earlier hashes the output's verdicts carried).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judge.batch._label_apply import record_with_verdicts
from judge.batch._records import verdicts_of
from judge.judging import AdaptedBy, JudgeConfig, PassageVerdict, model_verdict_of, threshold_of
from judge.metrics import fit_adaptation
from judge.store import LabelSet

__all__ = ["AdaptPair", "FeatureFn", "adapt_records", "check_adapt", "model_verdict_of"]


@dataclass(frozen=True)
class AdaptPair:
    """One passage the rule decides: its query, docno, P(yes) (None: unjudged) and label
    (1, 0, or None: unlabelled)."""

    qid: str
    docno: str
    query: str | None
    p_yes: float | None
    label: int | None


FeatureFn = Callable[[Sequence[AdaptPair]], Mapping[str, Sequence[float]]]
"""Extra feature columns for the rule, one value per pair (e.g. the encoder's query similarity
and relevance feedback); a column that reads the labels must leave each pair's own label out."""


def check_adapt(config: JudgeConfig, *, labels: LabelSet | None, examples_active: bool) -> None:
    """Refuse ``--adapt`` where it cannot learn (before any call): no labels, no P(yes)
    (generation), a graded run, or ``--examples`` (labelled passages are then not judged).
    An InputError naming ``--adapt``."""
    from judge.io import InputError

    if labels is None:
        raise InputError("needs the run's labels (--labels FILE|store, or --qrels)", field="--adapt")
    if config.mode != "binary":
        raise InputError("adapts binary verdicts only; drop --mode graded", field="--adapt")
    if config.probability is False:
        raise InputError("needs each passage's P(yes): use --probability", field="--adapt")
    if examples_active:
        raise InputError(
            "cannot be used with --examples: a labelled passage is then never judged, so the "
            "rule would have nothing to learn from",
            field="--adapt",
        )


def labels_sha256(pairs: Sequence[AdaptPair]) -> str:
    """SHA-256 of the labelled pairs the rule learned from (``qid\\tdocno\\tlabel`` lines, sorted)."""
    lines = sorted(f"{p.qid}\t{p.docno}\t{p.label}\n" for p in pairs if p.label is not None)
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def _pairs(
    records: Sequence[Mapping[str, Any]], labels: LabelSet, level: int | None, yes_grade: int | None
) -> tuple[list[AdaptPair], list[float], list[list[PassageVerdict]]]:
    mappings = labels.mapping_to("binary", level=level, yes_grade=yes_grade, target_name="--adapt")
    pairs: list[AdaptPair] = []
    thresholds: list[float] = []
    models: list[list[PassageVerdict]] = []
    for r in records:
        qid = str(r["id"])
        query = r.get("query") if isinstance(r.get("query"), str) else None
        t = threshold_of(r)
        per: list[PassageVerdict] = []
        for v, docno in zip(verdicts_of(r), r["docnos"], strict=True):
            base = model_verdict_of(v)
            per.append(base)
            hit = labels.lookup(qid, str(docno), query)
            label = None if hit is None else mappings[hit.label.scale].apply(hit.value)
            p = base.p_yes if base.judged else None
            pairs.append(AdaptPair(qid, str(docno), query, p, label if p is not None else None))
            thresholds.append(t)
        models.append(per)
    return pairs, thresholds, models


def adapt_records(
    records: Sequence[Mapping[str, Any]],
    labels: LabelSet,
    *,
    k: Sequence[int] = (5, 10),
    measures: Sequence[str] = (),
    level: int | None = None,
    yes_grade: int | None = None,
    features: FeatureFn | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(records, block)``: the records decided by the rule when it helps (else by the
    judge, every earlier adaptation undone), and the summary's ``adaptation`` block."""
    pairs, thresholds, models = _pairs(records, labels, level, yes_grade)
    extra = dict(features(pairs)) if features is not None and pairs else {}
    fit = fit_adaptation(
        [p.p_yes for p in pairs],
        [p.qid for p in pairs],
        [p.label for p in pairs],
        thresholds if thresholds else 0.5,
        extra=extra,
        resamples=resamples,
        seed=seed,
    )
    digest = labels_sha256(pairs)
    earlier = sorted(
        {v.adapted.labels_sha256 for r in records for v in verdicts_of(r) if v.adapted is not None} - {digest}
    )
    how = AdaptedBy(method=fit.method, labels_sha256=digest, judge_verdict="no")
    out: list[dict[str, Any]] = []
    i = 0
    for r, per in zip(records, models, strict=True):
        verdicts: list[PassageVerdict] = []
        changed = False
        for v, base in zip(verdicts_of(r), per, strict=True):
            decision, p_adapted = fit.decisions[i], fit.p_adapted[i]
            i += 1
            if fit.applied and decision is not None and p_adapted is not None and base.judged:
                base = base.model_copy(
                    update={
                        "verdict": "yes" if decision else "no",
                        "p_adapted": p_adapted,
                        "adapted": how.model_copy(update={"judge_verdict": base.verdict}),
                    }
                )
            verdicts.append(base)
            changed = changed or base != v
        if not changed:
            out.append(dict(r))
            continue
        out.append(record_with_verdicts(r, verdicts, k, measures))
    block = fit.block() | {
        "labels_sha256": digest,
        "decided": sum(1 for d in fit.decisions if d is not None) if fit.applied else 0,
        "changed": _changed(pairs, fit.decisions, thresholds) if fit.applied else 0,
        "decision": "yes iff p_adapted >= 0.5 (the judge alone: P(yes) >= its threshold)",
    }
    if earlier:  # the output was adapted before from other labels: re-decided, and said so
        block["relearned_from"] = earlier
        block["relearned"] = (
            f"this output was adapted before from other labels ({', '.join(h[:12] for h in earlier)}); "
            f"every passage was decided again from the labels {digest[:12]}"
        )
    return out, block


def _changed(pairs: Sequence[AdaptPair], decisions: Sequence[int | None], thresholds: Sequence[float]) -> int:
    """Passages whose adapted verdict differs from the judge's own."""
    return sum(
        1
        for p, d, t in zip(pairs, decisions, thresholds, strict=True)
        if d is not None and p.p_yes is not None and int(p.p_yes >= t) != d
    )
