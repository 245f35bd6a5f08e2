"""Batch scoring of a JSONL dataset: concurrent, rate-limited, cached, resumable.

Flow of :func:`score_dataset`:

1. recover the output file (drop a torn last line) and collect the ids already scored;
2. stream the input; each bad line is reported on stderr with file:line:field and written
   to ``OUTPUT.rejects.jsonl``; each query not yet in the output is scheduled;
3. every passage of every scheduled query is a task; at most ``window`` passage tasks run at
   once (a FIFO semaphore, so earlier queries finish first); the backend's own
   :class:`~judge.backends.ResilientBackend` limiter bounds the provider calls in flight
   (``concurrency``, AIMD on 429, rpm/tpm buckets) and retries;
   with ``listwise`` a query is one task instead: all its passages in one call
   (:func:`judge.judging.judge_listwise`; passages the reply does not cover validly are
   judged pointwise);
4. a query's line is appended (flush + fsync) as soon as its last passage is judged;
5. the summary is computed from the whole output file (so a resumed run covers everything)
   and written atomically to ``OUTPUT.summary.json``.

Resume needs no state file (see :mod:`judge.store._runstate`): finished queries are in the
output, judged passages in the verdict cache.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from judge.backends._base import Backend, PermanentError
from judge.backends._fingerprint import backend_fingerprint
from judge.batch._progress import ProgressMode, ProgressReporter, Snapshot, make_progress
from judge.batch._records import build_record, finish_record, summarize_records, verdicts_of
from judge.io._errors import InputError
from judge.io._jsonl import (
    DEFAULT_MAX_PASSAGE_CHARS,
    DatasetRecord,
    count_lines,
    error_record,
    iter_dataset,
)
from judge.judging import (
    JudgeConfig,
    Passage,
    VerdictStore,
    judge_listwise,
    judge_passage,
    resolve_config,
    summarize,
)
from judge.judging._expected import DEFAULT_BORDERLINE_MARGIN, borderline_verdicts
from judge.judging._models import PassageVerdict
from judge.store._runstate import OutputWriter, atomic_write_lines, atomic_write_text, recover_output


@dataclass(frozen=True)
class BatchOptions:
    """Settings of a batch run that are not about how one passage is judged.

    ``window``: passage tasks in flight (default ``2 * concurrency`` so that passages
    sleeping in a retry backoff do not starve the provider); ``concurrency`` is echoed in
    the summary, the provider-call bound itself lives in the backend wrapper.
    ``listwise``: judge each query's passages in one call (a listwise template: the
    default for the mode and language, or ``listwise_template``); generation only, so
    probability mode does not apply.
    """

    k: tuple[int, ...] = (5, 10)
    concurrency: int = 16
    window: int | None = None
    field_map: Mapping[str, str] = field(default_factory=dict)
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS
    strict: bool = False
    progress: ProgressMode = "auto"
    progress_interval_s: float = 5.0
    rejects_path: Path | None = None
    summary_path: Path | None = None
    fsync: bool = True
    settings: Mapping[str, Any] = field(default_factory=dict)
    listwise: bool = False
    listwise_template: str | None = None
    # verdicts this close to the P(yes) threshold are counted as "borderline" in the summary
    borderline_margin: float = DEFAULT_BORDERLINE_MARGIN

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


def _backend_stats(backend: Backend) -> dict[str, Any]:
    stats = getattr(backend, "stats", None)
    if stats is None:
        return {}
    keys = (
        "requests",
        "calls",
        "successes",
        "retries",
        "rate_limited",
        "timeouts",
        "failures",
        "prompt_tokens",
        "completion_tokens",
        "cost",
        "currency",
    )
    return {k: getattr(stats, k) for k in keys if hasattr(stats, k)}


class _Reporter:
    """Bad-input reporting: stderr lines + the rejects file (opened on the first problem)."""

    def __init__(self, rejects_path: Path | None, stream: IO[str] | None = None) -> None:
        self.path = rejects_path
        self.stream = stream if stream is not None else sys.stderr
        self.rejected = 0
        self.warned = 0
        self._fh: IO[str] | None = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)  # the rejects file reflects this run's validation

    def report(self, err: InputError, action: str) -> None:
        if action == "rejected":
            self.rejected += 1
            print(f"judge score: rejected: {err}", file=self.stream)
        else:
            self.warned += 1
            print(f"judge score: warning: {err} ({action})", file=self.stream)
        if self.path is not None:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
            self._fh.write(json.dumps(error_record(err, action=action), ensure_ascii=False) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class _Counters:
    def __init__(self, total: int, done: int) -> None:
        self.total = total
        self.done = done
        self.queries = 0
        self.passages = 0
        self.unjudged = 0
        self.started = time.monotonic()

    def on_passage(self, v: PassageVerdict) -> None:
        self.passages += 1
        if not v.judged:
            self.unjudged += 1

    def snapshot(self, backend: Backend, rejected: int) -> Snapshot:
        return Snapshot(
            queries_done=self.done,
            queries_total=self.total,
            queries_this_run=self.queries,
            passages_this_run=self.passages,
            retries=_stat(backend, "retries"),
            rate_limited=_stat(backend, "rate_limited"),
            unjudged=self.unjudged,
            rejected=rejected,
            elapsed_s=time.monotonic() - self.started,
        )


async def _ticker(fn: Callable[[], None], interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        fn()


def strict_check(
    input_path: str | Path,
    *,
    field_map: Mapping[str, str] | None = None,
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS,
    reporter: _Reporter | None = None,
) -> int:
    """Validate the whole file; report each problem; return the number of valid records.

    Raises :class:`InputError` (exit 2) if any line would be rejected or changed
    (truncated), before anything is judged.
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
    if problems:
        raise InputError(
            f"{problems} problem(s) found; --strict refuses the file (nothing was judged)",
            path=str(input_path),
        )
    return valid


async def _judge_passages(
    backend: Backend,
    config: JudgeConfig,
    store: VerdictStore | None,
    query: str,
    items: Sequence[tuple[int, Passage]],
    sem: asyncio.Semaphore,
    on_passage: Callable[[PassageVerdict], None],
    opts: BatchOptions,
) -> list[PassageVerdict]:
    """One query's verdicts: a task per passage, or one listwise call for all of them."""
    if opts.listwise:
        async with sem:
            result = await judge_listwise(
                backend, query, [p for _, p in items], config, template=opts.listwise_template, store=store
            )
        for verdict in result.verdicts:
            on_passage(verdict)
        return result.verdicts

    async def one(index: int, passage: Passage) -> PassageVerdict:
        async with sem:
            verdict = await judge_passage(backend, query, passage, index, config, store=store)
        on_passage(verdict)
        return verdict

    return list(await asyncio.gather(*(one(i, p) for i, p in items)))


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


async def _run_tasks(
    schedule: Callable[[Callable[[Awaitable[None]], None]], Awaitable[None]],
) -> None:
    """Run ``schedule(spawn)`` in a TaskGroup; surface the first PermanentError as itself."""
    try:
        async with asyncio.TaskGroup() as tg:

            def spawn(coro: Awaitable[None]) -> None:
                tg.create_task(coro)  # type: ignore[arg-type]

            await schedule(spawn)
    except* PermanentError as group:
        raise group.exceptions[0] from None


async def _run_with_progress(
    progress: ProgressReporter,
    total: int,
    snapshot: Callable[[], Snapshot],
    schedule: Callable[[Callable[[Awaitable[None]], None]], Awaitable[None]],
) -> None:
    """:func:`_run_tasks` between ``progress.start`` and ``progress.stop``, ticking every 0.5 s."""
    progress.start(total, 0)
    tick = asyncio.ensure_future(_ticker(lambda: progress.update(snapshot()), 0.5))
    try:
        await _run_tasks(schedule)
    finally:
        tick.cancel()
        progress.stop(snapshot())


def _check_mode(records: Sequence[Mapping[str, Any]], config: JudgeConfig, output_path: Path) -> None:
    modes = {r.get("mode") for r in records}
    if modes and modes != {config.mode}:
        found = ", ".join(sorted(str(m) for m in modes))
        raise InputError(
            f"already holds {found} verdicts; resume with --mode {found} or choose another -o",
            path=str(output_path),
            field="mode",
        )


def _write_summary(
    output_path: Path,
    summary_path: Path,
    records: Sequence[Mapping[str, Any]],
    k: Sequence[int],
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    summary = {"output": str(output_path), **summarize_records(records, k), **extra}
    atomic_write_text(summary_path, json.dumps(summary, ensure_ascii=False, indent=2) + "\n")
    return summary


async def score_dataset(
    input_path: str | Path,
    output_path: str | Path,
    backend: Backend,
    config: JudgeConfig,
    *,
    store: VerdictStore | None = None,
    options: BatchOptions | None = None,
) -> BatchOutcome:
    """Score every query of ``input_path`` into ``output_path`` (resuming if it exists)."""
    opts = options or BatchOptions()
    config = _batch_config(config, backend, opts)
    inp = Path(input_path)
    out = Path(output_path)
    if not inp.exists():
        raise InputError("no such file", path=str(inp))
    if out.resolve() == inp.resolve():
        raise InputError("the output file must differ from the input", path=str(out))
    summary_path = opts.summary_path or sidecar_path(out, "summary", "json")
    rejects_path = (
        opts.rejects_path if opts.rejects_path is not None else sidecar_path(out, "rejects", "jsonl")
    )
    reporter = _Reporter(rejects_path)
    try:
        if opts.strict:
            strict_check(
                inp, field_map=opts.field_map, max_passage_chars=opts.max_passage_chars, reporter=reporter
            )
        done_records = recover_output(out)
        _check_mode(done_records, config, out)
        done_ids = {str(r["id"]) for r in done_records}
        total = count_lines(inp)
        counters = _Counters(total, 0)
        progress = make_progress(opts.progress, interval_s=opts.progress_interval_s)
        name = _backend_name(backend)
        k = tuple(opts.k)
        sem = asyncio.Semaphore(opts.passage_window())
        # Queries in flight: enough to keep every passage slot busy, few enough to keep
        # memory flat and finish queries roughly in input order.
        query_slots = asyncio.Semaphore(opts.passage_window() + 1)
        skipped = 0

        def snapshot() -> Snapshot:
            return counters.snapshot(backend, reporter.rejected)

        with OutputWriter(out, fsync=opts.fsync) as writer:

            async def score_one(rec: DatasetRecord) -> None:
                try:
                    items = [(i, Passage(p.text, p.id, p.truncated)) for i, p in enumerate(rec.passages)]
                    verdicts = await _judge_passages(
                        backend, config, store, rec.query, items, sem, counters.on_passage, opts
                    )
                    result = summarize(rec.query, verdicts, config, name, k=k)
                    record = build_record(rec, result, k)
                    record["backend_fingerprint"] = backend_fingerprint(backend)
                    await writer.awrite(record)
                    counters.queries += 1
                    counters.done += 1
                    progress.update(snapshot())
                finally:
                    query_slots.release()

            async def schedule(spawn: Callable[[Awaitable[None]], None]) -> None:
                nonlocal skipped
                for item in iter_dataset(
                    inp, field_map=opts.field_map, max_passage_chars=opts.max_passage_chars
                ):
                    if isinstance(item, InputError):
                        reporter.report(item, "rejected")
                        counters.total -= 1
                        continue
                    if item.id in done_ids:
                        skipped += 1
                        counters.done += 1
                        continue
                    for w in item.warnings:
                        reporter.report(w, "truncated")
                    await query_slots.acquire()
                    spawn(score_one(item))

            await _run_with_progress(progress, counters.total, snapshot, schedule)
        wall = time.monotonic() - counters.started
        records = recover_output(out)
        extra = {
            "input": str(inp),
            "this_run": {
                "wall_time_s": round(wall, 3),
                "queries_scored": counters.queries,
                "queries_skipped_already_done": skipped,
                "passages": counters.passages,
                "passages_per_s": round(counters.passages / wall, 3) if wall > 0 else None,
                "rejected_lines": reporter.rejected,
                "truncation_warnings": reporter.warned,
                "backend": _backend_stats(backend),
                "cache": _cache_stats(store),
            },
            "config": _config_echo(config, name, opts),
            **_determinism_echo(records, config, backend, opts),
        }
        summary = _write_summary(out, summary_path, records, k, extra)
        return BatchOutcome(
            output_path=out,
            summary_path=summary_path,
            rejects_path=rejects_path if reporter.rejected or reporter.warned else None,
            summary=summary,
            scored_now=counters.queries,
            skipped_done=skipped,
            rejected=reporter.rejected,
        )
    finally:
        reporter.close()


def _determinism_echo(
    records: Sequence[Mapping[str, Any]], config: JudgeConfig, backend: Backend, opts: BatchOptions
) -> dict[str, Any]:
    """``backend_fingerprint`` and the ``borderline`` count (probability-mode verdicts within
    ``opts.borderline_margin`` of the threshold: the ones another machine may flip)."""
    borderline = (
        len(
            borderline_verdicts(
                records, config.decision_threshold, opts.borderline_margin, config.grade_threshold
            )
        )
        if config.probability
        else 0
    )
    return {
        "backend_fingerprint": backend_fingerprint(backend),
        "borderline": borderline,
        "borderline_margin": opts.borderline_margin,
    }


def _cache_stats(store: VerdictStore | None) -> dict[str, Any] | None:
    stats = getattr(store, "stats", None)
    if stats is None:
        return None
    return {k: getattr(stats, k) for k in ("hits", "misses", "puts") if hasattr(stats, k)}


def _config_echo(config: JudgeConfig, backend_name: str, opts: BatchOptions) -> dict[str, Any]:
    return {
        "backend": backend_name,
        "judge": config.cache_params()
        | {"max_reasks": config.max_reasks, "template_id": config.template_id()},
        "k": list(opts.k),
        "concurrency": opts.concurrency,
        "judging": "listwise" if opts.listwise else "pointwise",
        "max_passage_chars": opts.max_passage_chars,
        **dict(opts.settings),
    }


async def retry_unjudged(
    output_path: str | Path,
    backend: Backend,
    config: JudgeConfig,
    *,
    store: VerdictStore | None = None,
    options: BatchOptions | None = None,
) -> BatchOutcome:
    """Ask again only for the unjudged passages of an output file; rewrite it atomically.

    Records are rewritten (temp file + ``os.replace``) once every retry has finished; if
    the run is killed before that, the file is untouched and the verdicts obtained so far
    are in the cache, so the next retry gets them for free.
    """
    opts = options or BatchOptions()
    config = _batch_config(config, backend, opts)
    out = Path(output_path)
    if not out.exists():
        raise InputError("no such file", path=str(out))
    records = recover_output(out)
    _check_mode(records, config, out)
    summary_path = opts.summary_path or sidecar_path(out, "summary", "json")
    name = _backend_name(backend)
    k = tuple(opts.k)
    todo = [i for i, r in enumerate(records) if r.get("unjudged_passages")]
    total_passages = sum(len(records[i]["unjudged_passages"]) for i in todo)
    counters = _Counters(len(todo), 0)
    progress = make_progress(opts.progress, interval_s=opts.progress_interval_s)
    sem = asyncio.Semaphore(opts.passage_window())
    new_records = list(records)

    def snapshot() -> Snapshot:
        return counters.snapshot(backend, 0)

    pointwise = replace(opts, listwise=False)

    async def redo(i: int) -> None:
        rec = records[i]
        verdicts = verdicts_of(rec)
        items = [
            (int(p["index"]), Passage(str(p["text"]), p.get("id"), bool(p.get("truncated", False))))
            for p in rec["unjudged_passages"]
        ]
        # Only some passages of the query are re-asked: always pointwise.
        fresh = await _judge_passages(
            backend, config, store, str(rec["query"]), items, sem, counters.on_passage, pointwise
        )
        for (idx, _), v in zip(items, fresh, strict=True):
            verdicts[idx] = v
        result = summarize(str(rec["query"]), verdicts, config, name, k=k)
        base = {key: val for key, val in rec.items()}
        base["unjudged_passages"] = [
            p for (idx, _), p in zip(items, rec["unjudged_passages"], strict=True) if not verdicts[idx].judged
        ]
        new_records[i] = finish_record(base, result, k)
        new_records[i]["backend_fingerprint"] = backend_fingerprint(backend)
        counters.queries += 1
        counters.done += 1
        progress.update(snapshot())

    async def schedule(spawn: Callable[[Awaitable[None]], None]) -> None:
        for i in todo:
            spawn(redo(i))

    await _run_with_progress(progress, counters.total, snapshot, schedule)
    atomic_write_lines(out, new_records)
    wall = time.monotonic() - counters.started
    extra = {
        "this_run": {
            "kind": "retry-unjudged",
            "wall_time_s": round(wall, 3),
            "queries_retried": len(todo),
            "passages_retried": total_passages,
            "still_unjudged": counters.unjudged,
            "backend": _backend_stats(backend),
            "cache": _cache_stats(store),
        },
        "config": _config_echo(config, name, opts),
        **_determinism_echo(new_records, config, backend, opts),
    }
    summary = _write_summary(out, summary_path, new_records, k, extra)
    return BatchOutcome(
        output_path=out,
        summary_path=summary_path,
        rejects_path=None,
        summary=summary,
        scored_now=len(todo),
        skipped_done=len(records) - len(todo),
        rejected=0,
    )


def read_output(path: str | Path) -> list[dict[str, Any]]:
    """The records of an output file (a torn last line is dropped and repaired)."""
    return recover_output(path)


def score_dataset_sync(
    input_path: str | Path,
    output_path: str | Path,
    backend: Backend,
    config: JudgeConfig,
    *,
    store: VerdictStore | None = None,
    options: BatchOptions | None = None,
) -> BatchOutcome:
    """Synchronous :func:`score_dataset` (``asyncio.run``)."""
    return asyncio.run(score_dataset(input_path, output_path, backend, config, store=store, options=options))


def retry_unjudged_sync(
    output_path: str | Path,
    backend: Backend,
    config: JudgeConfig,
    *,
    store: VerdictStore | None = None,
    options: BatchOptions | None = None,
) -> BatchOutcome:
    """Synchronous :func:`retry_unjudged` (``asyncio.run``)."""
    return asyncio.run(retry_unjudged(output_path, backend, config, store=store, options=options))
