"""One batch run of either kind (``judge score`` or a retry of its unjudged passages): the
batch driver over the run's executor, progress, the rejects reporter and the summary
(metrics from the whole output file, the labels and the adaptation applied to it, the
run's counters and the settings echoed).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, InitVar, dataclass, field
from pathlib import Path
from typing import Any, Literal

from judge.backends import Backend, BackendStats, backend_fingerprint
from judge.batch._adapt_apply import adapt_records
from judge.batch._batch_options import BatchOptions, BatchOutcome
from judge.batch._driver import BatchDriver, QueryWork, cache_keys
from judge.batch._executor import LocalExecutor
from judge.batch._label_apply import apply_labels
from judge.batch._ppi_summary import ppi_block
from judge.batch._progress import ProgressReporter, Snapshot, make_progress
from judge.batch._records import summarize_records
from judge.io import RejectsReporter
from judge.judging import (
    LANGUAGE_RULE,
    JudgeConfig,
    PassageVerdict,
    VerdictStore,
    bind_language,
    borderline_verdicts,
    summarize,
)
from judge.store import atomic_write_lines, atomic_write_text, recover_output

__all__ = ["BatchRun", "RunKind"]

RunKind = Literal["score", "retry-unjudged"]


def _stat(backend: Backend, name: str) -> int:
    stats = getattr(backend, "stats", None)
    return int(getattr(stats, name, 0) or 0) if stats is not None else 0


def _placement(executor: Any) -> dict[str, Any]:
    """``{"ray": ...}``: which node judged what, for an executor that knows (Ray's)."""
    placement = getattr(executor, "placement", None)
    return {"ray": placement()} if callable(placement) else {}


def _backend_stats(backend: Backend) -> dict[str, Any]:
    stats = getattr(backend, "stats", None)
    return stats.as_dict() if isinstance(stats, BackendStats) else {}


async def _ticker(fn: Callable[[], None], interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        fn()


def _cache_stats(store: VerdictStore | None) -> dict[str, Any] | None:
    stats = getattr(store, "stats", None)
    if stats is None:
        return None
    return {k: getattr(stats, k) for k in ("hits", "misses", "puts") if hasattr(stats, k)}


def _config_echo(config: JudgeConfig, backend_name: str, opts: BatchOptions) -> dict[str, Any]:
    return {
        "backend": backend_name,
        "judge": config.cache_params()
        | {
            "max_reasks": config.max_reasks,
            "template_id": config.template_id() if config.language != "auto" or config.template else None,
            "template_ids": config.template_ids(),
        }
        | ({"language_rule": LANGUAGE_RULE} if config.language == "auto" else {}),
        "k": list(opts.k),
        "concurrency": opts.concurrency,
        "judging": "listwise" if opts.listwise else "pointwise",
        "max_passage_chars": opts.max_passage_chars,
        **dict(opts.settings),
    }


@dataclass(eq=False)
class BatchRun:
    """One batch run of either kind: the driver over the run's executor, progress, the
    rejects reporter and the summary writer. Progress: ``total`` queries (lines) less
    ``dropped()`` (rejected lines), done = committed + ``skipped()`` (already done)."""

    kind: RunKind
    out: Path
    backend: Backend
    config: JudgeConfig
    store: VerdictStore | None
    opts: BatchOptions
    _: KW_ONLY
    listwise: InitVar[bool]
    reporter: RejectsReporter
    total: int
    skipped: Callable[[], int] = lambda: 0
    dropped: Callable[[], int] = lambda: 0
    done: int = field(init=False, default=0)
    scored: int = field(init=False, default=0)
    passages_done: int = field(init=False, default=0)  # passages of the queries finished this run (the rates)
    progress: ProgressReporter = field(init=False)
    accounting: Any = field(init=False)
    driver: BatchDriver = field(init=False)

    def __post_init__(self, listwise: bool) -> None:
        opts, backend, config = self.opts, self.backend, self.config
        self.progress = make_progress(
            opts.progress, interval_s=opts.progress_interval_s, command=opts.command
        )
        executor = opts.executor or LocalExecutor(backend, window=opts.passage_window())
        # Whose call counters the summary and progress read: an executor that judges
        # elsewhere (Ray workers, each with its own backend) sums them itself (``stats``).
        self.accounting = executor if hasattr(executor, "stats") else backend
        keys = None
        if self.store is not None:
            keys = cache_keys(backend, config, listwise=listwise, listwise_template=opts.listwise_template)
        # Queries in flight: enough to keep every passage slot busy, few enough to keep
        # memory flat and finish queries roughly in input order.
        self.driver = BatchDriver(
            executor,
            config,
            store=self.store,
            keys=keys,
            listwise=listwise,
            listwise_template=opts.listwise_template,
            max_queries=opts.passage_window() + 1,
            on_commit=self._committed,
            examples=opts.examples,
        )

    def _committed(self, work: QueryWork, verdicts: list[PassageVerdict]) -> None:
        self.done += 1
        if work.jobs or work.known is not None:  # a query whose passages all took labels too
            self.scored += 1
            self.passages_done += len(work.jobs)
        self.progress.update(self.snapshot())

    def snapshot(self) -> Snapshot:
        stats = self.driver.stats
        return Snapshot(
            queries_done=self.done + self.skipped(),
            queries_total=self.total - self.dropped(),
            queries_this_run=self.scored,
            passages_this_run=self.passages_done,
            retries=_stat(self.accounting, "retries"),
            rate_limited=_stat(self.accounting, "rate_limited"),
            unjudged=stats.unjudged,
            rejected=self.reporter.rejected,
            elapsed_s=stats.elapsed_s,
            passages_asked=stats.asked,
            passages_answered=stats.answered,
            passages_cached=stats.cached,
            queries_started=stats.begun,
            queries_in_flight=stats.begun - stats.queries,
        )

    def config_of(self, work: QueryWork) -> JudgeConfig:
        """The query's own config (``language="auto"`` bound as the driver bound it)."""
        return bind_language(self.config, work.query, language=work.language)

    def result(self, work: QueryWork, verdicts: list[PassageVerdict]) -> Any:
        return summarize(
            work.query,
            verdicts,
            self.config_of(work),
            self.backend.name,
            k=tuple(self.opts.k),
            measures=self.opts.measures,
        )

    async def drive(
        self,
        plan: Iterable[QueryWork],
        commit: Callable[[QueryWork, list[PassageVerdict]], Awaitable[None]],
        *,
        ordered: bool = False,
    ) -> None:
        """Run ``plan`` through the driver between ``progress.start`` and ``progress.stop``,
        ticking every 0.5 s."""
        self.progress.start(self.total, 0)
        tick = asyncio.ensure_future(_ticker(lambda: self.progress.update(self.snapshot()), 0.5))
        try:
            await self.driver.run(plan, commit, ordered=ordered)
        finally:
            tick.cancel()
            self.progress.stop(self.snapshot())

    def finish(self, summary_path: Path, *, skipped: int, retried: int, inp: Path | None) -> BatchOutcome:
        """Write the summary (metrics from the whole output file, this run's counters) and
        return the outcome."""
        stats = self.driver.stats
        wall = stats.elapsed_s
        this_run = {
            "kind": self.kind,
            "wall_time_s": round(wall, 3),
            "queries_scored": self.scored,
            "queries_skipped_already_done": skipped,
            "passages": stats.passages,
            "passages_per_s": round(stats.passages / wall, 3) if wall > 0 else None,
            "passages_retried": retried,
            "passages_cached": stats.cached,
            "passages_asked": stats.asked,
            "still_unjudged": stats.unjudged,
            "rejected_lines": self.reporter.rejected,
            "truncation_warnings": self.reporter.warned,
            "duplicates_dropped": self.reporter.dropped,
            "executor": self.driver.executor.name,
            **_placement(self.driver.executor),
            "backend": _backend_stats(self.accounting),
            "cache": _cache_stats(self.store),
        }
        records = recover_output(self.out)
        labels_echo: dict[str, Any] = {}
        if self.opts.labels is not None:
            records, labels_echo = _labelled(self.out, records, self.opts)
        summary = {
            "output": str(self.out),
            **summarize_records(records, self.opts.k, measures=self.opts.measures),
            "input": str(inp) if inp is not None else None,
            "this_run": this_run,
            "config": _config_echo(self.config, self.backend.name, self.opts),
            **_determinism_echo(records, self.config, self.backend, self.opts),
            **{k: v for k, v in labels_echo.items() if k != "adaptation"},
            **_examples_echo(self.opts),
            **({"adaptation": labels_echo["adaptation"]} if "adaptation" in labels_echo else {}),
        }
        if self.opts.sample_labels is not None:
            summary["ppi"] = ppi_block(records, self.opts.sample_labels, self.opts.k)
        atomic_write_text(summary_path, json.dumps(summary, ensure_ascii=False, indent=2) + "\n")
        return BatchOutcome(
            output_path=self.out,
            summary_path=summary_path,
            rejects_path=(
                self.reporter.path
                if self.reporter.rejected or self.reporter.warned or self.reporter.dropped
                else None
            ),
            summary=summary,
            scored_now=self.scored,
            skipped_done=skipped,
            rejected=self.reporter.rejected,
        )


def _examples_echo(opts: BatchOptions) -> dict[str, Any]:
    """The summary's ``examples`` (absent for a run without them)."""
    bank = opts.examples
    if bank is None or not bank.spec.active:
        return {}
    return {"examples": bank.describe()}


def _labelled(
    out: Path, records: list[dict[str, Any]], opts: BatchOptions
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The output's records decided by ``opts.labels``: with ``--adapt`` first by the rule
    the labels teach, where it helps, then every labelled passage by its label. The file is
    rewritten atomically when anything changed; the summary's ``labels`` block (and
    ``adaptation``) come with the records."""
    labels = opts.labels
    assert labels is not None
    settings: dict[str, Any] = {
        "k": opts.k,
        "measures": opts.measures,
        "level": opts.labels_level,
        "yes_grade": opts.labels_yes_grade,
    }
    echo: dict[str, Any] = {}
    decided = records
    if opts.adapt:
        decided, echo["adaptation"] = adapt_records(decided, labels, features=opts.adapt_features, **settings)
    outcome = apply_labels(decided, labels, **settings)
    if outcome.records != records:
        atomic_write_lines(out, outcome.records)
    echo["labels"] = {
        "source": labels.source,
        "labels": len(labels),
        "applied": outcome.applied,
        "changed": outcome.changed,
        "queries": outcome.queries,
        "unmatched": outcome.unmatched,
        "mapping": dict(outcome.mapping),
    }
    return outcome.records, echo


def _determinism_echo(
    records: Sequence[Mapping[str, Any]], config: JudgeConfig, backend: Backend, opts: BatchOptions
) -> dict[str, Any]:
    """``backend_fingerprint`` and the ``borderline`` count (probability-mode verdicts within
    ``opts.borderline_margin`` of the threshold: the ones another machine may flip)."""
    borderline = 0
    if config.probability:
        # Each query against its own threshold (``auto``: its language's template's).
        by_threshold: dict[float, list[Mapping[str, Any]]] = {}
        for record in records:
            threshold = (record.get("conventions") or {}).get("p_yes_threshold")
            if threshold is None:
                threshold = bind_language(config, "", language="zh").decision_threshold
            by_threshold.setdefault(float(threshold), []).append(record)
        borderline = sum(
            len(borderline_verdicts(group, t, opts.borderline_margin, config.grade_threshold))
            for t, group in by_threshold.items()
        )
    return {
        "backend_fingerprint": backend_fingerprint(backend),
        "borderline": borderline,
        "borderline_margin": opts.borderline_margin,
    }
