"""Scoring jobs (``POST /v1/jobs``): ``judge score`` on a dataset, in the job's directory.

A scoring job is a directory: ``input.jsonl`` (the submitted records, as ``judge score``
reads them), ``output.jsonl`` (one line per finished query, appended and fsynced),
``output.summary.json`` and ``output.rejects.jsonl``. Resuming after a kill is what
``judge score`` does on the same output: finished queries are in the output, judged passages
in the verdict cache.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from judge.backends import Backend
from judge.batch import (
    BatchOptions,
    FeatureFn,
    SampleLabelOptions,
    dataset_pairs,
    retry_unjudged,
    score_dataset,
    truth_of,
    write_qrels,
    write_run,
)
from judge.io import (
    DEFAULT_MAX_PASSAGE_CHARS,
    InputError,
    error_record,
    iter_dataset,
)
from judge.judging import JudgeConfig, VerdictStore
from judge.server._job_examples import JobExamples, job_example_bank
from judge.server._job_files import (
    INPUT_NAME,
    OUTPUT_NAME,
    REJECTS_NAME,
    SUMMARY_NAME,
    Validation,
    complete_lines,
    sample_label_options,
)
from judge.server._job_kind import JobFiles, Runtime, job_spec
from judge.systems import dataset_features


def validate_input(
    path: Path,
    *,
    field_map: Mapping[str, str],
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS,
    stop_after: int | None = None,
) -> Validation:
    """Read the saved input once, as ``judge score`` will: count what will run, list what
    is rejected (line, field, message); ``stop_after``: stop once that many lines were read."""
    queries = passages = 0
    rejects: list[dict[str, Any]] = []
    for item in iter_dataset(path, field_map=field_map, max_passage_chars=max_passage_chars):
        if stop_after is not None and queries + len(rejects) >= stop_after:
            break
        if isinstance(item, InputError):
            rec = error_record(item, action="rejected")
            rec["path"] = INPUT_NAME
            rejects.append(rec)
            continue
        queries += 1
        passages += len(item.passages)
    return Validation(queries, passages, rejects)


def score_rejects(job_dir: Path) -> list[dict[str, Any]]:
    """A scoring job's rejected input lines (line, field, error), each naming the input file."""
    lines, _ = complete_lines(job_dir / REJECTS_NAME)
    return [{**json.loads(x), "path": INPUT_NAME} for x in lines if x.strip()]


def write_rejects(job_dir: Path, rejects: Sequence[Mapping[str, Any]]) -> None:
    """The checked input's rejects as the job's rejects file (the run rewrites it)."""
    with open(job_dir / REJECTS_NAME, "w", encoding="utf-8") as fh:
        for rec in rejects:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def check_job_sample(job_dir: Path, options: Mapping[str, Any], input_path: Path) -> None:
    """A score job's sample labels read and matched with its input's pairs (InputError)."""
    sample = sample_label_options(job_dir, options)
    if sample is None:
        return
    pairs = dataset_pairs(
        input_path, field_map=options.get("map") or {}, max_passage_chars=int(options["max_passage_chars"])
    )
    sample.labels.check_pairs(pairs, field="options.sample_labels")


def batch_options(
    *,
    k: Sequence[int],
    concurrency: int,
    field_map: Mapping[str, str],
    max_passage_chars: int,
    listwise: bool,
    listwise_template: str | None,
    settings: Mapping[str, Any],
    executor: Any = None,
    sample_labels: SampleLabelOptions | None = None,
    examples: JobExamples | None = None,
    adapt: bool = False,
    adapt_features: FeatureFn | None = None,
) -> BatchOptions:
    """The batch options of a scoring job; with ``examples`` its labelled passages take their
    labels without a call (``labels``: the job's snapshot, as ``judge score --labels``);
    with ``adapt`` the snapshot's labels teach the decision rule (``judge score --adapt``),
    with the encoder's ``adapt_features`` where it is installed."""
    decided: dict[str, Any] = {}
    if examples is not None:
        decided = {
            "labels": examples.labels,
            "labels_level": examples.level,
            "labels_yes_grade": examples.yes_grade,
        }
    return BatchOptions(
        sample_labels=sample_labels,
        k=tuple(k),
        concurrency=concurrency,
        field_map=dict(field_map),
        max_passage_chars=max_passage_chars,
        progress="quiet",
        listwise=listwise,
        listwise_template=listwise_template,
        settings=dict(settings),
        executor=executor,
        examples=examples.bank if examples is not None else None,
        adapt=adapt,
        adapt_features=adapt_features,
        **decided,
    )


async def run_score(
    job_dir: Path,
    backend: Backend,
    config: JudgeConfig,
    store: VerdictStore | None,
    options: BatchOptions,
    *,
    retry: bool = False,
) -> dict[str, Any]:
    """Score (or resume scoring) a job's input into its output, or with ``retry`` re-ask the
    unjudged passages of its output (atomic rewrite); the summary ``judge score`` writes."""
    if retry:
        outcome = await retry_unjudged(job_dir / OUTPUT_NAME, backend, config, store=store, options=options)
    else:
        outcome = await score_dataset(
            job_dir / INPUT_NAME, job_dir / OUTPUT_NAME, backend, config, store=store, options=options
        )
    return outcome.summary


def iter_records(job_dir: Path) -> Iterator[dict[str, Any]]:
    """The finished query records of a job's output, in the order they finished."""
    lines, _ = complete_lines(job_dir / OUTPUT_NAME)
    for line in lines:
        if line.strip():
            yield json.loads(line)


def export_text(
    job_dir: Path, kind: str, tag: str = "judge", records: Sequence[Mapping[str, Any]] | None = None
) -> str:
    """The job's output as a TREC file: ``qrels`` (the verdicts, as ``judge score
    --export-qrels`` writes them) or ``run`` (the input ranking, as ``--export-run``).
    ``records``: the job's records as shown (human labels applied); default: its output."""
    records = list(iter_records(job_dir)) if records is None else list(records)
    with tempfile.TemporaryDirectory(dir=job_dir) as tmp:
        path = Path(tmp) / f"export.{kind}"
        if kind == "qrels":
            write_qrels(records, path)
        else:
            write_run(records, path, tag)
        return path.read_text(encoding="utf-8")


def query_detail(job_dir: Path, query_id: str, options: Mapping[str, Any]) -> dict[str, Any] | None:
    """One finished query's record, with ``passages``: each passage's rank, docno, text,
    verdict and ground-truth grade (texts come from the saved input)."""
    record = next((r for r in iter_records(job_dir) if str(r["id"]) == query_id), None)
    if record is None:
        return None
    texts: list[str] | None = None
    for item in iter_dataset(
        job_dir / INPUT_NAME,
        field_map=options.get("map") or {},
        max_passage_chars=int(options.get("max_passage_chars") or DEFAULT_MAX_PASSAGE_CHARS),
    ):
        if not isinstance(item, InputError) and item.id == query_id:
            texts = [p.text for p in item.passages]
            break
    truth = truth_of(record)
    passages = []
    for i, (docno, verdict) in enumerate(zip(record["docnos"], record["verdicts"], strict=True)):
        passages.append(
            {
                "rank": i + 1,
                "docno": docno,
                "text": texts[i] if texts is not None and i < len(texts) else None,
                "verdict": verdict,
                "truth": None if truth is None else truth.get(str(docno), 0),
            }
        )
    return {"record": record, "passages": passages}


class ScoreJob:
    """``judge score`` on a job's input (``phase=retry``: its unjudged passages asked again)."""

    name = "score"
    pooled = False

    def files(self, job_dir: Path) -> JobFiles:
        return JobFiles(job_dir / OUTPUT_NAME, job_dir / INPUT_NAME)

    def validate(
        self, job_dir: Path, options: Mapping[str, Any], rt: Runtime, *, stop_after: int | None
    ) -> Validation:
        return validate_input(
            job_dir / INPUT_NAME,
            field_map=options.get("map") or {},
            max_passage_chars=int(options["max_passage_chars"]),
            stop_after=stop_after,
        )

    async def run(self, rt: Runtime, job: Mapping[str, Any], job_dir: Path) -> dict[str, Any]:
        opts = job["options"]
        spec = job_spec(opts, rt.spec)
        config = spec.config
        batch = batch_options(
            k=opts["k"],
            concurrency=rt.concurrency,
            field_map=opts.get("map") or {},
            max_passage_chars=opts["max_passage_chars"],
            listwise=bool(opts.get("listwise")),
            listwise_template=opts.get("listwise_template"),
            settings={**rt.settings, "job": job["id"]},
            executor=rt.executor,
            sample_labels=sample_label_options(job_dir, opts),
            examples=await job_example_bank(job_dir, spec, opts, rt.labels),
            adapt=spec.adapt,
            adapt_features=dataset_features(
                job_dir / INPUT_NAME,
                field_map=opts.get("map") or {},
                max_passage_chars=opts["max_passage_chars"],
            )
            if spec.adapt
            else None,
        )
        return await run_score(job_dir, rt.backend, config, rt.store, batch, retry=job["phase"] == "retry")

    def rejects(self, job_dir: Path) -> list[dict[str, Any]]:
        return score_rejects(job_dir)

    def report(self, job_dir: Path, fmt: str) -> str | None:
        path = job_dir / SUMMARY_NAME
        return path.read_text(encoding="utf-8") if fmt == "json" and path.is_file() else None


SCORE = ScoreJob()
