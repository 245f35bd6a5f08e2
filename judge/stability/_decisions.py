"""How a stability run's verdicts are decided besides the judge: human labels and ``--adapt``.

* **Human labels** (:attr:`StabilityOptions.labels <judge.stability.StabilityOptions>`): a
  labelled passage has its label in every run, put on the judge's scale by the stated
  mapping, so it neither flips nor moves the figures.
* **``--adapt``** (:attr:`judge.batch.RunSpec.adapt`): when a run's last query is in, its
  records are decided by :func:`judge.batch.adapt_records` from the *same* labels (one label
  set for every run: each run's ``adaptation`` block names it by the same ``labels_sha256``).
  The rule is fitted on that run's own P(yes) and decides the run's passages only where its
  leave-one-query-out κ beats the judge alone's; otherwise the run keeps the judge's verdicts
  and its block says why. The labels then go on as without ``--adapt``. So the report's
  spreads, flip rate and agreement measure how the *adapted* verdicts move from run to run,
  and the report's ``adaptation`` section says, run by run, whether the rule was applied and
  why, with one ``labels_sha256`` for the whole report (or, plainly, that the runs learned from
  different labelled pairs, or disagreed on applying the rule).

``expected_map`` and the borderline list read the model's P(yes), as in ``judge score``: they
do not move with the rule (the section says so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from judge.batch import FeatureFn, adapt_records, build_record, labelled_verdict
from judge.io import DatasetRecord, InputError
from judge.judging import JudgeConfig, JudgeResult, PassageVerdict
from judge.metrics import Scale, ScaleError, ScaleMapping

if TYPE_CHECKING:
    from judge.store import LabelSet

__all__ = ["ADAPT_CONVENTION", "Decisions"]

ADAPT_CONVENTION = (
    "every run's passages decided by the rule the same labels teach (judge.batch.adapt_records), fitted "
    "on that run's P(yes) and applied only where its leave-one-query-out kappa beats the judge alone's; "
    "the labels then decide their own passages; the spreads, flips and agreement are the adapted "
    "verdicts'; expected_map and the borderline list read the model's P(yes), not p_adapted"
)


class Decisions:
    """The labels and the ``--adapt`` rule of one stability run (see the module docstring).

    Built before any call: a label scale that cannot meet the judge's is an InputError
    naming ``--labels-level``/``--labels-yes-grade``."""

    def __init__(
        self,
        records: Sequence[DatasetRecord],
        config: JudgeConfig,
        *,
        labels: LabelSet | None,
        level: int | None,
        yes_grade: int | None,
        k: Sequence[int],
        adapt: bool = False,
        features: FeatureFn | None = None,
    ) -> None:
        self.records = records
        self.config = config
        self.labels = labels
        self.level, self.yes_grade = level, yes_grade
        self.k = tuple(k)
        self.adapt = adapt
        self.features = features
        self.mappings: Mapping[Scale, ScaleMapping] = {}
        self.human = 0
        self.blocks: dict[int, dict[str, Any]] = {}
        if labels is None:
            return
        try:
            self.mappings = labels.mapping_to(
                config.mode, level=level, yes_grade=yes_grade, target_name="the judge"
            )
        except ScaleError as exc:
            raise InputError(exc.message, field="--" + (exc.field or "labels").replace("_", "-")) from None
        self.human = sum(
            1
            for rec in records
            for p in rec.passages
            if labels.lookup(rec.id, p.docno, rec.query) is not None
        )

    def labelled(self, record: DatasetRecord, verdicts: list[PassageVerdict]) -> list[PassageVerdict]:
        """``verdicts`` with every labelled passage decided by its human label."""
        if self.labels is None:
            return verdicts
        out: list[PassageVerdict] = []
        for p, v in zip(record.passages, verdicts, strict=True):
            hit = self.labels.lookup(record.id, p.docno, record.query)
            if hit is None:
                out.append(v)
                continue
            out.append(
                labelled_verdict(
                    v, hit, self.mappings, mode=self.config.mode, grade_threshold=self.config.grade_threshold
                )
            )
        return out

    def adapted(self, run_index: int, results: Sequence[JudgeResult]) -> list[list[PassageVerdict]]:
        """One finished run's verdicts, query by query, as :func:`judge.batch.adapt_records`
        decides them from the labels (the rule's where it helps, else the judge's; human
        labels undone: :meth:`labelled` puts them on again). Keeps the run's block."""
        assert self.labels is not None
        lines = [build_record(rec, res, self.k) for rec, res in zip(self.records, results, strict=True)]
        out, block = adapt_records(
            lines,
            self.labels,
            k=self.k,
            level=self.level,
            yes_grade=self.yes_grade,
            features=self.features,
        )
        self.blocks[run_index] = block
        return [[PassageVerdict.model_validate_json(json.dumps(v)) for v in line["verdicts"]] for line in out]

    def echo(self, runs: int) -> dict[str, Any]:
        """The report's ``human_labels`` and (with ``--adapt``) ``adaptation`` sections."""
        out: dict[str, Any] = {}
        if self.labels is not None:
            out["human_labels"] = {
                "source": self.labels.source,
                "passages": self.human,
                "mapping": {str(s): m.as_dict() for s, m in self.mappings.items()},
                "convention": "a labelled passage has its human label in every run (it cannot flip)",
            }
        if self.adapt:
            out["adaptation"] = self._section([self.blocks[i] for i in range(runs)])
        return out

    def _section(self, blocks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        assert self.labels is not None
        per_run = [_run_row(i, b) for i, b in enumerate(blocks)]
        hashes = sorted({b["labels_sha256"] for b in blocks})
        applied = [r["run"] for r in per_run if r["applied"]]
        every, none = len(applied) == len(blocks), not applied
        section: dict[str, Any] = {
            "labels_source": self.labels.source,
            "labels_sha256": hashes[0] if len(hashes) == 1 else None,
            "same_labels_in_every_run": len(hashes) == 1,
            "applied_runs": applied,
            "applied": "every run" if every else "no run" if none else "some runs",
            "runs_agree": every or none,
            "statement": _statement(per_run, applied),
            "convention": ADAPT_CONVENTION,
            "runs": per_run,
        }
        if len(hashes) > 1:
            section["labels_note"] = (
                "the runs learned from different labelled pairs (a labelled passage was unjudged in some "
                "run): each run's labels_sha256 is in its row; no one hash names the whole report"
            )
        return section


def _kappa(block: Mapping[str, Any], side: str) -> float | None:
    value = (block.get("leave_one_query_out") or {}).get(side, {}).get("kappa")
    return None if value is None else float(value)


def _run_row(index: int, block: Mapping[str, Any]) -> dict[str, Any]:
    """A run's adaptation essentials (its whole block is in no file: the run's verdicts
    carry ``p_adapted`` and ``adapted``)."""
    return {
        "run": index,
        "applied": bool(block["applied"]),
        "reason": block["reason"],
        "warning": block.get("warning"),
        "labels_sha256": block["labels_sha256"],
        "method": block["method"],
        "features": list(block["features"]),
        "labels": block["labels"],
        "queries": block["queries"],
        "kappa_alone": _kappa(block, "alone"),
        "kappa_adapted": _kappa(block, "adapted"),
        "decided": block["decided"],
        "changed": block["changed"],
    }


def _runs_text(indices: Sequence[int]) -> str:
    return ("run " if len(indices) == 1 else "runs ") + ", ".join(str(i) for i in indices)


def _statement(per_run: Sequence[Mapping[str, Any]], applied: Sequence[int]) -> str:
    """Whether the rule decided the runs, in words."""
    if len(applied) == len(per_run):
        return "the rule was applied in every run: the figures are the adapted verdicts'"
    if not applied:
        return (
            "the rule was applied in no run: every run kept the judge's verdicts "
            f"(run {per_run[0]['run']}: {per_run[0]['reason']})"
        )
    kept = [r["run"] for r in per_run if not r["applied"]]
    return (
        f"the runs disagree: the rule was applied in {_runs_text(applied)} and not in {_runs_text(kept)} "
        f"(run {kept[0]}: {next(r['reason'] for r in per_run if r['run'] == kept[0])}); the spread compares "
        "adapted verdicts with the judge's own, so part of it is the rule switching on and off"
    )
