"""Batch scoring of a JSONL dataset: concurrent, rate-limited, cached, resumable.

Both entry points run through the one batch driver (:mod:`judge.batch._driver`: plan ->
execute -> commit) with the same machinery (:class:`~judge.batch._batch_run.BatchRun`): a
bounded stream of queries in flight, the rejects reporter, progress, and one summary writer.

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
import os
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ParamSpec, TypedDict, TypeVar, Unpack

from judge.backends import Backend, backend_fingerprint
from judge.batch._adapt_apply import check_adapt
from judge.batch._batch_options import BatchOptions, BatchOutcome, sidecar_path
from judge.batch._batch_run import BatchRun
from judge.batch._driver import QueryWork
from judge.batch._executor import Executor
from judge.batch._extra_fields import extras_record
from judge.batch._label_apply import labels_decide
from judge.batch._plans import InputPlan, RetryItem, RetryPlan
from judge.batch._ppi_summary import dataset_pairs, record_pairs
from judge.batch._records import build_record, finish_record
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
    JudgeConfig,
    PassageVerdict,
    VerdictStore,
    check_examples_config,
    examples_caution,
    resolve_config,
)
from judge.metrics import ScaleError
from judge.store import OutputWriter, recover_output, scan_output


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


P = ParamSpec("P")
T = TypeVar("T")


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


def _check_sample(inp: Path, opts: BatchOptions) -> None:
    """Every pair of ``opts.sample_labels`` is a pair of the input's valid lines, else
    InputError naming the sample file's line."""
    assert opts.sample_labels is not None
    pairs = dataset_pairs(inp, field_map=opts.field_map, max_passage_chars=opts.max_passage_chars)
    opts.sample_labels.labels.check_pairs(pairs)


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
        run = BatchRun(
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
    """One writer per output: the lock beside it (``.NAME.lock`` of the path it resolves to,
    as ``judge search`` takes), held until the run ends; another process writing the same
    output, under this name or another, is refused before any call (exit 2 naming ``-o`` and
    who holds it), where two would write every record twice."""
    return lock_output(out, command=command, field="-o")


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
        run = BatchRun(
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
