"""Human labels win: apply a :class:`judge.store.LabelSet` to ``judge score`` records.

For every passage of every record with a label (matched by qid + docno, see
:mod:`judge.store._label_model`), the verdict is replaced by :func:`judge.judging.apply_label`
(the label first put on the record's scale by the one stated mapping,
:func:`judge.metrics.resolve_mapping`: graded labels on a binary job need ``level``, binary
labels on a graded job ``yes_grade``; otherwise :class:`judge.metrics.ScaleError` names
both scales). The record's metrics are then recomputed by the code that computed them
(:func:`judge.judging.summarize` figures via :func:`finish_record`), and the summary by
:func:`summarize_records`, which counts the passages and queries people decided under
``human_labels``. Applying labels is idempotent: earlier overrides are undone first, so a
record re-labelled with another label set reflects only that set.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from judge.batch._driver import QueryWork
from judge.batch._records import finish_record, label_changed, verdicts_of
from judge.judging import (
    AUDIT_EVERY,
    JudgeConfig,
    JudgeResult,
    PassageVerdict,
    QueueItem,
    UsageSummary,
    apply_label,
    bind_language,
    candidates_from_comparison,
    candidates_from_records,
    judge_verdict_of,
    judged_list,
    measure_conventions,
    review_queue,
    template_for,
    threshold_of,
)
from judge.metrics import Scale, ScaleMapping, judge_measure, parse_named_measures, resolve_mapping
from judge.store import DEFAULT_COLLECTION, Label, LabelSet, ResolvedLabel

if TYPE_CHECKING:  # scipy-backed; imported when agreement is asked for
    from judge.metrics import AgreementItem, AgreementReport

__all__ = [
    "LabelOutcome",
    "agreement_items",
    "apply_labels",
    "comparison_review_queue",
    "job_agreement",
    "job_review_queue",
    "label_for_passage",
    "labelled_verdict",
    "labels_decide",
    "map_impacts",
    "relabel_record",
]


@dataclass(frozen=True)
class LabelOutcome:
    """Records with labels applied and what happened: ``applied`` passages decided by
    people, ``changed`` of them where the label differs from the judge's verdict,
    ``queries`` touched, ``unmatched`` labels no record passage carries (a passage that took
    its label under ``--examples``, never judged, is applied but never changed), ``mapping`` the
    scale mappings used (by source scale)."""

    records: list[dict[str, Any]]
    applied: int
    changed: int
    queries: int
    unmatched: int
    mapping: Mapping[str, Mapping[str, object]]


def _grade_threshold(record: Mapping[str, Any]) -> int:
    value = (record.get("conventions") or {}).get("grade_threshold", 1)
    return int(value) if isinstance(value, int | float) else 1


def _result_of(
    record: Mapping[str, Any], verdicts: list[PassageVerdict], k: Sequence[int], measures: Sequence[str]
) -> JudgeResult:
    """The record's :class:`JudgeResult` recomputed from ``verdicts`` with the figures and
    conventions :func:`judge.judging.summarize` uses (no qrels in the IDCG: batch records
    are computed without them)."""
    mode = str(record.get("mode", "binary"))
    listed = judged_list(verdicts, mode, grade_threshold=_grade_threshold(record))  # type: ignore[arg-type]
    ndcg: dict[int, float] = {}
    if listed.judged:
        for c in k:
            value = listed.value(judge_measure(f"ndcg_cut_{c}"))
            assert value is not None
            ndcg[c] = value
    named = parse_named_measures(measures)
    conventions = {
        key: value
        for key, value in (record.get("conventions") or {}).items()
        if isinstance(value, str | int | float)
    }
    return JudgeResult(
        query=str(record.get("query", "")),
        mode=mode,  # type: ignore[arg-type]
        backend=str(record.get("backend", "")),
        verdicts=verdicts,
        score=listed.value(judge_measure("set_P")),
        ap=listed.value(judge_measure("AP")),
        ndcg=ndcg,
        unjudged=len(verdicts) - listed.judged,
        usage=UsageSummary.model_validate(record.get("usage") or {}, strict=False),
        conventions=conventions,
        measures=listed.values(named),
        measure_conventions=measure_conventions(named),
    )


def labelled_verdict(
    verdict: PassageVerdict,
    hit: ResolvedLabel,
    mappings: Mapping[Scale, ScaleMapping],
    *,
    mode: str,
    grade_threshold: int,
) -> PassageVerdict:
    """``verdict`` decided by the label ``hit`` (put on the job's scale by its stated mapping,
    reviewer and comment kept; :func:`judge.judging.apply_label`: ``replaced`` holds the
    judge's own verdict): the one way a batch run, a stability run and ``--examples`` apply
    a label."""
    return apply_label(
        verdict,
        mappings[hit.label.scale].apply(hit.value),
        mode=mode,
        reviewer=hit.label.reviewer,
        grade_threshold=grade_threshold,
        comment=hit.label.comment,
    )


def relabel_record(
    record: Mapping[str, Any],
    labels: LabelSet,
    mappings: Mapping[Scale, ScaleMapping],
    k: Sequence[int],
    *,
    measures: Sequence[str] = (),
) -> tuple[dict[str, Any], int, int]:
    """One record with ``labels`` applied (earlier overrides undone first) and its figures
    recomputed; returns (record, passages decided by people, of which changed)."""
    mode = str(record.get("mode", "binary"))
    threshold = _grade_threshold(record)
    qid = str(record["id"])
    query = record.get("query")
    verdicts: list[PassageVerdict] = []
    applied = changed = 0
    touched = False
    for v, docno in zip(verdicts_of(record), record["docnos"], strict=True):
        base = judge_verdict_of(v)
        touched = touched or base is not v
        hit = labels.lookup(qid, str(docno), query if isinstance(query, str) else None)
        if hit is None:
            verdicts.append(base)
            continue
        new = labelled_verdict(base, hit, mappings, mode=mode, grade_threshold=threshold)
        verdicts.append(new)
        applied += 1
        touched = True
        # against ``replaced``, the judge's own verdict (never an --adapt rule's); a label that
        # decided a passage nobody asked the judge about changes nothing
        changed += label_changed(new.model_dump(include={"verdict", "grade", "attempts", "replaced"}))
    if not touched:
        return dict(record), 0, 0
    return record_with_verdicts(record, verdicts, k, measures), applied, changed


def record_with_verdicts(
    record: Mapping[str, Any], verdicts: list[PassageVerdict], k: Sequence[int], measures: Sequence[str]
) -> dict[str, Any]:
    """``record`` decided again by ``verdicts`` (labels applied, or an adapted rule's): its
    unjudged list keeps only what is still unjudged, its figures recomputed."""
    base = dict(record)
    base["unjudged_passages"] = [
        e for e in record.get("unjudged_passages") or [] if not verdicts[int(e["index"])].judged
    ]
    return finish_record(base, _result_of(record, verdicts, k, measures), k, measures=measures)


def apply_labels(
    records: Sequence[Mapping[str, Any]],
    labels: LabelSet,
    *,
    k: Sequence[int] = (5, 10),
    measures: Sequence[str] = (),
    level: int | None = None,
    yes_grade: int | None = None,
) -> LabelOutcome:
    """Every record with ``labels`` applied (see the module doc). ``level``/``yes_grade``:
    the stated mapping for labels on another scale than the records'; ScaleError otherwise."""
    modes: set[str] = {str(r.get("mode", "binary")) for r in records}
    by_mode: dict[str, Mapping[Scale, ScaleMapping]] = {
        m: labels.mapping_to(m, level=level, yes_grade=yes_grade, target_name=f"the {m} job")  # type: ignore[arg-type]
        for m in sorted(modes)
    }
    out: list[dict[str, Any]] = []
    applied = changed = queries = 0
    seen: set[tuple[str, str]] = set()
    for r in records:
        new, a, c = relabel_record(r, labels, by_mode[str(r.get("mode", "binary"))], k, measures=measures)
        out.append(new)
        applied += a
        changed += c
        queries += 1 if a else 0
        qid = str(r["id"])
        seen.update((qid, str(d)) for d in r["docnos"])
    unmatched = sum(1 for x in labels if x.label.key not in seen)
    mapping = {str(s): m.as_dict() for per in by_mode.values() for s, m in per.items()}
    return LabelOutcome(out, applied, changed, queries, unmatched, mapping)


def labels_decide(
    plan: Iterable[QueryWork],
    labels: LabelSet,
    config: JudgeConfig,
    backend: str,
    *,
    level: int | None = None,
    yes_grade: int | None = None,
) -> Iterator[QueryWork]:
    """``plan`` with every labelled passage decided by its label instead of the judge (the
    works of ``judge score --labels ... --examples N``): a job whose passage carries a label
    leaves the work's jobs for its ``known`` verdicts, as :func:`apply_label` records a label
    (put on the judge's scale by the stated mapping, reviewer and comment kept) over an
    ``unjudged`` judge side that was never asked (``attempts`` 0: ``replaced.verdict`` is
    ``unjudged`` and ``p_yes`` None, so agreement and calibration leave the passage out).
    No call is made for it, so a labelled passage is never its own example; :func:`apply_labels`
    applied at the end finds the same label and leaves it as it is. ``language="auto"`` is
    bound once per query from the query and all its passages, and recorded in the work, so
    the driver judges the rest in the same language."""
    mappings = labels.mapping_to(config.mode, level=level, yes_grade=yes_grade, target_name="the judge")
    for work in plan:
        hits = [
            (job, None if p.id is None or p.query_id is None else labels.lookup(p.query_id, p.id, work.query))
            for job, p in ((job, job.passage) for job in work.jobs)
        ]
        if not any(hit is not None for _, hit in hits):
            yield work
            continue
        bound = bind_language(
            config, work.query, (job.passage.text for job in work.jobs), language=work.language
        )
        template = template_for(bound)
        known: list[PassageVerdict | None] = (
            list(work.known) if work.known is not None else [None] * len(work.jobs)
        )
        jobs = []
        for job, hit in hits:
            if hit is None:
                jobs.append(job)
                continue
            asked = PassageVerdict(
                index=job.index,
                passage_id=job.passage.id,
                verdict="unjudged",
                template_id=template.id,
                template_hash=template.hash,
                backend=backend,
                attempts=0,
                truncated=job.passage.truncated,
            )
            known[job.index] = labelled_verdict(
                asked, hit, mappings, mode=bound.mode, grade_threshold=bound.grade_threshold
            )
        language = bound.language if config.language == "auto" else work.language
        yield replace(work, jobs=jobs, known=known, language=language)


def _relevance_mapping(
    record_mode: str, scale: Scale, grade_threshold: int, level: int | None
) -> ScaleMapping:
    """How a label on ``scale`` becomes relevant/not for agreement with a ``record_mode``
    job: binary labels as they are; graded labels at ``level`` (a graded job's own
    ``grade_threshold`` is its stated level; a binary job needs ``level``)."""
    stated = level if level is not None else (grade_threshold if record_mode == "graded" else None)
    return resolve_mapping(
        scale,
        "binary",
        level=stated,
        source_name="graded labels",
        target_name="agreement with the binary judge",
        level_field="labels_level",
    )


def agreement_items(
    records: Sequence[Mapping[str, Any]],
    labels: Sequence[Label],
    *,
    level: int | None = None,
) -> tuple[list[AgreementItem], dict[tuple[str, str], dict[str, int]]]:
    """The judge-vs-people items of a job and every reviewer's relevance per item.

    ``labels``: every reviewer's latest label (:meth:`judge.store.LabelStore.latest`); the
    item's label is the resolved one (:class:`judge.store.LabelSet`). The judge's side is
    its own verdict (before any override); items it left unjudged are skipped. Returns
    ``(items, {(qid, docno): {reviewer: 0/1}})`` for :func:`judge.metrics.label_agreement`."""
    from judge.metrics import AgreementItem

    resolved = LabelSet(labels)
    per_reviewer: dict[tuple[str, str], dict[str, Label]] = {}
    for lab in labels:
        if lab.label is not None:
            per_reviewer.setdefault(lab.key, {})[lab.reviewer] = lab
    items: list[AgreementItem] = []
    humans: dict[tuple[str, str], dict[str, int]] = {}
    seen: set[tuple[str, str]] = set()
    for r in records:
        mode = str(r.get("mode", "binary"))
        gt = _grade_threshold(r)
        qid = str(r["id"])
        query = r.get("query") if isinstance(r.get("query"), str) else None
        for v, docno in zip(verdicts_of(r), r["docnos"], strict=True):
            key = (qid, str(docno))
            if key in seen:
                continue
            hit = resolved.lookup(qid, str(docno), query)
            if hit is None:
                continue
            seen.add(key)
            base = judge_verdict_of(v)
            humans[key] = {
                name: _relevance_mapping(mode, lab.scale, gt, level).apply(int(lab.label or 0))
                for name, lab in per_reviewer.get(key, {}).items()
            }
            if not base.judged:
                continue
            human = _relevance_mapping(mode, hit.label.scale, gt, level).apply(hit.value)
            items.append(
                AgreementItem(
                    judge=1 if base.verdict == "yes" else 0,
                    human=human,
                    p_yes=base.p_yes,
                    template_id=base.template_id,
                    audit=hit.label.audit,
                )
            )
    return items, humans


def job_agreement(
    records: Sequence[Mapping[str, Any]],
    labels: Sequence[Label],
    *,
    level: int | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> AgreementReport:
    """:func:`judge.metrics.label_agreement` of a job's records and its labels."""
    from judge.metrics import label_agreement

    items, humans = agreement_items(records, labels, level=level)
    return label_agreement(items, reviewer_labels=humans, resamples=resamples, seed=seed)


def _reviewed_pairs(records: Sequence[Mapping[str, Any]], labels: LabelSet | None) -> set[tuple[str, str]]:
    """The (qid, docno) pairs of ``records`` that already carry a label in ``labels``."""
    reviewed: set[tuple[str, str]] = set()
    if labels is not None:
        for r in records:
            qid = str(r["id"])
            query = r.get("query") if isinstance(r.get("query"), str) else None
            reviewed.update(
                (qid, str(d)) for d in r["docnos"] if labels.lookup(qid, str(d), query) is not None
            )
    return reviewed


def _queue_threshold(records: Sequence[Mapping[str, Any]], threshold: float | None) -> float:
    """``threshold``, else the P(yes) threshold the records were decided at (0.5 without any)."""
    if threshold is not None:
        return threshold
    return threshold_of(records[0]) if records else 0.5


def job_review_queue(
    records: Sequence[Mapping[str, Any]],
    labels: LabelSet | None = None,
    *,
    seed: int = 0,
    limit: int | None = None,
    audit_every: int = AUDIT_EVERY,
    threshold: float | None = None,
) -> list[QueueItem]:
    """The review queue of a job (:func:`judge.judging.review_queue`): its verdicts without
    a label, at the P(yes) threshold its records were decided at (``threshold`` overrides)."""
    impacts = map_impacts(records)
    candidates = [replace(c, impact=impacts.get((c.qid, c.docno))) for c in candidates_from_records(records)]
    return review_queue(
        candidates,
        threshold=_queue_threshold(records, threshold),
        reviewed=_reviewed_pairs(records, labels),
        audit_every=audit_every,
        seed=seed,
        limit=limit,
    )


def _ap(verdicts: Sequence[PassageVerdict], mode: str, grade_threshold: int) -> float | None:
    listed = judged_list(verdicts, mode, grade_threshold=grade_threshold)  # type: ignore[arg-type]
    return listed.value(judge_measure("AP"))


def _flipped(v: PassageVerdict, yes: bool, mode: str, grade_threshold: int) -> PassageVerdict:
    grade = v.grade
    if mode == "graded" and (grade is None or (grade >= grade_threshold) != yes):
        grade = grade_threshold if yes else 0
    return v.model_copy(update={"verdict": "yes" if yes else "no", "grade": grade})


def map_impacts(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """``{(qid, docno): |change of the job's mAP|}`` if that passage's judge verdict were
    reversed (an unjudged passage: the mean over a yes and a no label), each query's AP
    recomputed as the records compute it; the queue's exact ``impact``."""
    n = sum(1 for r in records if r.get("ap") is not None) or 1
    out: dict[tuple[str, str], float] = {}
    for r in records:
        mode = str(r.get("mode", "binary"))
        gt = _grade_threshold(r)
        verdicts = [judge_verdict_of(v) for v in verdicts_of(r)]
        base = _ap(verdicts, mode, gt) or 0.0
        qid = str(r["id"])
        for i, (v, docno) in enumerate(zip(verdicts, r["docnos"], strict=True)):
            sides = (v.verdict != "yes",) if v.judged else (True, False)
            changes = []
            for yes in sides:
                trial = list(verdicts)
                trial[i] = _flipped(v, yes, mode, gt)
                changes.append(abs((_ap(trial, mode, gt) or 0.0) - base) / n)
            out.setdefault((qid, str(docno)), sum(changes) / len(changes))
    return out


def label_for_passage(
    record: Mapping[str, Any],
    index: int,
    label: int,
    reviewer: str,
    *,
    scale: Scale | None = None,
    comment: str = "",
    audit: bool = False,
    collection: str = DEFAULT_COLLECTION,
) -> Label:
    """A reviewer's ``label`` for passage ``index`` (0-based rank) of a ``judge score``
    record, keyed as the store keys it and carrying the judge verdict it replaces (the
    judge's own, even when the record already shows a human label). ``scale``: the label's
    scale (default: the record's mode)."""
    docnos = record["docnos"]
    if not 0 <= index < len(docnos):
        raise IndexError(f"passage index {index} is outside 0..{len(docnos) - 1}")
    verdict = judge_verdict_of(verdicts_of(record)[index])
    use: Scale = scale if scale is not None else ("graded" if record.get("mode") == "graded" else "binary")
    query = record.get("query")
    return Label(
        qid=str(record["id"]),
        docno=str(docnos[index]),
        label=label,
        reviewer=reviewer,
        scale=use,
        collection=collection,
        query=query if isinstance(query, str) else None,
        comment=comment,
        judge_verdict=verdict.verdict,
        judge_grade=verdict.grade,
        judge_p_yes=verdict.p_yes,
        template_id=verdict.template_id,
        audit=audit,
    )


def comparison_review_queue(
    records: Sequence[Mapping[str, Any]],
    rankings: Mapping[str, Mapping[str, Sequence[str]]],
    labels: LabelSet | None = None,
    *,
    seed: int = 0,
    limit: int | None = None,
    audit_every: int = AUDIT_EVERY,
    threshold: float | None = None,
) -> list[QueueItem]:
    """The review queue of a comparison: the judged pool's unlabelled verdicts, weighted by
    the best rank in any system's list and doubled for a passage not in every list."""
    return review_queue(
        candidates_from_comparison(records, rankings),
        threshold=_queue_threshold(records, threshold),
        reviewed=_reviewed_pairs(records, labels),
        lists=len(rankings),
        audit_every=audit_every,
        seed=seed,
        limit=limit,
    )
