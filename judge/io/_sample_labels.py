"""Sample labels: human labels of pairs drawn at random from a run's pairs (``--sample-labels``).

A TREC qrels file, one pair a line: ``qid iter docno grade`` (uniform sample: every line
has four columns), or ``qid iter docno grade inclusion`` where ``inclusion`` is the
probability, in (0, 1], with which the pair was drawn (a review queue's sample mode writes
it). Every line of one file has the same number of columns. ``#`` lines and blank lines
are skipped; a file without a data line is refused. The lines are read by the one qrels
reader (:func:`judge.io.read_qrels_lines`); errors name the file, the line and the column
(:class:`InputError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from judge.io._errors import InputError
from judge.io._trec import read_qrels_lines

__all__ = ["SampleLabel", "SampleLabels", "read_sample_labels"]


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
    """The labels of one sample file (``path``), in file order."""

    path: str
    labels: tuple[SampleLabel, ...]

    @property
    def weighted(self) -> bool:
        """Drawn with recorded inclusion probabilities (else a uniform sample)."""
        return bool(self.labels) and self.labels[0].inclusion is not None

    def __len__(self) -> int:
        return len(self.labels)

    def check_pairs(self, pairs: set[tuple[str, str]], *, field: str = "--sample-labels") -> None:
        """Every label names a pair of ``pairs`` (qid, docno), else InputError naming the
        first line that does not."""
        for label in self.labels:
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
    reader, :func:`judge.io.read_qrels_lines`; then no grade below 0 and no pair twice."""
    rows = read_qrels_lines(path, inclusion=True)
    labels: list[SampleLabel] = []
    seen: dict[tuple[str, str], int] = {}
    for number, qid, docno, grade, inclusion in rows.rows():
        if grade < 0:
            raise InputError(f"must be >= 0, got {grade}", path=rows.path, line=number, field="grade")
        key = (qid, docno)
        if key in seen:
            raise InputError(
                f"pair ({qid}, {docno}) is labelled twice (first on line {seen[key]})",
                path=rows.path,
                line=number,
            )
        seen[key] = number
        labels.append(SampleLabel(qid, docno, grade, number, inclusion))
    return SampleLabels(rows.path, tuple(labels))
