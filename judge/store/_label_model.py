"""Human relevance labels: what a label is, how each field is checked, and how the labels of
many reviewers resolve to one per passage (the store is :mod:`judge.store._label_store`,
files :mod:`judge.store._label_files`).

**Identity.** A label is about one passage of one query: the query id ``qid`` (the record's
``id`` exactly as given, whitespace included) and the passage's ``docno`` (its id as given,
else ``h`` + the first 16 hex digits of the SHA-256 of its text, the passage identity
``--export-qrels`` and compare-systems use). Ids are bounded and checked as a job's lines
check them (:func:`judge.io.id_problem`). In TREC qrels, which cannot hold whitespace, an id
is written with :func:`qrels_escape` (percent-encoding) and read back with
:func:`qrels_unescape`. The pair
lives in a ``collection`` (default ``"default"``): the scope in which a qid means one query.
A label applies wherever its (collection, qid, docno) appears, in any job, run or pool that
reads that collection, so a passage reviewed in one job is reviewed for every later job on
the same data. Query ids are only unique within a data set, so a label also keeps the query
text when it is known and :meth:`LabelSet.lookup` refuses to apply it to a record whose query
text differs (two data sets that both call a query ``q1`` never share labels by accident).
We chose qid + docno over the verdict cache's key (backend, template, query and passage text)
because a human label does not depend on which judge ran, and because qrels, the one
exchange format of the field, carry exactly qid + docno: an export re-imports unchanged.

**Values.** A label is an integer on a scale: ``binary`` (0/1) or ``graded`` (0-3), checked
with :func:`judge.metrics.check_label`. It is put on a job's scale only through
:func:`judge.metrics.resolve_mapping` (a graded label on a binary job needs a stated level).

**Checks.** Every way in (the review route, ``POST /v1/labels``, ``judge labels import``,
``--labels FILE``) checks each field with :func:`check_label_fields`: types, ranges,
finiteness, string bounds, no control characters in names and ids. A bad line is an
:class:`InputError` naming line and field, and :meth:`LabelStore.put_many` stores all of an
import or none of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from judge.io import MIN_INCLUSION, InputError, id_problem, qrels_escape, qrels_unescape
from judge.metrics import Scale, ScaleError, ScaleMapping, check_label, check_scale, resolve_mapping

DEFAULT_COLLECTION = "default"
MAX_NAME_CHARS = 200  # a reviewer, collection or template id
MAX_COMMENT_CHARS = 4000
MAX_QUERY_CHARS = 100_000
MAX_LABEL_WORD_CHARS = 10  # a label given as a word: "yes", " 1 "
MAX_TIME = 1e11  # seconds since 1970 (year 5138): a larger time is not a time

__all__ = [
    "DEFAULT_COLLECTION",
    "Calibration",
    "Label",
    "LabelConflict",
    "LabelSet",
    "ResolvedLabel",
    "calibration_problems",
    "check_calibration",
    "check_label_fields",
    "conflicts_of",
    "label_type_problem",
    "parse_label",
    "qrels_escape",
    "qrels_unescape",
    "trec_token",
]


def trec_token(value: object) -> str:
    """A query id or docno as one TREC token (whitespace replaced by ``_``), as exports do."""
    return "_".join(str(value).split()) or "_"


@dataclass(frozen=True)
class Label:
    """One reviewer's label for one passage of one query (one row of the store or a file).

    ``label`` is None for a retraction (history only). ``judge_*``: the judge verdict the
    label replaced, when the reviewer saw one (``judge_verdict`` ``yes``/``no``/``unjudged``,
    its grade, P(yes) and template id). ``audit``: the item was an audit item of the review
    queue (drawn uniformly, as the store's ``audit_draws`` recorded), so agreement can be
    reported on an unbiased subset. ``history_id``: the row id in ``label_history`` (0 for
    labels not from a store). ``created``: when the store wrote it (its clock);
    ``source_created``: the time an imported label carried (shown, never deciding)."""

    qid: str
    docno: str
    label: int | None
    reviewer: str
    scale: Scale = "binary"
    collection: str = DEFAULT_COLLECTION
    query: str | None = None
    created: float = 0.0
    comment: str = ""
    judge_verdict: str | None = None
    judge_grade: int | None = None
    judge_p_yes: float | None = None
    template_id: str | None = None
    audit: bool = False
    history_id: int = 0
    source_created: float | None = None
    # the probability with which the review queue's sample mode drew the pair (None: not
    # drawn with a known probability; such a label never enters a prediction-powered estimate)
    inclusion: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.qid, self.docno)

    def as_dict(self) -> dict[str, Any]:
        """The JSONL export object (every field)."""
        return {name: getattr(self, name) for name in _LABEL_FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "<memory>", line: int | None = None) -> Label:
        """A label from a JSONL export object; :class:`InputError` names the bad field.
        The object's ``created`` (or ``source_created``) becomes ``source_created``: the
        store writes its own time."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(
                f"unknown label field(s) {', '.join(unknown)}", path=where, line=line, field=unknown[0]
            )
        values = dict(data)
        values.pop("history_id", None)
        carried = values.pop("created", None)
        if values.get("source_created") is None and carried is not None:
            values["source_created"] = carried
            if not is_time(carried):
                raise InputError(
                    "must be a finite time in seconds since 1970", path=where, line=line, field="created"
                )
        fields = check_label_fields(values, where=where, line=line)
        return cls(**fields)


def _finite(value: float) -> bool:
    """Whether a JSON number is finite; an integer always is (``math.isfinite`` would raise
    ``OverflowError`` on a 400-digit one, which the range check then refuses)."""
    return isinstance(value, int) or math.isfinite(value)


def is_time(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and _finite(value)
        and 0 <= value <= MAX_TIME
    )


def _text_problem(value: object, limit: int, *, multiline: bool = False, empty: bool = False) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if not empty and not value.strip():
        return "must not be empty"
    if len(value) > limit:
        return f"{len(value)} characters; at most {limit}"
    allowed = "\n\r\t" if multiline else ""
    bad = next((ch for ch in value if (ch < " " or "\x7f" <= ch <= "\x9f") and ch not in allowed), None)
    if bad is not None:
        return f"control character U+{ord(bad):04X}"
    return None


def _number_problem(value: object, low: float, high: float) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number, got {type(value).__name__}"
    if not _finite(value) or not low <= value <= high:
        shown = repr(value) if len(repr(value)) <= 40 else f"a number of {len(repr(value))} characters"
        return f"must be a finite number in [{low:g}, {high:g}], got {shown}"
    return None


def label_type_problem(value: object, *, words: bool = False) -> str | None:
    """Why ``value`` cannot be a label value, or None: one rule for every way a label comes
    in (a label file's line, ``POST /v1/labels``, the review route's body). A label is an
    integer, never JSON ``true``/``false`` nor a float; ``words`` (the review form) also
    takes a string, read by :func:`parse_label`. Its range is its scale's
    (:func:`judge.metrics.check_label`)."""
    also = " or y/n" if words else ""
    if isinstance(value, bool):
        return f"{str(value).lower()} is not a label: give an integer (0/1 binary, 0-3 graded){also}"
    if words and isinstance(value, str) and len(value) > MAX_LABEL_WORD_CHARS:
        return f"{len(value)} characters; a label is y/n or a grade"
    if isinstance(value, int) or (words and isinstance(value, str)):
        return None
    return f"must be an integer{also}, got {type(value).__name__}"


def parse_label(value: object, scale: Scale, job_scale: Scale | None = None) -> int:
    """A label as a reviewer gives it (``y``/``n``/``yes``/``no``/0/1 on the binary scale,
    0-3 on the graded one, as an integer or its digits) as an integer on ``scale``; a label
    of the other scale is refused naming both (``job_scale``: the job's, when the label
    states its own scale). :class:`InputError` naming ``label``."""
    problem = label_type_problem(value, words=True)
    if problem is not None:
        raise InputError(problem, field="label")
    text = str(value).strip().lower()
    job = job_scale or scale
    if scale == "binary":
        if text in ("y", "yes", "1"):
            return 1
        if text in ("n", "no", "0"):
            return 0
        if text in ("2", "3"):
            raise InputError(
                f"label {value!r} is a graded (0-3) label but the job is {job} (y/n, 0/1); "
                'send "scale": "graded" with it (mapped at the server\'s --labels-level)',
                field="label",
            )
        raise InputError(f"label {value!r} is not on the binary scale (y/n, 0/1)", field="label")
    if text in ("y", "yes", "n", "no"):
        raise InputError(
            f"label {value!r} is a binary (y/n) label but the {'label' if job_scale else 'job'} is graded "
            "(0-3); give a grade",
            field="label",
        )
    if text in ("0", "1", "2", "3"):
        return int(text)
    raise InputError(f"label {value!r} is not on the graded scale (0-3)", field="label")


def field_problems(data: Mapping[str, Any]) -> Iterator[tuple[str, str | None]]:
    """(field, problem) for each field of a label object, in a fixed order."""
    for name in ("qid", "docno"):
        value = data.get(name)
        yield (
            name,
            (
                f"must be a string, got {type(value).__name__}"
                if not isinstance(value, str)
                else id_problem(value)
            ),
        )
    label = data.get("label")
    yield "label", None if label is None else label_type_problem(label)
    yield "reviewer", _text_problem(data.get("reviewer"), MAX_NAME_CHARS)
    yield "collection", _text_problem(data.get("collection", DEFAULT_COLLECTION), MAX_NAME_CHARS)
    query = data.get("query")
    yield "query", None if query is None else _text_problem(query, MAX_QUERY_CHARS, multiline=True)
    yield "comment", _text_problem(data.get("comment", ""), MAX_COMMENT_CHARS, multiline=True, empty=True)
    verdict = data.get("judge_verdict")
    yield (
        "judge_verdict",
        (None if verdict is None or verdict in ("yes", "no", "unjudged") else "must be yes, no or unjudged"),
    )
    grade = data.get("judge_grade")
    yield (
        "judge_grade",
        (
            None
            if grade is None or (isinstance(grade, int) and not isinstance(grade, bool) and 0 <= grade <= 3)
            else "must be an integer grade 0..3"
        ),
    )
    p_yes = data.get("judge_p_yes")
    yield "judge_p_yes", None if p_yes is None else _number_problem(p_yes, 0.0, 1.0)
    template = data.get("template_id")
    yield "template_id", None if template is None else _text_problem(template, MAX_NAME_CHARS)
    audit = data.get("audit", False)
    yield "audit", None if isinstance(audit, bool) else f"must be true or false, got {audit!r}"
    source = data.get("source_created")
    yield (
        "source_created",
        (None if source is None or is_time(source) else "must be a finite time in seconds since 1970"),
    )
    inclusion = data.get("inclusion")
    yield (
        "inclusion",
        None
        if inclusion is None
        else (
            _number_problem(inclusion, 0.0, 1.0)
            or (None if inclusion >= MIN_INCLUSION else f"must be in [{MIN_INCLUSION:g}, 1]")
        ),
    )


def check_label_fields(
    data: Mapping[str, Any], *, where: str | None = None, line: int | None = None
) -> dict[str, Any]:
    """The fields of one label (a :class:`Label`'s, without ``created``/``history_id``)
    checked: ids as a job's lines take them, names and comment bounded strings without
    control characters, ``label`` on ``scale``, ``judge_p_yes`` finite in [0, 1],
    ``audit`` a boolean, ``source_created`` a finite time. :class:`InputError` naming the
    first bad field (and ``where``/``line``)."""
    for name, problem in field_problems(data):
        if problem is not None:
            raise InputError(problem, path=where, line=line, field=name)
    try:
        scale = (
            check_scale(data.get("scale", "binary")) if isinstance(data.get("scale", "binary"), str) else None
        )
        if scale is None:
            raise ScaleError("must be binary or graded", field="scale")
        value = data.get("label")
        if value is not None:
            check_label(value, scale)
    except ScaleError as exc:
        raise InputError(exc.message, path=where, line=line, field=exc.field) from None
    allowed = set(Label.__dataclass_fields__) - {"created", "history_id"}
    out = {k: v for k, v in data.items() if k in allowed}
    out["scale"] = scale
    return out


_LABEL_FIELDS = tuple(Label.__dataclass_fields__)


@dataclass(frozen=True)
class ResolvedLabel:
    """The label that counts for one passage: the most recent among the reviewers' latest
    labels, on the store's scale of that label. ``reviewers``: every reviewer's latest label;
    ``conflict``: they disagree."""

    label: Label
    reviewers: Mapping[str, int]
    conflict: bool

    @property
    def value(self) -> int:
        assert self.label.label is not None
        return self.label.label


@dataclass(frozen=True)
class LabelConflict:
    """Reviewers whose latest labels for one passage differ (on one scale: see
    :meth:`LabelStore.conflicts`)."""

    collection: str
    qid: str
    docno: str
    labels: Mapping[str, int]
    scales: Mapping[str, Scale]


@dataclass(frozen=True)
class Calibration:
    """A named P(yes) threshold refitted from human labels for one template
    (:func:`judge.metrics.calibrate_threshold` computes it; the store keeps it)."""

    name: str
    template_id: str
    threshold: float
    template_hash: str | None = None
    previous_threshold: float | None = None
    created: float = 0.0
    report: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "report": dict(self.report)}


def calibration_problems(data: Mapping[str, Any]) -> Iterator[tuple[str, str | None]]:
    """(field, problem) for each field of a calibration as the store keeps it, in a fixed
    order: ``name`` a non-empty string, ``template_id`` a string, ``template_hash`` a string
    or None, ``threshold`` finite in [0, 1], ``previous_threshold`` that or None,
    ``created`` a finite time, ``report`` an object."""
    name = data.get("name")
    yield "name", None if isinstance(name, str) and name.strip() else "must be a non-empty string"
    for key, optional in (("template_id", False), ("template_hash", True)):
        value = data.get(key)
        ok = isinstance(value, str) or (optional and value is None)
        yield key, None if ok else f"must be a string, got {type(value).__name__}"
    yield "threshold", _number_problem(data.get("threshold"), 0.0, 1.0)
    previous = data.get("previous_threshold")
    yield "previous_threshold", None if previous is None else _number_problem(previous, 0.0, 1.0)
    created = data.get("created")
    yield "created", None if is_time(created) else "must be a finite time in seconds since 1970"
    report = data.get("report")
    yield "report", None if isinstance(report, Mapping) else f"must be an object, got {type(report).__name__}"


def check_calibration(calibration: Calibration) -> Calibration:
    """``calibration`` when every field passes :func:`calibration_problems`, else
    :class:`InputError` naming the first bad field."""
    fields = {name: getattr(calibration, name) for name in Calibration.__dataclass_fields__}
    for name, problem in calibration_problems(fields):
        if problem is not None:
            raise InputError(problem, field=name)
    return calibration


def conflicts_of(latest: Iterable[Label]) -> list[LabelConflict]:
    """The conflicts among reviewers' latest labels (``latest``: one per reviewer and passage)."""
    groups: dict[tuple[str, str, str], list[Label]] = {}
    for lab in latest:
        groups.setdefault((lab.collection, lab.qid, lab.docno), []).append(lab)
    out: list[LabelConflict] = []
    for (coll, qid, docno), labs in groups.items():
        values = {x.reviewer: int(x.label) for x in labs if x.label is not None}
        scales = {x.reviewer: x.scale for x in labs}
        if len(set(values.values())) > 1 or len(set(scales.values())) > 1:
            out.append(LabelConflict(coll, qid, docno, values, scales))
    return out


class LabelSet:
    """Labels resolved to one per (qid, docno) (the latest among reviewers' latest labels),
    from a store or a file. :meth:`lookup` is what overrides use."""

    def __init__(self, labels: Iterable[Label], *, source: str = "labels") -> None:
        self.source = source
        # The order of writing decides (the store's history id; a file's line order), never
        # a time a label carries.
        latest: dict[tuple[str, str], dict[str, tuple[tuple[int, int], Label]]] = {}
        for seq, lab in enumerate(labels):
            if lab.label is None:
                latest.get(lab.key, {}).pop(lab.reviewer, None)
                continue
            per = latest.setdefault(lab.key, {})
            order = (lab.history_id, seq)
            old = per.get(lab.reviewer)
            if old is None or order >= old[0]:
                per[lab.reviewer] = (order, lab)
        self._items: dict[tuple[str, str], ResolvedLabel] = {}
        for key, ordered in latest.items():
            if not ordered:
                continue
            kept = {r: x for r, (_, x) in ordered.items()}
            newest = max(ordered.values(), key=lambda x: x[0])[1]
            values = {r: int(x.label) for r, x in kept.items() if x.label is not None}
            scales = {x.scale for x in kept.values()}
            conflict = len(set(values.values())) > 1 or len(scales) > 1
            self._items[key] = ResolvedLabel(newest, values, conflict)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[ResolvedLabel]:
        return iter(self._items.values())

    def lookup(self, qid: object, docno: str, query: str | None = None) -> ResolvedLabel | None:
        """The label for (qid, docno), or None; None too when the label keeps a query text
        and ``query`` is given and differs (another data set's query with the same id)."""
        hit = self._items.get((str(qid), docno))
        if hit is None:
            return None
        if query is not None and hit.label.query is not None and hit.label.query != query:
            return None
        return hit

    def scales(self) -> set[Scale]:
        return {r.label.scale for r in self._items.values()}

    def mapping_to(
        self,
        target: Scale,
        *,
        level: int | None = None,
        yes_grade: int | None = None,
        target_name: str = "the job",
        level_field: str = "labels_level",
        yes_grade_field: str = "labels_yes_grade",
    ) -> dict[Scale, ScaleMapping]:
        """The stated mapping from each scale present to ``target`` (:class:`ScaleError`
        naming both scales when one is missing: ``labels_level`` / ``labels_yes_grade``)."""
        return {
            s: resolve_mapping(
                s,
                target,
                level=level,
                yes_grade=yes_grade,
                source_name=f"labels from {self.source}",
                target_name=target_name,
                level_field=level_field,
                yes_grade_field=yes_grade_field,
            )
            for s in sorted(self.scales())
        }

    def qrels(self, scale: Scale | None = None, *, level: int | None = None) -> dict[str, dict[str, int]]:
        """``{qid: {docno: label}}`` of the resolved labels, on ``scale`` when given (graded
        to binary needs ``level``; binary labels on a graded export stay 0/1)."""
        out: dict[str, dict[str, int]] = {}
        mappings = (
            self.mapping_to(scale, level=level, yes_grade=1, target_name="the export", level_field="level")
            if scale is not None
            else {}
        )
        for r in sorted(self._items.values(), key=lambda x: x.label.key):
            value = r.value
            if scale is not None:
                value = mappings[r.label.scale].apply(value)
            out.setdefault(r.label.qid, {})[r.label.docno] = value
        return out
