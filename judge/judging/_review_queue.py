"""Human review of verdicts (pure): a label overriding a verdict, and the review queue.

**Override** (:func:`apply_label`): a reviewer's label, already on the job's scale, replaces
the verdict: binary ``label`` 1/0 is ``yes``/``no``; graded, the grade is the label and the
verdict is ``yes`` iff grade >= ``grade_threshold``. P(yes) becomes 1.0/0.0 (so expected
metrics treat the passage as certain), ``expected_grade`` the grade, ``confidence`` 1.0;
``source`` is ``human``, ``reviewer`` names the reviewer and ``replaced`` keeps the judge's
verdict: the model's own, before any ``--adapt`` rule decided it (:func:`model_verdict_of`),
with its P(yes) and reason. :func:`judge_verdict_of` undoes the override (overrides are
re-applied from the judge's verdict, never stacked).

**Review queue** (:func:`review_queue`): the unreviewed verdicts in order of how much a
label is expected to change the figures, ``priority = flip_probability * weight``, largest
first:

* ``flip_probability``: how likely the label reverses the verdict, from P(yes) read relative
  to the threshold the verdict was decided at (``q = sigmoid(logit(P(yes)) -
  logit(threshold))``: P(yes) at the threshold is a coin toss; a "no" flips with ``q``, a
  "yes" with ``1 - q``), so the verdicts nearest the threshold come first; 1.0 for an
  unjudged passage (its label decides it), 0.5 for a verdict without P(yes);
* ``weight``: how much the figure moves if it does. A candidate may carry its exact
  ``impact`` (:func:`judge.batch.job_review_queue` gives the change of the job's mAP when
  the verdict flips, which is larger at the top of a list); otherwise the rank discount
  ``1 / log2(rank + 1)`` (NDCG's: rank 1 weighs 1.0, rank 9 0.30), the best over the lists
  it sits in, doubled in a comparison when the passage sits in some systems' lists and not
  in the others' (its label moves one system's figure and not the other's);
* ties: nearer the threshold first, then qid, best rank, docno.

Every ``audit_every``-th item (5th, 10th, ...) is instead drawn uniformly at random (seeded)
from the candidates not yet queued and flagged ``audit``: agreement measured on those items
is an unbiased estimate, while the priority-picked items over-represent hard cases.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from judge.judging._models import PassageVerdict, ReplacedVerdict

__all__ = [
    "AUDIT_EVERY",
    "QueueCandidate",
    "QueueItem",
    "apply_label",
    "candidates_from_comparison",
    "candidates_from_records",
    "flip_probability",
    "judge_verdict_of",
    "model_verdict_of",
    "rank_discount",
    "review_queue",
    "threshold_of",
]

AUDIT_EVERY = 5


def apply_label(
    verdict: PassageVerdict,
    label: int,
    *,
    mode: str,
    reviewer: str,
    grade_threshold: int = 1,
    comment: str = "",
) -> PassageVerdict:
    """``verdict`` decided by a reviewer's ``label`` (on the job's scale: 0/1 binary, 0-3
    graded); an earlier override is replaced, the judge's own verdict (never an ``--adapt``
    rule's: :func:`model_verdict_of`) is kept in ``replaced``. The rule's ``p_adapted`` and
    ``adapted`` stay on the passage for inspection."""
    base = judge_verdict_of(verdict)
    own = model_verdict_of(base)
    if mode == "graded":
        if not 0 <= label <= 3:
            raise ValueError(f"a graded label must be 0..3, not {label}")
        yes = label >= grade_threshold
        grade: int | None = label
        expected: float | None = float(label)
    else:
        if label not in (0, 1):
            raise ValueError(f"a binary label must be 0 or 1, not {label}")
        yes = label == 1
        grade = None
        expected = None
    replaced = ReplacedVerdict(
        verdict=own.verdict,
        grade=own.grade,
        p_yes=own.p_yes,
        expected_grade=own.expected_grade,
        confidence=own.confidence,
        probs=own.probs,
        reason=own.reason,
    )
    return base.model_copy(
        update={
            "verdict": "yes" if yes else "no",
            "grade": grade,
            "p_yes": 1.0 if yes else 0.0,
            "expected_grade": expected,
            "confidence": 1.0,
            "probs": None,
            "reason": comment,
            "error": None,
            "source": "human",
            "reviewer": reviewer,
            "replaced": replaced,
        }
    )


def judge_verdict_of(verdict: PassageVerdict) -> PassageVerdict:
    """The judge's own verdict behind a (possibly) human-decided one."""
    r = verdict.replaced
    if verdict.source != "human" or r is None:
        return verdict
    return verdict.model_copy(
        update={
            "verdict": r.verdict,
            "grade": r.grade,
            "p_yes": r.p_yes,
            "expected_grade": r.expected_grade,
            "confidence": r.confidence,
            "probs": r.probs,
            "reason": r.reason,
            "source": "judge",
            "reviewer": None,
            "replaced": None,
        }
    )


def model_verdict_of(verdict: PassageVerdict) -> PassageVerdict:
    """The model's own verdict behind a (possibly) human-decided and ``--adapt``-decided one:
    the override undone, then the rule's verdict (``adapted.judge_verdict`` is the model's),
    without ``p_adapted`` and ``adapted``."""
    base = judge_verdict_of(verdict)
    if base.adapted is None:
        return base
    return base.model_copy(update={"verdict": base.adapted.judge_verdict, "p_adapted": None, "adapted": None})


def rank_discount(rank: int) -> float:
    """``1 / log2(rank + 1)`` for a 1-based rank (NDCG's discount)."""
    return 1.0 / math.log2(rank + 1)


@dataclass(frozen=True)
class QueueCandidate:
    """One passage that could be reviewed: where it sits (``ranks``: list name -> 1-based
    rank; a job has one list), the judge's verdict and P(yes)."""

    qid: str
    docno: str
    ranks: Mapping[str, int]
    verdict: str
    p_yes: float | None = None
    query: str | None = None
    template_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    impact: float | None = None


@dataclass(frozen=True)
class QueueItem:
    """A queued candidate, its position (1-based), the figures that placed it (``priority``
    = ``flip_probability * weight``, the expected change of the figure; larger first) and
    whether it is an audit item (drawn uniformly, not by priority)."""

    candidate: QueueCandidate
    position: int
    distance: float
    weight: float
    priority: float
    audit: bool
    flip_probability: float = 0.0

    @property
    def qid(self) -> str:
        return self.candidate.qid

    @property
    def docno(self) -> str:
        return self.candidate.docno

    def as_dict(self) -> dict[str, Any]:
        c = self.candidate
        return {
            "position": self.position,
            "qid": c.qid,
            "docno": c.docno,
            "query": c.query,
            "ranks": dict(c.ranks),
            "verdict": c.verdict,
            "p_yes": c.p_yes,
            "template_id": c.template_id,
            "distance": round(self.distance, 6),
            "flip_probability": round(self.flip_probability, 6),
            "weight": round(self.weight, 6),
            "priority": round(self.priority, 6),
            "audit": self.audit,
            **dict(c.extra),
        }


def _distance(c: QueueCandidate, threshold: float) -> float:
    if c.verdict == "unjudged":
        return 0.0
    if c.p_yes is None:
        return 0.5
    return abs(float(c.p_yes) - threshold)


def _logit(p: float) -> float:
    q = min(1.0 - 1e-9, max(1e-9, p))
    return math.log(q / (1.0 - q))


def flip_probability(verdict: str, p_yes: float | None, threshold: float) -> float:
    """How likely a label reverses the verdict: P(relevant) read relative to the threshold
    the verdict was decided at (``sigmoid(logit(P(yes)) - logit(threshold))``, so a P(yes)
    at the threshold is a coin toss), of the other side; 1.0 for an unjudged passage (the
    label decides it), 0.5 for a verdict without P(yes)."""
    if verdict == "unjudged":
        return 1.0
    if p_yes is None:
        return 0.5
    q = 1.0 / (1.0 + math.exp(-(_logit(float(p_yes)) - _logit(threshold))))
    return 1.0 - q if verdict == "yes" else q


def _weight(c: QueueCandidate, lists: int) -> float:
    if c.impact is not None:
        return max(0.0, float(c.impact))
    if not c.ranks:
        return 0.0
    w = max(rank_discount(r) for r in c.ranks.values())
    if lists > 1 and len(c.ranks) < lists:
        w *= 2.0
    return w


def review_queue(
    candidates: Iterable[QueueCandidate],
    *,
    threshold: float = 0.5,
    reviewed: Collection[tuple[str, str]] = (),
    lists: int = 1,
    audit_every: int = AUDIT_EVERY,
    seed: int = 0,
    limit: int | None = None,
) -> list[QueueItem]:
    """The unreviewed ``candidates`` in review order (see the module doc).

    ``reviewed``: (qid, docno) pairs that already have a label (left out). ``lists``: how
    many ranked lists are compared (1 for a job; a passage in fewer than ``lists`` of them
    weighs double). ``audit_every``: every n-th item is a seeded uniform draw (0: none).
    ``limit``: stop after this many items. A (qid, docno) appears once (the first
    candidate given for it)."""
    seen: set[tuple[str, str]] = set(reviewed)
    pool: list[tuple[float, float, float, float, QueueCandidate]] = []
    for c in candidates:
        key = (c.qid, c.docno)
        if key in seen:
            continue
        seen.add(key)
        pf = flip_probability(c.verdict, c.p_yes, threshold)
        w = _weight(c, lists)
        pool.append((pf * w, _distance(c, threshold), w, pf, c))
    pool.sort(key=lambda x: (-x[0], x[1], x[4].qid, min(x[4].ranks.values(), default=0), x[4].docno))
    rng = random.Random(seed)
    taken = [False] * len(pool)
    out: list[QueueItem] = []
    cursor = 0
    total = len(pool) if limit is None else min(limit, len(pool))
    while len(out) < total:
        position = len(out) + 1
        if audit_every > 0 and position % audit_every == 0:
            free = [i for i, t in enumerate(taken) if not t]
            pick = free[rng.randrange(len(free))]
            audit = True
        else:
            while taken[cursor]:
                cursor += 1
            pick = cursor
            audit = False
        taken[pick] = True
        prio, d, w, pf, c = pool[pick]
        out.append(QueueItem(c, position, d, w, prio, audit, pf))
    return out


def candidates_from_records(
    records: Sequence[Mapping[str, Any]], *, list_name: str = "job"
) -> list[QueueCandidate]:
    """Queue candidates from ``judge score`` output records (one list per query; verdicts
    already decided by a person are left out)."""
    out: list[QueueCandidate] = []
    for r in records:
        qid = str(r["id"])
        for rank, (v, docno) in enumerate(zip(r["verdicts"], r["docnos"], strict=True), start=1):
            if v.get("source") == "human":
                continue
            out.append(
                QueueCandidate(
                    qid=qid,
                    docno=str(docno),
                    ranks={list_name: rank},
                    verdict=str(v["verdict"]),
                    p_yes=v.get("p_yes"),
                    query=r.get("query"),
                    template_id=v.get("template_id"),
                    extra={"index": rank - 1, "reason": v.get("reason", ""), "grade": v.get("grade")},
                )
            )
    return out


def threshold_of(record: Mapping[str, Any], default: float = 0.5) -> float:
    """The P(yes) threshold a record's verdicts were decided at (its conventions)."""
    value = (record.get("conventions") or {}).get("p_yes_threshold")
    return float(value) if isinstance(value, int | float) else default


def candidates_from_comparison(
    records: Sequence[Mapping[str, Any]], rankings: Mapping[str, Mapping[str, Sequence[str]]]
) -> list[QueueCandidate]:
    """Queue candidates of a comparison: the judged pool's records (``pool.judged.jsonl``,
    one per query) and each system's ranking (``{system: {qid: [docno, ...]}}``, qids as
    TREC tokens); a candidate's ``ranks`` name the systems whose list holds it. Use with
    ``review_queue(..., lists=len(rankings))``."""
    out: list[QueueCandidate] = []
    positions: dict[str, dict[str, dict[str, int]]] = {}
    for name, by_qid in rankings.items():
        for qid, docnos in by_qid.items():
            per = positions.setdefault(qid, {})
            for rank, docno in enumerate(docnos, start=1):
                per.setdefault(str(docno), {}).setdefault(name, rank)
    for r in records:
        qid = "_".join(str(r["id"]).split()) or "_"
        for index, (v, docno) in enumerate(zip(r["verdicts"], r["docnos"], strict=True)):
            if v.get("source") == "human":
                continue
            ranks = positions.get(qid, {}).get(str(docno), {})
            if not ranks:
                continue
            out.append(
                QueueCandidate(
                    qid=qid,
                    docno=str(docno),
                    ranks=dict(ranks),
                    verdict=str(v["verdict"]),
                    p_yes=v.get("p_yes"),
                    query=r.get("query"),
                    template_id=v.get("template_id"),
                    extra={"index": index, "reason": v.get("reason", ""), "grade": v.get("grade")},
                )
            )
    return out
