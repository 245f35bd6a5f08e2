"""Batch scoring of a JSONL dataset: concurrent, rate-limited, cached, resumable.

Both entry points run through the one batch driver (:mod:`judge.batch._driver`: plan ->
execute -> commit) with the same machinery (:class:`_Run`): a bounded stream of queries
in flight, the rejects reporter, progress, and one summary writer.

:func:`score_dataset`:

1. recover the output file (drop a torn last line) and collect the ids already scored;
2. plan (:class:`~judge.batch._plans.InputPlan`): stream the input; each bad line is
   reported on stderr with file:line:field and written to ``OUTPUT.rejects.jsonl``; each
   query not yet in the output is planned;
3. the driver looks every passage up in the verdict store and hands the misses to the
   executor (:class:`~judge.batch._executor.LocalExecutor` by default: at most ``window``
   passage tasks at once, FIFO so earlier queries finish first; the backend's own
   :class:`~judge.backends.ResilientBackend` limiter bounds the provider calls in flight
   (``concurrency``, AIMD on 429, rpm/tpm buckets) and retries); with ``listwise`` a
   query's misses are one call (passages the reply does not cover validly are judged
   pointwise); listwise verdicts are stored under a key of the listwise template;
4. commit: a query's line is appended (flush + fsync) as soon as its last passage is
   judged;
5. the summary is computed from the whole output file (so a resumed run covers everything)
   and written atomically to ``OUTPUT.summary.json``.

:func:`retry_unjudged` plans from the output file itself
(:class:`~judge.batch._plans.RetryPlan`: only the unjudged passages are re-asked,
pointwise), commits in file order into a temporary file beside it and replaces the output
atomically at the end; a record it cannot re-ask is reported to
``OUTPUT.retry-rejects.jsonl`` and kept as it is.

Resume needs no state file (see :mod:`judge.store._runstate`): finished queries are in the
output, judged passages in the verdict cache.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypedDict, TypeVar, Unpack

from judge.backends import DEFAULT_CONCURRENCY, Backend, BackendStats, backend_fingerprint
from judge.batch._adapt_apply import FeatureFn, adapt_records, check_adapt
from judge.batch._driver import BatchDriver, QueryWork, cache_keys
from judge.batch._executor import Executor, LocalExecutor
from judge.batch._extra_fields import extras_record
from judge.batch._label_apply import apply_labels, labels_decide
from judge.batch._plans import InputPlan, RetryItem, RetryPlan
from judge.batch._ppi_summary import SampleLabelOptions, dataset_pairs, ppi_block, record_pairs
from judge.batch._progress import ProgressMode, Snapshot, make_progress
from judge.batch._records import DEFAULT_QRELS_LEVEL, build_record, finish_record, summarize_records
from judge.batch._run_spec import RunSpec
from judge.io import (
    DEFAULT_MAX_PASSAGE_CHARS,
    DatasetRecord,
    InputError,
    RejectsReporter,
    WriterLock,
    count_lines,
    iter_dataset,
    lock_output,
)
from judge.judging import (
    DEFAULT_BORDERLINE_MARGIN,
    LANGUAGE_RULE,
    ExampleBank,
    ExtraOptions,
    JudgeConfig,
    PassageVerdict,
    VerdictStore,
    bind_language,
    borderline_verdicts,
    check_examples_config,
    examples_caution,
    resolve_config,
    summarize,
)
from judge.metrics import ScaleError
from judge.store import (
    LabelSet,
    OutputWriter,
    atomic_write_lines,
    atomic_write_text,
    recover_output,
    scan_output,
)


def executor_for(spec: RunSpec, backend: Backend, ship: Any = None) -> Executor | None:
    """Who judges a run of ``spec``: None for the local engine (the batch runner's own
    :class:`~judge.batch.LocalExecutor` over ``backend``), a
    :class:`~judge.batch.RayExecutor` for ``ray`` (its workers build ``ship``, a
    :class:`~judge.batch.BackendSpec` or a picklable backend; default ``backend``). The
    caller closes it."""
    if not spec.ray:
        return None
    from judge.batch._ray import RayExecutor  # Ray's module loads only for a Ray run

    return RayExecutor(ship if ship is not None else backend, spec.for_backend(backend))


@dataclass(frozen=True)
class BatchOptions:
    """Settings of a batch run that are not about how one passage is judged.

    ``window``: passage tasks in flight (default ``2 * concurrency`` so that passages
    sleeping in a retry backoff do not starve the provider); ``concurrency`` is echoed in
    the summary, the provider-call bound itself lives in the backend wrapper.
    ``listwise``: judge each query's passages in one call (a listwise template: the
    default for the mode and language, or ``listwise_template``); generation only, so
    probability mode does not apply. ``executor``: who judges the passages the store does
    not have (default a :class:`~judge.batch._executor.LocalExecutor` over ``backend``
    with ``window``); the caller owns it (closes it). ``examples``: the run's labelled
    passages (:class:`~judge.judging.ExampleBank`, built by the caller from its labels and
    its passages' texts, with its ``--examples`` setting): each passage's prompt shows the
    worked examples it chooses; the summary's ``examples`` describes them. ``adapt`` (with
    ``labels``): the labels teach a decision rule (:func:`judge.batch.adapt_records`) that
    decides the passages where it beats the judge alone on held-out queries; the summary's
    ``adaptation`` says what it learned and whether it was applied (``judge score --adapt``).
    """

    k: tuple[int, ...] = (5, 10)
    concurrency: int = DEFAULT_CONCURRENCY  # the call policy's default (CallPolicy)
    window: int | None = None
    field_map: Mapping[str, str] = field(default_factory=dict)
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS
    strict: bool = False
    progress: ProgressMode = "auto"
    progress_interval_s: float = 5.0
    command: str = "judge score"  # the label of the progress lines: the command that runs
    rejects_path: Path | None = None
    summary_path: Path | None = None
    fsync: bool = True
    settings: Mapping[str, Any] = field(default_factory=dict)
    listwise: bool = False
    listwise_template: str | None = None
    executor: Executor | None = None
    measures: tuple[str, ...] = ()
    extras: ExtraOptions | None = None
    # verdicts this close to the P(yes) threshold are counted as "borderline" in the summary
    borderline_margin: float = DEFAULT_BORDERLINE_MARGIN
    # a graded ground truth meets the yes/no verdicts (agreement) at grade >= qrels_level
    qrels_level: int = DEFAULT_QRELS_LEVEL
    # human labels that override verdicts in the output and summary (judge.batch.apply_labels);
    # labels_level / labels_yes_grade: the stated mapping when their scale differs from the mode's
    labels: LabelSet | None = None
    labels_level: int | None = None
    labels_yes_grade: int | None = None
    # a random sample of human labels: the summary's prediction-powered figures (``ppi``)
    sample_labels: SampleLabelOptions | None = None
    examples: ExampleBank | None = None
    # ``--adapt``: decide the passages by the rule the labels teach (judge.batch.adapt_records)
    # when it beats the judge alone on held-out queries; ``adapt_features``: extra columns
    adapt: bool = False
    adapt_features: FeatureFn | None = None

    def passage_window(self) -> int:
        return max(1, self.window if self.window is not None else 2 * self.concurrency)


@dataclass
class BatchOutcome:
    """What a batch run did. ``summary`` is exactly what was saved to ``summary_path``."""

    output_path: Path
    summary_path: Path
    rejects_path: Path | None
    summary: dict[str, Any]
    scored_now: int
    skipped_done: int
    rejected: int


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def default_output_path(input_path: str | Path) -> Path:
    """``INPUT.judged.jsonl`` beside the input (``data/x.jsonl.gz`` -> ``data/x.judged.jsonl``)."""
    p = Path(input_path)
    return p.with_name(_stem(p) + ".judged.jsonl")


def sidecar_path(output_path: str | Path, kind: str, ext: str) -> Path:
    """``out.jsonl`` -> ``out.<kind>.<ext>`` (summary.json, rejects.jsonl)."""
    p = Path(output_path)
    return p.with_name(f"{_stem(p)}.{kind}.{ext}")


def _backend_name(backend: Backend) -> str:
    return backend.name


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


def strict_check(
    input_path: str | Path,
    *,
    field_map: Mapping[str, str] | None = None,
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS,
    reporter: RejectsReporter | None = None,
) -> int:
    """Validate the whole file; report each problem; return the number of valid records.

    Raises :class:`InputError` (exit 2) if any line would be rejected or changed
    (truncated, or a passage dropped as a repeat of an earlier docno), before anything is
    judged.
    """
    problems = 0
    valid = 0
    for item in iter_dataset(input_path, field_map=field_map, max_passage_chars=max_passage_chars):
        if isinstance(item, InputError):
            problems += 1
            if reporter is not None:
                reporter.report(item, "rejected")
            continue
        valid += 1
        for w in item.warnings:
            problems += 1
            if reporter is not None:
                reporter.report(w, "would be truncated")
        if item.dropped is not None:
            problems += 1
            if reporter is not None:
                reporter.report(item.dropped, "would be dropped")
    if problems:
        raise InputError(
            f"{problems} problem(s) found; --strict refuses the file (nothing was judged)",
            path=str(input_path),
        )
    return valid


def _batch_config(config: JudgeConfig, backend: Backend, opts: BatchOptions) -> JudgeConfig:
    """The resolved config of a run; listwise verdicts are generated, so listwise runs
    (fallbacks included) judge without probability mode."""
    if opts.listwise:
        if config.probability:
            raise InputError(
                "listwise judging generates its verdicts; drop --probability", field="--listwise"
            )
        config = replace(config, probability=False)
    return resolve_config(config, backend)


def _check_modes(modes: set[str], config: JudgeConfig, output_path: Path) -> None:
    if modes and modes != {config.mode}:
        found = ", ".join(sorted(modes))
        raise InputError(
            f"already holds {found} verdicts; resume with --mode {found} or choose another -o",
            path=str(output_path),
            field="mode",
        )


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


RunKind = Literal["score", "retry-unjudged"]
P = ParamSpec("P")
T = TypeVar("T")


class _Run:
    """One batch run of either kind: the driver over the run's executor, progress, the
    rejects reporter and the summary writer. Progress: ``total`` queries (lines) less
    ``dropped()`` (rejected lines), done = committed + ``skipped()`` (already done)."""

    def __init__(
        self,
        kind: RunKind,
        out: Path,
        backend: Backend,
        config: JudgeConfig,
        store: VerdictStore | None,
        opts: BatchOptions,
        *,
        listwise: bool,
        reporter: RejectsReporter,
        total: int,
        skipped: Callable[[], int] = lambda: 0,
        dropped: Callable[[], int] = lambda: 0,
    ) -> None:
        self.kind = kind
        self.out = out
        self.backend = backend
        self.config = config
        self.store = store
        self.opts = opts
        self.reporter = reporter
        self.total = total
        self.done = 0
        self._skipped = skipped
        self._dropped = dropped
        self.scored = 0
        self.passages_done = 0  # passages of the queries finished this run (the rates)
        self.progress = make_progress(
            opts.progress, interval_s=opts.progress_interval_s, command=opts.command
        )
        executor = opts.executor or LocalExecutor(backend, window=opts.passage_window())
        # Whose call counters the summary and progress read: an executor that judges
        # elsewhere (Ray workers, each with its own backend) sums them itself (``stats``).
        self.accounting: Any = executor if hasattr(executor, "stats") else backend
        keys = None
        if store is not None:
            keys = cache_keys(backend, config, listwise=listwise, listwise_template=opts.listwise_template)
        # Queries in flight: enough to keep every passage slot busy, few enough to keep
        # memory flat and finish queries roughly in input order.
        self.driver = BatchDriver(
            executor,
            config,
            store=store,
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
            queries_done=self.done + self._skipped(),
            queries_total=self.total - self._dropped(),
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
        if self.opts.adapt and self.opts.labels is not None:
            records, labels_echo = _adapt(self.out, records, self.opts)
        if self.opts.labels is not None:
            records, applied = _apply_labels(self.out, records, self.opts)
            labels_echo |= applied
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


def check_examples(opts: BatchOptions, config: JudgeConfig) -> None:
    """``--examples`` before any call: templates with the slot, pointwise judging (a
    :class:`~judge.judging.TemplateError` naming the template or the flag: exit 2)."""
    if opts.examples is not None:
        check_examples_config(config, opts.examples.spec, listwise=opts.listwise)


def check_labels(opts: BatchOptions, config: JudgeConfig) -> None:
    """Refuse labels whose scale does not meet the run's mode without a stated mapping
    (before any call): InputError naming ``--labels-level``/``--labels-yes-grade``."""
    if opts.labels is None:
        return
    try:
        opts.labels.mapping_to(
            config.mode, level=opts.labels_level, yes_grade=opts.labels_yes_grade, target_name="the judge"
        )
    except ScaleError as exc:
        flag = "--" + (exc.field or "labels").replace("_", "-")
        raise InputError(exc.message, field=flag) from None


def _apply_labels(
    out: Path, records: list[dict[str, Any]], opts: BatchOptions
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Apply ``opts.labels`` to the output's records, rewrite the file atomically when
    anything changed, and return the records with the summary's ``labels`` echo."""
    assert opts.labels is not None
    outcome = apply_labels(
        records,
        opts.labels,
        k=opts.k,
        measures=opts.measures,
        level=opts.labels_level,
        yes_grade=opts.labels_yes_grade,
    )
    if outcome.records != records:
        atomic_write_lines(out, outcome.records)
    echo = {
        "labels": {
            "source": opts.labels.source,
            "labels": len(opts.labels),
            "applied": outcome.applied,
            "changed": outcome.changed,
            "queries": outcome.queries,
            "unmatched": outcome.unmatched,
            "mapping": dict(outcome.mapping),
        }
    }
    return outcome.records, echo


def _adapt(
    out: Path, records: list[dict[str, Any]], opts: BatchOptions
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``--adapt``: the records decided by the labels' rule where it helps (rewritten
    atomically when anything changed) and the summary's ``adaptation`` block."""
    assert opts.labels is not None
    adapted, block = adapt_records(
        records,
        opts.labels,
        k=opts.k,
        measures=opts.measures,
        level=opts.labels_level,
        yes_grade=opts.labels_yes_grade,
        features=opts.adapt_features,
    )
    if adapted != records:
        atomic_write_lines(out, adapted)
    return adapted, {"adaptation": block}


def _check_sample(inp: Path, opts: BatchOptions) -> None:
    """Every pair of ``opts.sample_labels`` is a pair of the input's valid lines, else
    InputError naming the sample file's line."""
    assert opts.sample_labels is not None
    pairs = dataset_pairs(inp, field_map=opts.field_map, max_passage_chars=opts.max_passage_chars)
    opts.sample_labels.labels.check_pairs(pairs)


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


def _paths(out: Path, opts: BatchOptions, rejects_kind: str) -> tuple[Path, Path]:
    summary_path = opts.summary_path or sidecar_path(out, "summary", "json")
    rejects = opts.rejects_path if opts.rejects_path is not None else sidecar_path(out, rejects_kind, "jsonl")
    return summary_path, rejects


class RunArgs(TypedDict, total=False):
    """The keyword arguments every batch entry point takes: ``store`` (the verdict store;
    None: no cache) and ``options`` (:class:`BatchOptions`; None: the defaults)."""

    store: VerdictStore | None
    options: BatchOptions | None


async def score_dataset(
    input_path: str | Path,
    output_path: str | Path,
    backend: Backend,
    config: JudgeConfig,
    **kw: Unpack[RunArgs],
) -> BatchOutcome:
    """Score every query of ``input_path`` into ``output_path`` (resuming if it exists).

    ``store``: the verdict store (None: no cache); ``options``: :class:`BatchOptions`."""
    store = kw.get("store")
    opts = kw.get("options") or BatchOptions()
    config = _batch_config(config, backend, opts)
    check_labels(opts, config)
    check_examples(opts, config)
    if opts.examples is not None:  # where the docs measured examples to hurt: the summary says so
        opts.examples.caution = examples_caution(opts.examples, config, backend.name)
    if opts.adapt:
        active = opts.examples is not None and opts.examples.spec.active
        check_adapt(config, labels=opts.labels, examples_active=active)
    inp = Path(input_path)
    out = Path(output_path)
    if not inp.exists():
        raise InputError("no such file", path=str(inp))
    if out.resolve() == inp.resolve():
        raise InputError("the output file must differ from the input", path=str(out))
    lock = _lock(out, "judge score")
    summary_path, rejects_path = _paths(out, opts, "rejects")
    reporter = RejectsReporter(rejects_path)
    try:
        # Whole-file passes run in a worker thread: a server's event loop keeps answering
        # while a large input or output is read (the plan below reads one line per step).
        if opts.strict:
            await asyncio.to_thread(
                strict_check,
                inp,
                field_map=opts.field_map,
                max_passage_chars=opts.max_passage_chars,
                reporter=reporter,
            )
        scan = await asyncio.to_thread(scan_output, out)
        _check_modes(scan.modes, config, out)
        if opts.sample_labels is not None:  # a pair not in the input: refused before any call
            await asyncio.to_thread(_check_sample, inp, opts)
        total = await asyncio.to_thread(count_lines, inp)
        plan = InputPlan(
            inp,
            done_ids=scan.ids,
            field_map=opts.field_map,
            max_passage_chars=opts.max_passage_chars,
            reporter=reporter,
        )
        run = _Run(
            "score",
            out,
            backend,
            config,
            store,
            opts,
            listwise=opts.listwise,
            reporter=reporter,
            total=total,
            skipped=lambda: plan.skipped,
            dropped=lambda: plan.rejected,
        )

        works: Iterable[QueryWork] = plan
        if opts.labels is not None and opts.examples is not None and opts.examples.spec.active:
            # The demonstrations are active: a labelled passage takes its label, no call.
            works = labels_decide(
                plan,
                opts.labels,
                config,
                backend.name,
                level=opts.labels_level,
                yes_grade=opts.labels_yes_grade,
            )

        with OutputWriter(out, fsync=opts.fsync) as writer:

            async def commit(work: QueryWork, verdicts: list[PassageVerdict]) -> None:
                rec: DatasetRecord = work.payload
                result, extra = await extras_record(
                    backend, run.config_of(work), store, rec, run.result(work, verdicts), opts.extras, opts.k
                )
                record = (
                    build_record(rec, result, opts.k, measures=opts.measures, qrels_level=opts.qrels_level)
                    | extra
                )
                record["backend_fingerprint"] = backend_fingerprint(backend)
                await writer.awrite(record)

            await run.drive(works, commit)
        return run.finish(summary_path, skipped=plan.skipped, retried=0, inp=inp)
    finally:
        reporter.close()
        lock.release()


def _lock(out: Path, command: str) -> WriterLock:
    """One writer per output: the lock beside it (``.NAME.lock``, as ``judge search`` takes),
    held until the run ends; another process writing the same output is refused before any
    call (exit 2 naming ``-o`` and who holds it), where two would write every record twice."""
    return lock_output(out, out.with_name(f".{out.name}.lock"), command=command, field="-o")


async def retry_unjudged(
    output_path: str | Path, backend: Backend, config: JudgeConfig, **kw: Unpack[RunArgs]
) -> BatchOutcome:
    """Ask again only for the unjudged passages of an output file; rewrite it atomically.

    The records stream through the driver (bounded like a score run) into a temporary
    file beside the output, in file order; it replaces the output (``os.replace``) once
    every record is through. If the run is killed before that, the output is untouched and
    the verdicts obtained so far are in the cache, so the next retry gets them for free.
    Re-asked passages are judged pointwise (only some passages of a query are asked).
    ``store`` and ``options`` as in :func:`score_dataset`.
    """
    store = kw.get("store")
    opts = kw.get("options") or BatchOptions()
    config = _batch_config(config, backend, opts)
    check_labels(opts, config)
    check_examples(opts, config)
    out = Path(output_path)
    if not out.exists():
        raise InputError("no such file", path=str(out))
    lock = _lock(out, "judge score")
    try:
        scan = await asyncio.to_thread(scan_output, out)
        _check_modes(scan.modes, config, out)
        if opts.sample_labels is not None:  # a pair not in the output: refused before any call
            opts.sample_labels.labels.check_pairs(record_pairs(await asyncio.to_thread(recover_output, out)))
    except BaseException:
        lock.release()
        raise
    summary_path, rejects_path = _paths(out, opts, "retry-rejects")
    reporter = RejectsReporter(rejects_path)
    tmp = out.with_name(out.name + ".retry.tmp")
    try:
        plan = RetryPlan(out, reporter=reporter)
        run = _Run(
            "retry-unjudged",
            out,
            backend,
            config,
            store,
            opts,
            listwise=False,
            reporter=reporter,
            total=scan.records,
        )
        tmp.unlink(missing_ok=True)
        try:
            with OutputWriter(tmp, fsync=False) as writer:

                async def commit(work: QueryWork, verdicts: list[PassageVerdict]) -> None:
                    item: RetryItem = work.payload
                    if not work.jobs:
                        await writer.awrite(item.record)
                        return
                    base = dict(item.record)
                    base["unjudged_passages"] = [
                        entry
                        for job, entry in zip(work.jobs, item.entries, strict=True)
                        if not verdicts[job.index].judged
                    ]
                    record = finish_record(
                        base,
                        run.result(work, verdicts),
                        opts.k,
                        measures=opts.measures,
                        qrels_level=opts.qrels_level,
                    )
                    record["backend_fingerprint"] = backend_fingerprint(backend)
                    await writer.awrite(record)

                await run.drive(plan, commit, ordered=True)
            _replace(tmp, out)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return run.finish(summary_path, skipped=plan.records - plan.todo, retried=plan.passages, inp=None)
    finally:
        reporter.close()
        lock.release()


def _replace(tmp: Path, out: Path) -> None:
    """fsync ``tmp`` and move it over ``out`` (the rewrite is all or nothing)."""
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, out)


def _blocking(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """The synchronous form of a batch entry point (``asyncio.run``)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return asyncio.run(fn(*args, **kwargs))

    run.__doc__ = f"Synchronous :func:`{fn.__name__}` (``asyncio.run``)."
    return run


score_dataset_sync = _blocking(score_dataset)
