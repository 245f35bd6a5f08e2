"""Sample labels: human labels of pairs drawn at random from a run's pairs (``--sample-labels``).

A TREC qrels file, one pair a line: ``qid iter docno grade`` (uniform sample: every line
has four columns), or ``qid iter docno grade inclusion`` where ``inclusion`` is the
probability, in (0, 1], with which the pair was drawn (a review queue's sample mode writes
it). Every line of one file has the same number of columns. ``#`` lines and blank lines
are skipped. Errors name the file, the line and the column (:class:`InputError`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from judge.io._errors import InputError

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
    """Read and check a sample-labels file (see the module docstring)."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", path=where) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", path=where) from None
    labels: list[SampleLabel] = []
    seen: dict[tuple[str, str], int] = {}
    width: int | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cols = line.split()
        if len(cols) not in (4, 5):
            raise InputError(
                f"expected 'qid iter docno grade [inclusion]', got {len(cols)} columns",
                path=where,
                line=number,
            )
        if width is not None and len(cols) != width:
            raise InputError(
                f"{len(cols)} columns where earlier lines have {width}: give every line an inclusion "
                "probability or none",
                path=where,
                line=number,
                field="inclusion",
            )
        width = len(cols)
        qid, _, docno, grade_text = cols[:4]
        try:
            grade = int(grade_text)
        except ValueError:
            raise InputError(
                f"not an integer: {grade_text!r}", path=where, line=number, field="grade"
            ) from None
        if grade < 0:
            raise InputError(f"must be >= 0, got {grade}", path=where, line=number, field="grade")
        inclusion: float | None = None
        if len(cols) == 5:
            try:
                inclusion = float(cols[4])
            except ValueError:
                raise InputError(
                    f"not a number: {cols[4]!r}", path=where, line=number, field="inclusion"
                ) from None
            if not (math.isfinite(inclusion) and 0.0 < inclusion <= 1.0):
                raise InputError(
                    f"must be in (0, 1], got {cols[4]}", path=where, line=number, field="inclusion"
                )
        key = (qid, docno)
        if key in seen:
            raise InputError(
                f"pair ({qid}, {docno}) is labelled twice (first on line {seen[key]})",
                path=where,
                line=number,
            )
        seen[key] = number
        labels.append(SampleLabel(qid, docno, grade, number, inclusion))
    return SampleLabels(where, tuple(labels))
