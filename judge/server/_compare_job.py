"""Comparison jobs (``POST /v1/compare``): ``judge compare-systems`` run in the job's
directory, which is its report folder; a restart re-runs it (the pool's output and the
verdict cache make that a resume)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from judge.batch import (
    RunSpec,
)
from judge.server._asked_reasons import explaining_config, pool_lines, queue_head_pairs
from judge.server._comparisons import (
    _pool_run,
    _systems_of,
    compare_rejects,
    compare_summary,
    report_text,
    systems_options,
    validate_compare,
)
from judge.server._job_files import Validation
from judge.server._job_kind import PooledJobFiles, Runtime, job_spec
from judge.systems import (
    explain_pairs,
    run_comparison,
)


async def run_compare(
    job_dir: Path,
    rt: Runtime,
    spec: RunSpec,
    options: Mapping[str, Any],
    *,
    settings: Mapping[str, Any],
    retry: bool = False,
) -> dict[str, Any]:
    """Run (or resume) ``judge compare-systems`` in the job's directory through the server's
    backend, cache and engine (``rt``) with the job's :class:`~judge.batch.RunSpec`; the
    job's summary: the report's pool and means, the winner on the primary measure, the
    pool's verdicts.

    Verdicts and P(yes) first, as the CLI judges a pool: a reason only for the pairs the
    report shows (:func:`judge.systems.run_comparison`) and, here, for the review queue's
    first :data:`QUEUE_REASONS` items (``rt.labels``: the label-store reader, which
    takes the labelled pairs out of the queue); any other pair's reason is asked when the
    review page opens it (:func:`explain_one`). ``explain: true`` in the body asks every
    reason with its verdict instead."""
    backend, store = rt.backend, rt.store
    run = _pool_run(
        options, spec, concurrency=rt.concurrency, settings=settings, executor=rt.executor, retry=retry
    )
    comparison = await run_comparison(
        _systems_of(job_dir, options),
        job_dir,
        backend,
        spec.config,
        store=store,
        options=systems_options(job_dir, options),
        pool_run=run,
    )
    await asyncio.to_thread(comparison.save_differences)
    summary = await asyncio.to_thread(compare_summary, job_dir, comparison.report)
    explaining = explaining_config(backend, spec, options)
    if explaining is not None:
        pairs = await asyncio.to_thread(queue_head_pairs, job_dir, options, rt.labels)
        calls = 0
        if pairs:
            lines = await asyncio.to_thread(pool_lines, job_dir, pairs, options)
            got = await explain_pairs(job_dir, "queue", lines, backend, explaining, store=store, run=run)
            calls = got.calls
        summary["reasons"] = {"queue": sum(len(d) for d in pairs.values()), "calls": calls}
    return summary


class CompareJob(PooledJobFiles):
    """``judge compare-systems`` in the job's directory (a restart re-runs it: the pool's
    output and the verdict cache make that a resume). ``phase=retry`` asks the pool's
    unjudged pairs again and rewrites the report."""

    name = "compare"

    def validate(
        self, job_dir: Path, options: Mapping[str, Any], rt: Runtime, *, stop_after: int | None
    ) -> Validation:
        return validate_compare(job_dir, options)

    async def run(self, rt: Runtime, job: Mapping[str, Any], job_dir: Path) -> dict[str, Any]:
        opts = job["options"]
        return await run_compare(
            job_dir,
            rt,
            job_spec(opts, rt.spec),
            opts,
            settings={**rt.settings, "job": job["id"]},
            retry=job["phase"] == "retry",
        )

    def rejects(self, job_dir: Path) -> list[dict[str, Any]]:
        return compare_rejects(job_dir)

    def report(self, job_dir: Path, fmt: str) -> str | None:
        return report_text(job_dir, fmt)


COMPARE = CompareJob()
