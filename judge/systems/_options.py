"""What a system comparison is asked to do (:class:`SystemsOptions`) and how its human
labels are read onto the pool's scale: the comparison run and a report loading itself
from its folder both read them here."""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from judge.batch import SampleLabelOptions
from judge.io import (
    DEFAULT_MAX_PASSAGE_CHARS,
    InputError,
    Qrels,
    RejectsReporter,
    detect_judgment_format,
    detect_scale,
    judgments_by_qid,
    read_judgments,
    read_qrels,
    scale_rule,
)
from judge.judging import JudgeConfig
from judge.metrics import ScaleError
from judge.store import LabelSet
from judge.systems._expected import DEFAULT_TEST_FIGURE, TestFigure, check_test_figure
from judge.systems._inputs import Inputs, read_systems, trec_token
from judge.systems._label_scale import PoolScale, map_human, resolve_pool_scale

__all__ = [
    "SystemsOptions",
    "label_grades",
    "pool_scale",
    "query_texts",
    "read_human_labels",
    "read_qrels_file",
    "systems_query_texts",
]


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
    ``adaptive_batch`` per round, ``adaptive_draws`` Monte Carlo draws. ``test_figure``:
    what the comparisons rank and test, ``expected`` (the judge's probability-weighted
    figures, thresholded when it gives no P(yes)) or ``thresholded`` (see
    :mod:`judge.systems._expected`).
    """

    depth: int | None = None
    measures: tuple[str, ...] | None = None
    relevance_level: int | None = None
    qrels: Path | None = None
    qrels_level: int | None = None
    qrels_yes_grade: int | None = None
    qrels_scale: str | None = None
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
    test_figure: TestFigure = DEFAULT_TEST_FIGURE

    @property
    def qrels_by_text(self) -> bool:
        """``qrels`` is a judgment list naming queries by text (CSV, SRW, RRE), not TREC qrels:
        it can only be read once the run's queries are known."""
        return (
            self.qrels is not None and self.qrels.is_file() and detect_judgment_format(self.qrels) != "trec"
        )

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
        if self.qrels_scale is not None:
            scale_rule(self.qrels_scale, field="--qrels-scale")
        check_test_figure(self.test_figure)


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


def read_human_labels(
    options: SystemsOptions, config: JudgeConfig, queries: Mapping[str, str] | None = None
) -> tuple[Qrels | None, PoolScale]:
    """``--qrels`` read and put on the judge's scale (None without labels), with the scale.
    ``queries`` (TREC qid -> query text, the run's own queries) turns the query texts of a
    CSV or SRW judgment list into qids (:func:`read_qrels_file`)."""
    human = None
    if options.qrels is not None:
        if not Path(options.qrels).exists():
            raise InputError("no such file", path=str(options.qrels), field="--qrels")
        human = read_qrels_file(options.qrels, queries, scale=options.qrels_scale)
    scale = pool_scale(options, config, human)
    return map_human(human, scale), scale


def read_qrels_file(path: Path, queries: Mapping[str, str] | None, *, scale: str | None = None) -> Qrels:
    """The one reader of ``--qrels``: TREC qrels as :func:`judge.io.read_qrels` reads them,
    or a judgment list of Quepid or SRW (the ``query,docid,rating`` CSV, SRW's JSON, RRE
    ratings), told apart by content (:func:`judge.io.detect_judgment_format`). A list's query
    texts become qids through ``queries`` (TREC qid -> text; a text not there, or two
    queries sharing it, is exit 2 naming the line), its docids TREC tokens, its ratings
    graded 0-3 or binary by the stated mapping of ``scale`` (``--qrels-scale``; None: the
    scale the file states, else detected, else exit 2 naming ``--qrels-scale``)."""
    fmt = detect_judgment_format(path)
    if fmt == "trec":
        return read_qrels(path)
    found = read_judgments(path, fmt)
    if not found.judgments:
        raise InputError("no ratings", path=str(path), field="--qrels")
    rule = (
        scale_rule(scale or found.stated_scale or "", field="--qrels-scale")
        if scale or found.stated_scale
        else detect_scale(
            [(j.line, j.rating) for j in found.judgments], path=str(path), field="--qrels-scale"
        )
    )
    grades: dict[str, dict[str, int]] = {}
    lines: dict[tuple[str, str], int] = {}
    for j, qid in judgments_by_qid(found, queries or {}, field="the run's queries"):
        problem = rule.problem(j.rating)
        if problem is not None:
            raise InputError(problem, path=str(path), line=j.line, field=j.field)
        docno = trec_token(j.docid)
        first = lines.setdefault((qid, docno), j.line)
        if first != j.line:
            raise InputError(
                f"docid {j.docid!r} is rated twice for one query (first at line {first}; as TREC "
                f"tokens both are {docno!r})",
                path=str(path),
                line=j.line,
                field="docid",
            )
        grades.setdefault(qid, {})[docno] = rule.to_store(j.rating)
    return Qrels.from_mapping(grades)


def query_texts(inputs: Inputs) -> dict[str, str]:
    """TREC qid -> query text of the systems' queries (what a CSV/SRW ``--qrels`` matches)."""
    return {inputs.tokens[qid]: text for qid, text in inputs.queries.items()}


def systems_query_texts(
    paths: Mapping[str, Path], options: SystemsOptions, *, always: bool = False
) -> dict[str, str] | None:
    """The systems' query texts (:func:`query_texts`) when ``--qrels`` names queries by text
    or ``always`` (None otherwise): for the check of the labels before any backend is opened."""
    if not options.qrels_by_text and not always:
        return None
    quiet = RejectsReporter(None, io.StringIO(), command="judge compare-systems")
    inputs = read_systems(
        paths, field_map=options.field_map, max_passage_chars=options.max_passage_chars, reporter=quiet
    )
    return query_texts(inputs)


def qrels_file_convention(options: SystemsOptions) -> dict[str, str] | None:
    """How a CSV/SRW/RRE ``--qrels`` was read (format, scale, mapping) for the report's
    conventions; None for TREC qrels or no labels."""
    if options.qrels is None:
        return None
    fmt = detect_judgment_format(options.qrels)
    if fmt == "trec":
        return None
    found = read_judgments(options.qrels, fmt)
    given = options.qrels_scale or found.stated_scale
    rule = (
        scale_rule(given, field="--qrels-scale")
        if given
        else detect_scale([(j.line, j.rating) for j in found.judgments], path=str(options.qrels))
    )
    return {"format": fmt, "scale": rule.name, "mapping": rule.rule}


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
