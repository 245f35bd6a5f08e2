"""Human labels and the judge's verdicts on one stated scale before they meet in the pool.

The pool is on the judge's scale (``binary`` for a yes/no judge, ``graded`` 0-3 for
``--mode graded``). Human labels (``--qrels``) are put on it with the one mapping of
:mod:`judge.metrics` (:func:`judge.metrics.resolve_mapping`):

* graded labels, binary judge: ``--qrels-level L`` (grade >= L is relevant); without it, the
  ``-l`` the user gave explicitly is taken as L; with neither the run is refused (exit 2,
  naming both scales) before any call. The pool is then binary and scored at level 1.
* binary labels (every grade 0 or 1), graded judge: ``--qrels-yes-grade G`` (a labelled
  "relevant" is grade G); without it the run is refused.
* same scale: the labels are used as they are.

On a binary pool (binary judge, binary or binarised labels) a relevance level above 1 could
never be reached: it is refused, unless it is the level that binarised graded labels.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from judge.io import Qrels
from judge.metrics import Scale, ScaleError, ScaleMapping, resolve_mapping, scale_of_labels

QRELS_LEVEL_FIELD = "--qrels-level"
QRELS_YES_GRADE_FIELD = "--qrels-yes-grade"


@dataclass(frozen=True)
class PoolScale:
    """The scale the pool is scored on, how the human labels were put on it, the relevance
    level the pool is evaluated at and where that level came from."""

    scale: Scale
    mapping: ScaleMapping | None
    level: int
    level_source: str
    qrels_level_source: str | None = None

    def conventions(self, *, human_pairs: int) -> dict[str, Any]:
        """The report's conventions about scales (stated even without human labels)."""
        out: dict[str, Any] = {
            "scale": self.scale,
            "judge_scale": self.scale,
            "relevance_level_source": self.level_source,
            "human_labels_scale": self.mapping.source if self.mapping is not None else None,
            "human_labels_mapping": self.mapping.as_dict() if self.mapping is not None else None,
            "qrels_level": self.mapping.level if self.mapping is not None else None,
            "qrels_level_source": self.qrels_level_source,
            "pairs_fixed_by_people": human_pairs,
        }
        return out


def judge_scale(mode: str) -> Scale:
    return "graded" if mode == "graded" else "binary"


def resolve_pool_scale(
    mode: str,
    human: Qrels | None,
    *,
    relevance_level: int | None,
    qrels_level: int | None,
    qrels_yes_grade: int | None,
    grade_threshold: int,
) -> PoolScale:
    """The pool's scale and level for a judge in ``mode`` and the human labels ``human``
    (None: no labels); :class:`ScaleError` (naming both scales and the flag that resolves
    it) when they cannot meet. Pure: call it before any judging."""
    target = judge_scale(mode)
    mapping: ScaleMapping | None = None
    qrels_source: str | None = None
    if human is not None:
        source = scale_of_labels(int(g) for g in human.grades if g >= 0)
        level = qrels_level
        qrels_source = QRELS_LEVEL_FIELD if qrels_level is not None else None
        if source == "graded" and target == "binary" and level is None and relevance_level is not None:
            level, qrels_source = relevance_level, "-l"
        if (
            qrels_level is not None
            and relevance_level is not None
            and target == "binary"
            and relevance_level not in (1, qrels_level)
        ):
            raise ScaleError(
                f"-l {relevance_level} and --qrels-level {qrels_level} disagree: on a binary pool "
                "the labels are made binary at --qrels-level and scored at level 1",
                field="-l",
            )
        mapping = resolve_mapping(
            source,
            target,
            level=level,
            yes_grade=qrels_yes_grade,
            source_name="the --qrels labels",
            target_name="the judge (--mode binary)" if target == "binary" else "the judge (--mode graded)",
            level_field=QRELS_LEVEL_FIELD,
            yes_grade_field=QRELS_YES_GRADE_FIELD,
        )
        if mapping.source == "graded" and mapping.target == "binary":
            return PoolScale(
                target,
                mapping,
                level=1,
                level_source=f"1 on the binary pool (labels made binary at grade >= {mapping.level})",
                qrels_level_source=qrels_source,
            )
        if mapping.identity:
            qrels_source = None
    if target == "binary":
        if relevance_level is not None and relevance_level > 1:
            raise ScaleError(
                f"-l {relevance_level} on a binary pool: the judge (--mode binary) and "
                f"{'the --qrels labels' if human is not None else 'the pool'} are binary (0/1), "
                f"so no pair reaches grade {relevance_level}; use -l 1, or --mode graded",
                field="-l",
            )
        level = relevance_level if relevance_level is not None else 1
        return PoolScale(target, mapping, level, "-l" if relevance_level is not None else "default 1")
    if relevance_level is not None:
        return PoolScale(target, mapping, relevance_level, "-l")
    return PoolScale(target, mapping, grade_threshold, f"the judge's grade threshold {grade_threshold}")


def map_human(human: Qrels | None, scale: PoolScale) -> Qrels | None:
    """``human`` with every grade put on the pool's scale (negative grades kept)."""
    if human is None or scale.mapping is None or scale.mapping.identity:
        return human
    mapping = scale.mapping
    grades = np.array([mapping.apply(int(g)) for g in human.grades], dtype=np.int64)
    return replace(human, grades=grades)
