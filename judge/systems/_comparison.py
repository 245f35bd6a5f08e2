"""A comparison of systems as one object: its report folder's files, and every view of it.

The folder ``judge compare-systems`` writes (:class:`ReportFolder`; only this module knows
the file names): ``report.json`` / ``report.md`` / ``report.html``, the judged pool
(``pool.input.jsonl``, ``pool.judged.jsonl``), the pool's qrels and each system's run
(``pool.qrels``, ``runs/NAME.run``), ``input.rejects.jsonl``, and ``differences.json`` once
asked for (:meth:`ReportFolder.saved_differences`).

:class:`ComparisonReport` is the report with what its views need (inputs, pool, verdicts,
per-query values): the run builds it from what it computed, :meth:`ComparisonReport.load`
from the folder (and the systems' files that ``report.json`` names); either renders the
same markdown, HTML and differences.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.io import RejectsReporter
from judge.judging import JudgeConfig
from judge.metrics import Evaluation, Measure
from judge.store import atomic_write_text
from judge.systems._expected import expected_evaluation, grade_rows
from judge.systems._inputs import Inputs, read_systems
from judge.systems._model import SystemsReport
from judge.systems._options import SystemsOptions, label_grades, query_texts, read_human_labels
from judge.systems._pool import Pool, PoolVerdicts, build_pool, existing_mode, read_pool_verdicts
from judge.systems._render import ReportData, render_differences, render_html, render_markdown
from judge.systems._scoring import Paired, compare_systems_paired, evaluate_files, parse_measures, pool_qrels

VIEWS = {"json": "report.json", "md": "report.md", "html": "report.html"}


@dataclass(frozen=True)
class ReportFolder:
    """Where a comparison's files are (``path``: the report directory)."""

    path: Path

    @property
    def report_json(self) -> Path:
        return self.path / VIEWS["json"]

    @property
    def html_path(self) -> Path:
        return self.path / VIEWS["html"]

    @property
    def pool_input(self) -> Path:
        """The pooled passages sent to the judge (``judge score``'s input format)."""
        return self.path / "pool.input.jsonl"

    @property
    def pool_judged(self) -> Path:
        """The judge's records of the pool (``judge score``'s output format)."""
        return self.path / "pool.judged.jsonl"

    @property
    def pool_qrels(self) -> Path:
        return self.path / "pool.qrels"

    @property
    def input_rejects(self) -> Path:
        return self.path / "input.rejects.jsonl"

    @property
    def differences_path(self) -> Path:
        return self.path / "differences.json"

    def run(self, system: str) -> Path:
        """One system's ranking as a TREC run."""
        return self.path / "runs" / f"{system}.run"

    @property
    def written(self) -> bool:
        """Whether the comparison finished (its report is written)."""
        return self.report_json.exists()

    def view(self, fmt: str) -> str | None:
        """``report.json`` (``fmt="json"``), ``report.md`` or ``report.html`` as written (None: not yet)."""
        path = self.path / VIEWS[fmt]
        return path.read_text(encoding="utf-8") if path.exists() else None

    def export(self, kind: str, system: str | None = None) -> str | None:
        """``pool.qrels`` (``kind="qrels"``) or one system's run (None: not written yet / no such)."""
        path = self.pool_qrels if kind == "qrels" else self.run(str(system))
        return path.read_text(encoding="utf-8") if path.exists() else None

    def judged_mode(self) -> str | None:
        """The mode of the pool's verdicts already judged (None: none yet)."""
        return existing_mode(self.pool_judged)

    def saved_differences(self) -> dict[str, Any] | None:
        """The differences saved by :meth:`ComparisonReport.save_differences` (None: none yet)."""
        if not self.differences_path.exists():
            return None
        found: dict[str, Any] = json.loads(self.differences_path.read_text(encoding="utf-8"))
        return found


class ComparisonReport:
    """A comparison's report (:attr:`report`, ``report.json``'s content) and what its views
    show: each system's rankings and passages, the pool, its verdicts, the per-query values."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        report: SystemsReport,
        inputs: Inputs,
        pool: Pool,
        verdicts: PoolVerdicts,
        evaluations: Mapping[str, Evaluation | None],
        *,
        measures: Sequence[Measure] | None = None,
        paired: Sequence[Paired] | None = None,
        top_queries: int = 10,
        top_passages: int = 5,
        objective: str | None = None,
    ) -> None:
        self.folder = ReportFolder(Path(folder))
        self.report = report
        conv = report.conventions
        self._data = ReportData(
            report=report,
            inputs=inputs,
            pool=pool,
            verdicts=verdicts,
            evaluations=evaluations,
            paired=paired if paired is not None else self._paired,
            measures=tuple(measures) if measures is not None else parse_measures(conv.get("measures")),
            level=int(conv["relevance_level"]),
            mode=str(conv.get("mode") or "binary"),
            top_queries=top_queries,
            top_passages=top_passages,
            thresholds=dict(conv.get("p_yes_thresholds") or {}),
            objective=objective,
        )

    @classmethod
    def load(
        cls,
        folder: str | os.PathLike[str],
        options: SystemsOptions | None = None,
        *,
        systems: Mapping[str, str | os.PathLike[str]] | None = None,
    ) -> ComparisonReport:
        """The comparison written in ``folder``, with the :class:`~judge.systems.SystemsOptions`
        it was run with (how inputs were read, human labels, what the views show; default:
        the defaults). ``systems``: name -> dataset path when the files moved (default: the
        paths ``report.json`` names). Raises :class:`FileNotFoundError` when the report is
        not written yet."""
        opts = options if options is not None else SystemsOptions()
        where = ReportFolder(Path(folder))
        report = SystemsReport.model_validate(json.loads(where.report_json.read_text(encoding="utf-8")))
        paths = {n: Path(p) for n, p in (systems or {n: s.path for n, s in report.systems.items()}).items()}
        quiet = RejectsReporter(None, io.StringIO(), command="judge compare-systems")
        inputs = read_systems(
            paths, field_map=opts.field_map, max_passage_chars=opts.max_passage_chars, reporter=quiet
        )
        config = JudgeConfig(mode=report.conventions.get("mode") or "binary")
        human, _ = read_human_labels(opts, config, query_texts(inputs))
        pool = build_pool(inputs, depth=opts.depth, human=human, labels=label_grades(opts, inputs, config))
        measures = parse_measures(report.conventions.get("measures"))
        level = int(report.conventions["relevance_level"])
        evaluations = {
            s.name: evaluate_files(where.pool_qrels, where.run(s.name), measures, level)
            for s in inputs.systems
        }
        verdicts = read_pool_verdicts(where.pool_judged)
        if report.conventions.get("tested_figure") == "expected":  # the figure the report tested
            mode = str(report.conventions.get("mode") or "binary")
            rows = grade_rows(pool, verdicts, pool_qrels(pool, verdicts, mode), mode)
            evaluations = {
                s.name: expected_evaluation(evaluations[s.name], s, inputs, rows, level)
                for s in inputs.systems
            }
        return cls(
            folder,
            report,
            inputs,
            pool,
            verdicts,
            evaluations,
            measures=measures,
            top_queries=opts.top_queries,
            top_passages=opts.top_passages,
        )

    @property
    def data(self) -> ReportData:
        """What the views show: inputs, pool, verdicts, per-query values."""
        return self._data

    def with_report(self, report: SystemsReport) -> ComparisonReport:
        """This comparison showing ``report`` instead (e.g. with an experiment's section added)."""
        self.report = report
        self._data.report = report
        return self

    def _paired(self) -> Sequence[Paired]:
        """The comparisons' per-query differences, as the run computed them (same tests,
        same seed): what the HTML's difference charts draw."""
        data, conv = self._data, self.report.conventions
        excluded = {data.inputs.tokens[q] for q in self.report.not_in_all_systems}
        return compare_systems_paired(
            [s.name for s in data.inputs.systems],
            data.evaluations,
            data.measures,
            excluded,
            seed=int(conv.get("seed") or 0),
            resamples=int(conv.get("resamples") or 10_000),
            confidence=float(conv.get("confidence") or 0.95),
            warnings=[],
        )

    def json_text(self) -> str:
        return self.report.to_json_text()

    def markdown(self) -> str:
        return render_markdown(self._data)

    def html(self) -> str:
        return render_html(self._data)

    def differences(self) -> dict[str, Any]:
        """The queries where the systems differ most on the primary measure, each with every
        system's value and top passages (verdict, grade, P(yes), reason)."""
        return render_differences(self._data)

    def write(self) -> None:
        """``report.json``, ``report.md`` and ``report.html`` into the folder (each atomically)."""
        views: dict[str, Callable[[], str]] = {"json": self.json_text, "md": self.markdown, "html": self.html}
        for fmt, render in views.items():
            atomic_write_text(self.folder.path / VIEWS[fmt], render())

    def save_differences(self) -> dict[str, Any]:
        """The differences, also saved in the folder (:meth:`ReportFolder.saved_differences`)."""
        data = self.differences()
        atomic_write_text(self.folder.differences_path, json.dumps(data, ensure_ascii=False))
        return data


__all__ = ["VIEWS", "ComparisonReport", "ReportFolder"]
