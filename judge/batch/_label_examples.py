"""Worked examples for ``judge score --examples N``: the bank of a dataset's labelled
passages (:func:`dataset_example_bank`).

The labels are the run's own (``--labels FILE|store``: a :class:`judge.store.LabelSet`),
put on the judge's scale by the run's stated mapping (``--labels-level`` for graded labels
on a binary judge: grade >= L is "yes"; ``--labels-yes-grade`` for binary labels on a graded
one); the texts are the dataset's own passages (a label whose passage the dataset does not
hold is not used). Under ``--examples`` a labelled passage is never judged, so it is never
its own example: it takes its label as its verdict with no call
(:func:`judge.batch._label_apply.labels_decide`, recorded as ``--labels`` records a label).
Without ``--examples`` every passage is judged and the labels replace the verdicts
afterwards, so agreement and calibration still see the judge's P(yes) of labelled passages.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from judge.io import DEFAULT_MAX_PASSAGE_CHARS, InputError, iter_dataset
from judge.judging import ExampleBank, ExampleSpec, bank_of
from judge.metrics import ScaleError
from judge.store import LabelSet

__all__ = ["dataset_example_bank"]


def dataset_example_bank(
    path: str | Path,
    labels: LabelSet | None,
    spec: ExampleSpec,
    mode: str,
    *,
    grade_threshold: int = 2,
    level: int | None = None,
    yes_grade: int | None = None,
    field_map: Mapping[str, str] | None = None,
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS,
) -> ExampleBank | None:
    """The labelled passages of the dataset at ``path`` (see the module docstring); None
    without ``--examples``. No labels: :class:`InputError` naming ``--examples``; labels on
    another scale without the stated mapping: naming ``--labels-level``/``--labels-yes-grade``."""
    if not spec.active:
        return None
    if labels is None:
        raise InputError("needs labels to take the examples from: --labels FILE|store", field="--examples")
    try:
        mappings = labels.mapping_to(
            mode,  # type: ignore[arg-type]
            level=level,
            yes_grade=yes_grade,
            target_name="the judge",
        )
    except ScaleError as exc:
        raise InputError(exc.message, field="--" + (exc.field or "labels").replace("_", "-")) from None
    queries: dict[str, str] = {}
    texts: dict[str, dict[str, str]] = {}
    labelled: dict[str, dict[str, int]] = {}
    for item in iter_dataset(path, field_map=field_map, max_passage_chars=max_passage_chars):
        if isinstance(item, InputError):
            continue  # the run reports it
        queries[item.id] = item.query
        for p in item.passages:
            if p.id is None:
                continue
            hit = labels.lookup(item.id, p.id, item.query)
            if hit is None:
                continue
            labelled.setdefault(item.id, {})[p.id] = mappings[hit.label.scale].apply(hit.value)
            texts.setdefault(item.id, {})[p.id] = p.text
    bank = bank_of(
        spec,
        labelled,
        queries,
        texts,
        yes_at=grade_threshold if mode == "graded" else 1,
        mapping={str(s): m.as_dict() for s, m in mappings.items()},
    )
    matched = sum(len(v) for v in labelled.values())
    bank.skipped += len(labels) - matched  # labels no passage of the dataset carries
    return bank
