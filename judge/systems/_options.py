"""What a system comparison is asked to do (:class:`SystemsOptions`) and how its human
labels are read onto the pool's scale: the comparison run and a report loading itself
from its folder both read them here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from judge.batch import SampleLabelOptions
from judge.io import DEFAULT_MAX_PASSAGE_CHARS, InputError, Qrels, read_qrels
from judge.judging import JudgeConfig
from judge.metrics import ScaleError
from judge.store import LabelSet
from judge.systems._inputs import Inputs
from judge.systems._label_scale import PoolScale, map_human, resolve_pool_scale

__all__ = ["SystemsOptions", "label_grades", "pool_scale", "read_human_labels"]


@dataclass(frozen=True)
class SystemsOptions:
    """Everything about a comparison that is not how one passage is judged.

    ``depth``: pool only each system's top N (None: all). ``measures``: registry measures
    (default map, ndcg_cut_10, P_5, recall_10, recip_rank). ``relevance_level``: minimum
    grade counted relevant (default 1 in binary mode, the judge's grade threshold in
    graded mode). ``qrels``: human labels filling the pool first, put on the judge's scale
    by ``qrels_level`` (graded labels, binary judge: grade >= L is relevant; default: an
    explicit ``relevance_level``) or ``qrels_yes_grade`` (binary labels, graded judge: the
    grade a labelled "relevant" stands for); see :mod:`judge.systems._label_scale`. ``labels`` (a
    :class:`judge.store.LabelSet`) fill it too, put on the pool's scale by the stated
    ``labels_level``/``labels_yes_grade`` (else an error naming both scales). ``seed``,
    ``resamples``, ``confidence``: the tests of ``judge compare``; ``stability_resamples``:
    redraws of the pool for ``order_stability`` (0: skip). ``top_queries`` /
    ``top_passages``: how much the HTML shows of the queries where the systems differ most.
    ``until_decided``: judge the pool adaptively until every comparison's decision holds
    with ``confidence`` (see :mod:`judge.systems._adaptive`), at most ``budget`` pairs,
    ``adaptive_batch`` per round, ``adaptive_draws`` Monte Carlo draws.
    """

    depth: int | None = None
    measures: tuple[str, ...] | None = None
    relevance_level: int | None = None
    qrels: Path | None = None
    qrels_level: int | None = None
    qrels_yes_grade: int | None = None
    labels: LabelSet | None = None
    labels_level: int | None = None
    labels_yes_grade: int | None = None
    seed: int = 0
    resamples: int = 10_000
    stability_resamples: int = 1000
    confidence: float = 0.95
    strict: bool = False
    field_map: Mapping[str, str] = field(default_factory=dict)
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS
    top_queries: int = 10
    top_passages: int = 5
    until_decided: bool = False
    budget: int | None = None
    adaptive_batch: int | None = None
    adaptive_draws: int = 200
    # a random sample of human labels: each system's prediction-powered figures (report ``ppi``)
    sample_labels: SampleLabelOptions | None = None

    def check(self) -> None:
        if self.depth is not None and self.depth < 1:
            raise InputError(f"must be >= 1, got {self.depth}", field="--depth")
        if self.relevance_level is not None and self.relevance_level < 0:
            raise InputError(f"must be >= 0, got {self.relevance_level}", field="-l")
        if self.resamples < 1:
            raise InputError(f"must be >= 1, got {self.resamples}", field="--resamples")
        if self.stability_resamples < 0:
            raise InputError(f"must be >= 0, got {self.stability_resamples}", field="--stability-resamples")
        if not 0.0 < self.confidence < 1.0:
            raise InputError(f"must be in (0, 1), got {self.confidence}", field="--confidence")
        if self.max_passage_chars < 1:
            raise InputError("must be >= 1", field="--max-passage-chars")
        if self.budget is not None and self.budget < 0:
            raise InputError(f"must be >= 0, got {self.budget}", field="--budget")
        if self.adaptive_batch is not None and self.adaptive_batch < 1:
            raise InputError(f"must be >= 1, got {self.adaptive_batch}", field="--batch")
        if self.adaptive_draws < 10:
            raise InputError(f"must be >= 10, got {self.adaptive_draws}", field="adaptive_draws")
        if (self.budget is not None or self.adaptive_batch is not None) and not self.until_decided:
            raise InputError(
                "is only used with --until-decided",
                field="--budget" if self.budget is not None else "--batch",
            )
        if self.qrels_level is not None and not 1 <= self.qrels_level <= 3:
            raise InputError(f"must be in 1..3, got {self.qrels_level}", field="--qrels-level")
        if self.qrels_yes_grade is not None and not 1 <= self.qrels_yes_grade <= 3:
            raise InputError(f"must be in 1..3, got {self.qrels_yes_grade}", field="--qrels-yes-grade")


def pool_scale(options: SystemsOptions, config: JudgeConfig, human: Qrels | None) -> PoolScale:
    """The pool's scale and relevance level for ``config``'s judge and the human labels, or
    :class:`InputError` (exit 2, naming both scales and the flag that resolves the mismatch)."""
    try:
        return resolve_pool_scale(
            config.mode,
            human,
            relevance_level=options.relevance_level,
            qrels_level=options.qrels_level,
            qrels_yes_grade=options.qrels_yes_grade,
            grade_threshold=config.grade_threshold,
        )
    except ScaleError as err:
        raise InputError(
            err.message,
            path=str(options.qrels) if options.qrels is not None and err.field != "-l" else None,
            field=err.field,
        ) from None


def read_human_labels(options: SystemsOptions, config: JudgeConfig) -> tuple[Qrels | None, PoolScale]:
    """``--qrels`` read and put on the judge's scale (None without labels), with the scale."""
    human = None
    if options.qrels is not None:
        if not Path(options.qrels).exists():
            raise InputError("no such file", path=str(options.qrels), field="--qrels")
        human = read_qrels(options.qrels)
    scale = pool_scale(options, config, human)
    return map_human(human, scale), scale


def label_grades(opts: SystemsOptions, inputs: Inputs, config: JudgeConfig) -> dict[str, dict[str, int]]:
    """``{query id: {docno: grade}}`` of the labels that match a pooled passage (same qid and
    docno, and the same query text when the label keeps one), on the pool's scale."""
    if opts.labels is None:
        return {}
    try:
        mappings = opts.labels.mapping_to(
            config.mode, level=opts.labels_level, yes_grade=opts.labels_yes_grade, target_name="the pool"
        )
    except ScaleError as exc:
        raise InputError(exc.message, field="--" + (exc.field or "labels").replace("_", "-")) from None
    out: dict[str, dict[str, int]] = {}
    for qid, passages in inputs.passages.items():
        for docno in passages:
            hit = opts.labels.lookup(inputs.tokens[qid], docno, inputs.queries[qid])
            if hit is not None:
                out.setdefault(qid, {})[docno] = mappings[hit.label.scale].apply(hit.value)
    return out
