"""Relevance scales, and the one stated mapping between them.

A label is on one of two scales: ``binary`` (0 = not relevant, 1 = relevant) or ``graded``
(0-3, TREC style). Human labels (qrels, reviewers' labels) and judge verdicts meet in pools,
summaries and reports; they may only meet on one scale, and moving a label from one scale to
the other needs a stated rule:

* graded -> binary: ``level`` (a grade >= level is relevant);
* binary -> graded: ``yes_grade`` (the grade a "yes" stands for; a "no" is 0).

:func:`resolve_mapping` turns "this source scale, that target scale, these stated rules" into a
:class:`ScaleMapping` or raises :class:`ScaleError` naming both scales and the setting that
would resolve the mismatch. Every mapping describes itself (:meth:`ScaleMapping.describe`) so
reports can say what was applied.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

Scale = Literal["binary", "graded"]
SCALES: tuple[Scale, ...] = get_args(Scale)
MAX_GRADE = 3


class ScaleError(ValueError):
    """Two scales meet without a stated mapping, or a label does not fit its scale.
    ``field`` names the setting that resolves it (e.g. ``qrels_level``)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        self.message = message
        super().__init__(message)


def check_scale(scale: str, *, field: str = "scale") -> Scale:
    """``scale`` as a :data:`Scale`, or :class:`ScaleError` naming ``field``."""
    if scale not in SCALES:
        raise ScaleError(f"unknown scale {scale!r} (expected one of {', '.join(SCALES)})", field=field)
    return scale  # type: ignore[return-value]


def scale_of_labels(labels: Iterable[int]) -> Scale:
    """The narrowest scale that holds every label: ``binary`` when all are 0 or 1 (an empty
    set too), ``graded`` otherwise. Negative labels (trec_eval's "judged, below zero") are
    ignored here."""
    for label in labels:
        if label > 1:
            return "graded"
    return "binary"


def check_label(label: int, scale: Scale, *, field: str = "label") -> int:
    """``label`` if it lies on ``scale`` (0/1 binary, 0..3 graded), else :class:`ScaleError`."""
    top = 1 if scale == "binary" else MAX_GRADE
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label <= top:
        raise ScaleError(f"label {label!r} is not on the {scale} scale (0..{top})", field=field)
    return label


@dataclass(frozen=True)
class ScaleMapping:
    """How labels on ``source`` are put on ``target``. Identity when the scales agree."""

    source: Scale
    target: Scale
    level: int | None = None
    yes_grade: int | None = None

    def apply(self, label: int) -> int:
        """``label`` (on ``source``) on ``target``. Negative labels pass through unchanged."""
        if label < 0 or self.source == self.target:
            return label
        if self.source == "graded":
            assert self.level is not None
            return 1 if label >= self.level else 0
        assert self.yes_grade is not None
        return self.yes_grade if label >= 1 else 0

    @property
    def identity(self) -> bool:
        return self.source == self.target

    def describe(self) -> str:
        """One line for reports and conventions: what was applied."""
        if self.identity:
            return f"{self.source} labels used as they are"
        if self.source == "graded":
            return f"graded labels made binary: grade >= {self.level} is relevant"
        return f"binary labels made graded: yes = grade {self.yes_grade}, no = grade 0"

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "target": self.target,
            "level": self.level,
            "yes_grade": self.yes_grade,
            "rule": self.describe(),
        }


def resolve_mapping(
    source: Scale,
    target: Scale,
    *,
    level: int | None = None,
    yes_grade: int | None = None,
    source_name: str = "labels",
    target_name: str = "judge",
    level_field: str = "level",
    yes_grade_field: str = "yes_grade",
) -> ScaleMapping:
    """The mapping from ``source`` to ``target`` under the stated rules, or
    :class:`ScaleError` naming both scales (``source_name``/``target_name`` say whose they
    are, e.g. ``"qrels"`` and ``"the binary judge"``) and the setting that would resolve it.
    A stated rule that the scales do not need is kept out of the mapping."""
    if source == target:
        return ScaleMapping(source, target)
    if source == "graded":
        missing = (
            f"{source_name} are graded (0-{MAX_GRADE}) but {target_name} is binary: "
            f"state which grade counts as relevant ({level_field}=L: grade >= L is relevant)"
        )
        return ScaleMapping(source, target, level=_stated(level, level_field, missing))
    missing = (
        f"{source_name} are binary (0/1) but {target_name} is graded (0-{MAX_GRADE}): "
        f"state the grade a 'yes' stands for ({yes_grade_field}=G)"
    )
    return ScaleMapping(source, target, yes_grade=_stated(yes_grade, yes_grade_field, missing))


def _stated(value: int | None, field: str, missing: str) -> int:
    """The grade a mapping needs (``level`` or ``yes_grade``): a :class:`ScaleError` saying
    ``missing`` when it is not stated, or naming ``field`` when it is outside 1..MAX_GRADE."""
    if value is None:
        raise ScaleError(missing, field=field)
    if not 1 <= value <= MAX_GRADE:
        raise ScaleError(f"{field} must be in 1..{MAX_GRADE}, not {value}", field=field)
    return value
