"""Sample labels: human labels of pairs drawn at random from a run's pairs (``--sample-labels``).

A TREC qrels file, one pair a line: ``qid iter docno grade`` (uniform sample: every line
has four columns), or ``qid iter docno grade inclusion`` where ``inclusion`` is the
probability, in [1e-6, 1], with which the pair was drawn (a review queue's sample mode writes
it; at least :data:`judge.io.MIN_INCLUSION`). Every line of one file has the same number of
columns. ``#`` lines and blank lines are skipped; a file without a data line is refused. The
lines are read by the one qrels reader (:func:`judge.io.read_qrels_lines`), ids as
:func:`judge.io.qrels_escape` writes them (``doc%201`` is ``doc 1``, ``50%25`` is ``50%``);
errors name the file, the line and the column (:class:`InputError`).

A grade of ``-1`` marks a pair that was drawn and **left unlabelled** (``judge labels export
--sample`` writes one such line for each): it is no label, but it is part of the sample, so
an estimate names it and withholds its interval unless the user accepts counting it as
agreeing with the judge (``--allow-unlabelled``). Any other negative grade is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from judge.io._errors import InputError
from judge.io._trec import read_qrels_lines

__all__ = ["UNLABELLED", "SampleLabel", "SampleLabels", "read_sample_labels"]

UNLABELLED = -1
"""The grade of a sample file's line for a drawn pair nobody labelled."""


@dataclass(frozen=True)
class SampleLabel:
    """One labelled pair: its grade, the probability it was drawn with (None: a uniform
    sample) and the file line it came from."""

    qid: str
    docno: str
    grade: int
    line: int
    inclusion: float | None = None


@dataclass(frozen=True)
class SampleLabels:
    """The labels of one sample file (``path``), in file order, and the drawn pairs it names
    as left unlabelled (``unlabelled``: lines of grade -1)."""

    path: str
    labels: tuple[SampleLabel, ...]
    unlabelled: tuple[SampleLabel, ...] = ()

    @property
    def weighted(self) -> bool:
        """Drawn with recorded inclusion probabilities (else a uniform sample)."""
        first = self.labels[:1] or self.unlabelled[:1]
        return bool(first) and first[0].inclusion is not None

    def __len__(self) -> int:
        return len(self.labels)

    def check_pairs(self, pairs: set[tuple[str, str]], *, field: str = "--sample-labels") -> None:
        """Every label names a pair of ``pairs`` (qid, docno), else InputError naming the
        first line that does not (the unlabelled lines too)."""
        for label in sorted((*self.labels, *self.unlabelled), key=lambda lab: lab.line):
            if (label.qid, label.docno) not in pairs:
                raise InputError(
                    f"pair ({label.qid}, {label.docno}) is not among the run's pairs: a sample "
                    "must be drawn from the pairs the run judges",
                    path=self.path,
                    line=label.line,
                    field=field,
                )


def read_sample_labels(path: str | Path) -> SampleLabels:
    """Read and check a sample-labels file (see the module docstring) with the one qrels
    reader, :func:`judge.io.read_qrels_lines` (ids unescaped); then no grade below -1 (-1:
    drawn, unlabelled) and no pair twice."""
    rows = read_qrels_lines(path, inclusion=True)
    labels: list[SampleLabel] = []
    unlabelled: list[SampleLabel] = []
    seen: dict[tuple[str, str], int] = {}
    for number, qid, docno, grade, inclusion in rows.rows(escaped=True):
        if grade < UNLABELLED:
            raise InputError(
                f"must be >= 0 (or -1: drawn, left unlabelled), got {grade}",
                path=rows.path,
                line=number,
                field="grade",
            )
        key = (qid, docno)
        if key in seen:
            raise InputError(
                f"pair ({qid}, {docno}) is labelled twice (first on line {seen[key]})",
                path=rows.path,
                line=number,
            )
        seen[key] = number
        (unlabelled if grade == UNLABELLED else labels).append(
            SampleLabel(qid, docno, grade, number, inclusion)
        )
    return SampleLabels(rows.path, tuple(labels), tuple(unlabelled))
