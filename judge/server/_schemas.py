"""Request bodies and options of the HTTP API (pydantic: a malformed body is a 422 whose
``detail[].loc`` names the field)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from judge.batch import RUN_DEFAULTS
from judge.io import DEFAULT_MAX_PASSAGE_CHARS, ExchangeScale
from judge.server._bounds import RequestFloat, RequestInt, Seed
from judge.systems import DEFAULT_TEST_FIGURE, TestFigure


def builtin_template_ids() -> set[str]:
    from judge.judging import list_templates

    return {t.id for t in list_templates()}


def _check_template(value: str | None) -> str | None:
    # Built-in ids only: a request must not make the server read a file by path.
    if value is not None and value not in builtin_template_ids():
        raise ValueError(f"unknown template {value!r}; GET /v1/info lists the built-in ones")
    return value


def _check_cutoffs(value: list[int] | None) -> list[int] | None:
    if value is not None and any(c < 1 or c > 10_000 for c in value):
        raise ValueError("cutoffs must be integers in 1..10000")
    return None if value is None else list(dict.fromkeys(value))


def _check_field_map(value: dict[str, str]) -> dict[str, str]:
    from judge.io import parse_field_map

    return parse_field_map([f"{a}={b}" for a, b in value.items()]) if value else {}


# The checks shared by every body that has such a field (each written once).
TemplateId = Annotated[str | None, AfterValidator(_check_template)]
"""A built-in template id (None: the default)."""
Cutoffs = Annotated[list[RequestInt], AfterValidator(_check_cutoffs)]
"""Rank cutoffs in 1..10000, repeats dropped."""
FieldMap = Annotated[dict[str, str], AfterValidator(_check_field_map)]


def _needs_sample_labels(value: object, info: ValidationInfo) -> object:
    """``sample_level`` and ``allow_unlabelled`` read ``sample_labels``: refused without it
    (``sample_labels`` is declared before them, so it is in ``info.data``)."""
    if value not in (None, False) and not info.data.get("sample_labels"):
        raise ValueError(f"{info.field_name} is only used with sample_labels")
    return value


def _needs_qrels(value: object, info: ValidationInfo) -> object:
    """``qrels_scale`` states how ``qrels`` is read: refused without it (``qrels`` is
    declared before it, so it is in ``info.data``)."""
    if value is not None and info.data.get("qrels") is None:
        raise ValueError(f"{info.field_name} is only used with qrels")
    return value


QrelsScale = Annotated[ExchangeScale | None, AfterValidator(_needs_qrels)]
"""``--qrels-scale``: the ratings' scale of a judgment list given as ``qrels`` (one of
:data:`judge.io.EXCHANGE_SCALES`; None: the scale the list states, else detected)."""
SampleLevel = Annotated[RequestInt | None, AfterValidator(_needs_sample_labels)]
"""``--sample-level``: a sample label's grade >= it is relevant (only with ``sample_labels``)."""
AllowUnlabelled = Annotated[bool | None, AfterValidator(_needs_sample_labels)]
"""``--allow-unlabelled``: intervals though a sample's drawn pairs miss labels, as a
conservative bound over whatever labels they have (only with ``sample_labels``)."""
"""``{name: field}``: read a record's ``name`` from ``field`` (as ``judge score --map``)."""


class JudgeOptions(BaseModel):
    """How passages are judged (the ``judge score`` flags); unset fields take the server's defaults.

    The schema's ``x-run-defaults``: the defaults of the run settings every job and request
    is judged under unless ``judge serve``'s flags set them (calls in flight, retries, the
    per-call timeout of a remote API and of the embedded model, the judging thresholds;
    ``p_yes_threshold`` null: the template's tuned threshold), read from where each is
    defined (:data:`judge.batch.RUN_DEFAULTS`)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"x-run-defaults": dict(RUN_DEFAULTS)})

    mode: Literal["binary", "graded"] | None = None
    language: Literal["auto", "zh", "en"] | None = None
    template: TemplateId = None
    probability: bool | None = None
    p_yes_threshold: RequestFloat | None = Field(default=None, ge=0.0, le=1.0)
    explain: bool | None = None


#: The judging options of a job or request: the fields of :class:`JudgeOptions`.
JUDGE_OPTION_KEYS: tuple[str, ...] = tuple(JudgeOptions.model_fields)
#: A job's worked examples (``judge score --examples N --examples-from same|nearest``):
#: run settings of the job, beside its judging options.
EXAMPLE_OPTION_KEYS: tuple[str, ...] = ("examples", "examples_from")
_MAX_EXAMPLES = 16  # judge.judging.MAX_EXAMPLES (checked again by the run spec)
#: A job's ``adapt`` (``judge score --adapt``): the label store's labels of the job's queries
#: (snapshotted when it first starts) teach the decision rule; a run setting too.
ADAPT_OPTION_KEYS: tuple[str, ...] = ("adapt",)


def _examples_need(options: Any) -> None:
    if options.examples and options.listwise:
        raise ValueError("examples: listwise judging shows no worked examples")
    if options.examples_from is not None and not options.examples:
        raise ValueError("examples_from is only used with examples")


class JobOptions(JudgeOptions):
    """Options of a scoring job: ``POST /v1/jobs?mode=graded&k=5&k=10`` or ``{"options": {...}}``."""

    k: Cutoffs | None = Field(default=None, min_length=1, max_length=20)
    listwise: bool = False
    listwise_template: TemplateId = None
    max_passage_chars: RequestInt = Field(default=DEFAULT_MAX_PASSAGE_CHARS, ge=1, le=1_000_000)
    map: FieldMap = Field(default_factory=dict)
    # a named calibration of the label store (POST /v1/jobs/{id}/calibrate): its P(yes) threshold
    calibration: str | None = Field(default=None, min_length=1, max_length=200)
    # --sample-labels: TREC qrels text of pairs drawn at random from the job's pairs (the summary's ppi)
    sample_labels: str | None = Field(default=None, max_length=64 * 1024 * 1024)
    sample_level: SampleLevel = Field(default=None, ge=0, le=100)
    allow_unlabelled: AllowUnlabelled = None
    confidence: RequestFloat | None = Field(default=None, gt=0.0, lt=1.0)
    # worked examples: up to N labelled passages of the label store (the job's queries, as
    # the job first starts); a labelled passage takes its label and is never judged
    examples: RequestInt | None = Field(default=None, ge=0, le=_MAX_EXAMPLES)
    examples_from: Literal["same", "nearest"] | None = None
    # --adapt: the label store's labels of the job's queries teach the decision rule, applied
    # where it beats the judge alone on held-out queries (the summary's ``adaptation``)
    adapt: bool = False

    @model_validator(mode="after")
    def _examples(self) -> JobOptions:
        _examples_need(self)
        if self.adapt and (
            self.examples or self.listwise or self.probability is False or self.mode == "graded"
        ):
            raise ValueError(
                "adapt: needs binary probability-mode verdicts (P(yes)), pointwise and without examples"
            )
        return self


class JobRequest(BaseModel):
    """``POST /v1/jobs`` as JSON: the records ``judge score`` reads, and the options."""

    model_config = ConfigDict(extra="forbid")

    records: list[dict[str, Any]] = Field(min_length=1)
    options: JobOptions = Field(default_factory=JobOptions)


class PassageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    text: str


class EvaluateRequest(BaseModel):
    """``POST /v1/evaluate``: one query and its ranked passages."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1)
    retrieval_context: list[str | PassageIn]
    mode: Literal["binary", "graded"] | None = None
    k: Cutoffs = Field(default_factory=lambda: [5, 10], min_length=1, max_length=20)
    summary: bool = False
    config: JudgeOptions | None = None

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query is blank")
        return value


class CompareOptions(JudgeOptions):
    """Options of a comparison of systems (``judge compare-systems``'s flags): pooling depth,
    measures, human labels (``qrels``: the text of what ``--qrels`` reads, TREC qrels or a
    Quepid/SRW judgment list told apart by content, its scale ``qrels_scale``), tests and how
    much the report shows; ``test_figure``: what the comparisons rank and test (``expected``,
    the judge's probability-weighted figures, or ``thresholded``)."""

    depth: RequestInt | None = Field(default=None, ge=1, le=100_000)
    measures: list[str] | None = Field(default=None, min_length=1, max_length=50)
    relevance_level: RequestInt | None = Field(default=None, ge=0, le=100)
    qrels: str | None = Field(default=None, max_length=64 * 1024 * 1024)
    qrels_level: RequestInt | None = Field(default=None, ge=1, le=3)
    qrels_yes_grade: RequestInt | None = Field(default=None, ge=1, le=3)
    qrels_scale: QrelsScale = None
    seed: Seed = 0
    resamples: RequestInt = Field(default=10_000, ge=1, le=1_000_000)
    stability_resamples: RequestInt = Field(default=1000, ge=0, le=100_000)
    confidence: RequestFloat = Field(default=0.95, gt=0.0, lt=1.0)
    strict: bool = False
    listwise: bool = False
    listwise_template: TemplateId = None
    max_passage_chars: RequestInt = Field(default=DEFAULT_MAX_PASSAGE_CHARS, ge=1, le=1_000_000)
    map: FieldMap = Field(default_factory=dict)
    top_queries: RequestInt = Field(default=10, ge=0, le=1000)
    top_passages: RequestInt = Field(default=5, ge=1, le=100)
    until_decided: bool = False
    # what the comparisons rank and test: the judge's probability-weighted figures or the thresholded
    test_figure: TestFigure = DEFAULT_TEST_FIGURE
    budget: RequestInt | None = Field(default=None, ge=0, le=100_000_000)
    batch: RequestInt | None = Field(default=None, ge=1, le=1_000_000)
    # --sample-labels: TREC qrels text of pairs drawn at random from the pool (each system's ppi)
    sample_labels: str | None = Field(default=None, max_length=64 * 1024 * 1024)
    sample_level: SampleLevel = Field(default=None, ge=0, le=100)
    allow_unlabelled: AllowUnlabelled = None
    # worked examples: up to N labelled passages of ``qrels`` per pooled passage
    examples: RequestInt | None = Field(default=None, ge=0, le=_MAX_EXAMPLES)
    examples_from: Literal["same", "nearest"] | None = None

    @model_validator(mode="after")
    def _adaptive(self) -> CompareOptions:
        if (self.budget is not None or self.batch is not None) and not self.until_decided:
            raise ValueError("budget and batch are only used with until_decided")
        _examples_need(self)
        if self.examples and self.qrels is None:
            raise ValueError("examples: needs human labels to take them from (qrels)")
        return self

    @field_validator("measures")
    @classmethod
    def _measures(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        from judge.io import InputError
        from judge.systems import parse_measures

        try:
            parse_measures(value)
        except InputError as exc:
            raise ValueError(exc.message) from None
        return list(dict.fromkeys(value))


class CompareRequest(BaseModel):
    """``POST /v1/compare``: each system's ranked results (the first is the baseline), as a
    list of ``judge score`` records or as NDJSON text, and the options."""

    model_config = ConfigDict(extra="forbid")

    systems: dict[str, list[dict[str, Any]] | str] = Field(min_length=2, max_length=50)
    options: CompareOptions = Field(default_factory=CompareOptions)

    @field_validator("systems")
    @classmethod
    def _systems(cls, value: dict[str, list[dict[str, Any]] | str]) -> dict[str, list[dict[str, Any]] | str]:
        from judge.io import InputError
        from judge.systems import check_name

        for name in value:
            try:
                check_name(name)
            except InputError as exc:
                raise ValueError(exc.message) from None
        return value
