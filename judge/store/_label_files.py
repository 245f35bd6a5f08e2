"""Label files: TREC qrels and JSONL exports read as checked labels and written back, and a
named calibration applied to a judge config."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from judge.io import (
    MAX_JSON_DEPTH,
    UNLABELLED,
    InputError,
    RatedPairs,
    deep_field,
    json_problem,
    qrels_escape,
    read_qrels_lines,
)
from judge.metrics import Scale
from judge.metrics import scale_of_labels as _scale_of_labels
from judge.store._label_model import (
    DEFAULT_COLLECTION,
    Label,
    LabelSet,
    check_label_fields,
)
from judge.store._label_store import LabelStore

LabelFormat = Literal["qrels", "jsonl"]
LABEL_FORMATS: tuple[LabelFormat, ...] = ("qrels", "jsonl")

__all__ = [
    "LABEL_FORMATS",
    "LabelFormat",
    "SampleExport",
    "calibrated_config",
    "labels_to_jsonl",
    "labels_to_qrels",
    "read_label_file",
    "read_label_lines",
    "sample_job",
    "sample_label_lines",
]


def read_label_file(
    path: str | Path,
    *,
    reviewer: str | None = None,
    scale: Scale | None = None,
    collection: str = DEFAULT_COLLECTION,
) -> list[Label]:
    """The labels of :func:`read_label_lines`, without their line numbers."""
    return [lab for _, lab in read_label_lines(path, reviewer=reviewer, scale=scale, collection=collection)]


def read_label_lines(
    path: str | Path,
    *,
    reviewer: str | None = None,
    scale: Scale | None = None,
    collection: str = DEFAULT_COLLECTION,
) -> list[tuple[int, Label]]:
    """Labels from a TREC qrels file or a JSONL labels export (``.jsonl``/``.json`` or a
    first non-blank character ``{``).

    qrels: each line is a label by ``reviewer`` (required) on ``scale`` (default: binary
    when every grade is 0/1, else graded), ids unescaped (:func:`qrels_unescape`); negative
    grades are skipped; a pair given twice is read once with the same grade and refused
    with another (:class:`judge.io.RatedPairs`, naming both lines). JSONL: each object as
    :meth:`Label.as_dict` writes it; each line keeps its own ``reviewer`` and ``collection``
    (``reviewer``/``collection`` given here fill lines without one; ``scale`` given here
    overrides). Bad input raises :class:`InputError` naming file, line and field; nothing
    is returned then."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no such labels file", path=p)
    with p.open("rb") as fh:
        head = fh.read(4096).lstrip()
    if p.suffix in (".jsonl", ".json") or head.startswith(b"{"):
        return _read_jsonl_labels(p, reviewer=reviewer, scale=scale, collection=collection)
    if reviewer is None or not reviewer:
        raise InputError("a qrels file needs a reviewer name (--reviewer NAME)", path=p, field="reviewer")
    rows = _read_qrels_lines(p)
    pairs = RatedPairs(str(p))
    rows = [r for r in rows if pairs.first(r[1], r[2], r[3], line=r[0], field="grade")]
    use: Scale = scale if scale is not None else _scale_of_labels([g for *_, g in rows if g >= 0])
    out: list[tuple[int, Label]] = []
    for number, qid, docno, grade in rows:
        if grade < 0:
            continue
        fields = check_label_fields(
            {
                "qid": qid,
                "docno": docno,
                "label": grade,
                "reviewer": reviewer,
                "scale": use,
                "collection": collection,
            },
            where=str(p),
            line=number,
        )
        out.append((number, Label(**fields)))
    return out


def _text_lines(p: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line that is not blank, decoded as strict UTF-8 (an
    :class:`InputError` naming the line otherwise)."""
    with p.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"invalid UTF-8 at byte {exc.start}", path=p, line=number) from None
            if line.strip():
                yield number, line


def _read_qrels_lines(p: Path) -> list[tuple[int, str, str, int]]:
    """(line, qid, docno, grade) of each line of a qrels file (``qid iter docno grade``) as
    the one qrels reader reads them (:func:`judge.io.read_qrels_lines`: strict UTF-8 ids,
    :class:`InputError` naming the line and the field), ids unescaped
    (:func:`qrels_unescape`)."""
    return [
        (number, qid, docno, grade) for number, qid, docno, grade, _ in read_qrels_lines(p).rows(escaped=True)
    ]


def _read_jsonl_labels(
    p: Path, *, reviewer: str | None, scale: Scale | None, collection: str
) -> list[tuple[int, Label]]:
    """Each line checked as a dataset line is (:func:`judge.io.json_problem`): invalid UTF-8,
    a lone surrogate escape or nesting deeper than :data:`judge.io.MAX_JSON_DEPTH` is an
    :class:`InputError` naming its line, never a crash."""
    out: list[tuple[int, Label]] = []
    for number, line in _text_lines(p):
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not JSON: {exc.msg}", path=p, line=number) from None
        except ValueError:  # an integer of more digits than Python converts (4300)
            raise InputError("not JSON: a number of more than 4300 digits", path=p, line=number) from None
        except RecursionError:
            raise InputError(
                f"nested deeper than {MAX_JSON_DEPTH} levels", path=p, line=number, field=deep_field(line)
            ) from None
        if not isinstance(data, dict):
            raise InputError("each line must be a JSON object", path=p, line=number)
        problem = json_problem(data, line)
        if problem is not None:
            raise InputError(problem[1], path=p, line=number, field=problem[0] or None)
        data.setdefault("collection", collection)
        if reviewer and "reviewer" not in data:
            data["reviewer"] = reviewer
        if scale is not None:
            data["scale"] = scale
        out.append((number, Label.from_dict(data, where=str(p), line=number)))
    return out


def labels_to_qrels(
    labels: LabelSet, path: str | Path, *, scale: Scale | None = None, level: int | None = None
) -> int:
    """Write the resolved labels as TREC qrels (ids by :func:`qrels_escape`); returns the
    number of lines."""
    qrels = labels.qrels(scale, level=level)
    with Path(path).open("w", encoding="utf-8") as fh:
        for qid, docs in qrels.items():
            for docno, value in docs.items():
                fh.write(f"{qrels_escape(qid)} 0 {qrels_escape(docno)} {value}\n")
    return sum(len(d) for d in qrels.values())


@dataclass(frozen=True)
class SampleExport:
    """A job's sample file (:func:`sample_label_lines`): its ``lines``, the drawn pairs with a
    label (``labelled``) and those left unlabelled (``unlabelled``, (qid, docno) each)."""

    job: str
    lines: list[str]
    labelled: int
    unlabelled: list[tuple[str, str]]

    def text(self) -> str:
        return "".join(self.lines)


def sample_job(store: LabelStore, job: str | None, *, collection: str, field: str = "--job") -> str:
    """The job whose draws to export: ``job`` when it has a recorded draw, else (None) the
    only job that has one; :class:`InputError` naming ``field`` otherwise (a sample file is
    one job's: its probabilities are that job's draws over that job's pairs)."""
    jobs = store.sample_jobs(collection=collection)
    if job is not None:
        if job not in jobs:
            raise InputError(
                f"no sample drawn over {job!r} in collection {collection!r}"
                + (f" (drawn over: {', '.join(jobs[:5])}{', ...' if len(jobs) > 5 else ''})" if jobs else ""),
                field=field,
            )
        return job
    if len(jobs) == 1:
        return jobs[0]
    if not jobs:
        raise InputError(f"no sample drawn in collection {collection!r} (judge labels sample)", field=field)
    raise InputError(
        f"{len(jobs)} jobs have samples ({', '.join(jobs[:5])}{', ...' if len(jobs) > 5 else ''}): "
        "name the one whose sample to export",
        field=field,
    )


def sample_label_lines(store: LabelStore, *, job: str, collection: str = DEFAULT_COLLECTION) -> SampleExport:
    """The sample file of ``job``: one five-column qrels line (``qid 0 docno label
    inclusion``, what ``--sample-labels`` reads) for **every** pair the sample mode drew over
    the job, sorted by pair, ids by :func:`judge.io.qrels_escape`. ``inclusion`` is the pair's
    union probability over the job's draws; ``label`` the pair's latest label, whenever it
    was given (before the draw too: a drawn pair that someone labelled is labelled), or
    ``-1`` for a drawn pair nobody labelled, which ``--sample-labels`` names and which keeps
    the estimate from an interval unless ``--allow-unlabelled``. A first ``#`` line says
    so. Labels on pairs never drawn are not there: they never enter an estimate."""
    latest: dict[tuple[str, str], Label] = {}
    for lab in store.latest(collection=collection):  # ordered by time: the last one wins
        latest[lab.key] = lab
    body: list[str] = []
    unlabelled: list[tuple[str, str]] = []
    for q, d, inclusion, _ in store.sample_draws(collection=collection, job=job):
        found = latest.get((q, d))
        grade = UNLABELLED if found is None or found.label is None else found.label
        if grade == UNLABELLED:
            unlabelled.append((q, d))
        body.append(f"{qrels_escape(q)} 0 {qrels_escape(d)} {grade} {inclusion!r}\n")
    head = (
        f"# judge sample of {qrels_escape(job)}: {len(body)} drawn pair(s), {len(unlabelled)} left unlabelled"
        + (
            " (label -1: label them, or --allow-unlabelled, the service's option allow_unlabelled, "
            "gives an interval that holds whatever labels they have)"
            if unlabelled
            else ""
        )
        + "\n"
    )
    return SampleExport(job, [head, *body], len(body) - len(unlabelled), unlabelled)


def labels_to_jsonl(labels: Iterable[Label], path: str | Path) -> int:
    """Write labels (every reviewer's, with their provenance) as JSONL; returns the count."""
    n = 0
    with Path(path).open("w", encoding="utf-8") as fh:
        for lab in labels:
            fh.write(json.dumps(lab.as_dict(), ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def calibrated_config(
    config: Any, name: str | None, *, path: str | Path | None = None, field: str = "calibration"
) -> Any:
    """``config`` (a :class:`judge.judging.JudgeConfig`) with the P(yes) threshold of the
    named calibration in the label store at ``path``; ``config`` itself when ``name`` is
    None. :class:`InputError` (naming ``field``) when the calibration is missing, was fitted
    on another template (id or file hash), or the config already states a threshold."""
    from judge.judging import template_for

    if not name:
        return config
    if config.p_yes_threshold is not None:
        raise InputError("give a calibration or a P(yes) threshold, not both", field=field)
    with LabelStore(path) as store:
        cal = store.calibration(name)
    if cal is None:
        raise InputError(f"no calibration named {name!r} in the label store", field=field)
    if config.language == "auto" and not config.template:
        # A threshold holds for one template: the calibration's template judges every query.
        from judge.judging import load_template

        fitted = load_template(cal.template_id)
        config = replace(config, language=fitted.language, template=cal.template_id)
    template = template_for(config)
    if cal.template_id != template.id or (cal.template_hash and cal.template_hash != template.hash):
        raise InputError(
            f"calibration {name!r} is for template {cal.template_id} ({(cal.template_hash or '')[:12]}), "
            f"this run uses {template.id} ({template.hash[:12]})",
            field=field,
        )
    return replace(config, p_yes_threshold=cal.threshold)
