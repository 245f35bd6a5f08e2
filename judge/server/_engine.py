"""The server's one seam onto the batch layer (``judge.batch``): everything a job does to
judge passages, read its output or export it goes through here, so re-pointing the service
at another batch driver means editing this module only.

A job is a directory: ``input.jsonl`` (the submitted records, as ``judge score`` reads
them), ``output.jsonl`` (one line per finished query, appended and fsynced),
``output.summary.json`` and ``output.rejects.jsonl``. Resuming after a kill is what
``judge score`` does on the same output: finished queries are in the output, judged passages
in the verdict cache.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.backends._base import Backend
from judge.batch import (
    BatchOptions,
    retry_unjudged,
    score_dataset,
    write_qrels,
    write_run,
)
from judge.batch._records import _truth_of as truth_of
from judge.io._errors import InputError
from judge.io._jsonl import DEFAULT_MAX_PASSAGE_CHARS, error_record, iter_dataset
from judge.judging import JudgeConfig, VerdictStore

INPUT_NAME = "input.jsonl"
OUTPUT_NAME = "output.jsonl"
SUMMARY_NAME = "output.summary.json"
REJECTS_NAME = "output.rejects.jsonl"


@dataclass(frozen=True)
class Validation:
    """What checking a job's input found: the valid queries and passages, the bad lines."""

    queries: int
    passages: int
    rejects: list[dict[str, Any]]


def validate_input(
    path: Path, *, field_map: Mapping[str, str], max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS
) -> Validation:
    """Read the saved input once, as ``judge score`` will: count what will run, list what
    is rejected (line, field, message)."""
    queries = passages = 0
    rejects: list[dict[str, Any]] = []
    for item in iter_dataset(path, field_map=field_map, max_passage_chars=max_passage_chars):
        if isinstance(item, InputError):
            rec = error_record(item, action="rejected")
            rec["path"] = INPUT_NAME
            rejects.append(rec)
            continue
        queries += 1
        passages += len(item.passages)
    return Validation(queries, passages, rejects)


def batch_options(
    *,
    k: Sequence[int],
    concurrency: int,
    field_map: Mapping[str, str],
    max_passage_chars: int,
    listwise: bool,
    listwise_template: str | None,
    settings: Mapping[str, Any],
) -> BatchOptions:
    return BatchOptions(
        k=tuple(k),
        concurrency=concurrency,
        field_map=dict(field_map),
        max_passage_chars=max_passage_chars,
        progress="quiet",
        listwise=listwise,
        listwise_template=listwise_template,
        settings=dict(settings),
    )


async def run_score(
    job_dir: Path,
    backend: Backend,
    config: JudgeConfig,
    store: VerdictStore | None,
    options: BatchOptions,
) -> dict[str, Any]:
    """Score (or resume scoring) a job's input into its output; the summary ``judge score`` writes."""
    outcome = await score_dataset(
        job_dir / INPUT_NAME, job_dir / OUTPUT_NAME, backend, config, store=store, options=options
    )
    return outcome.summary


async def run_retry_unjudged(
    job_dir: Path,
    backend: Backend,
    config: JudgeConfig,
    store: VerdictStore | None,
    options: BatchOptions,
) -> dict[str, Any]:
    """Re-ask the unjudged passages of a job's output (atomic rewrite); the new summary."""
    outcome = await retry_unjudged(job_dir / OUTPUT_NAME, backend, config, store=store, options=options)
    return outcome.summary


def complete_lines(path: Path, start: int = 0) -> tuple[list[bytes], int]:
    """The complete (newline-terminated) lines of ``path`` from byte ``start``, and the
    offset after the last one. Never repairs the file: a job may be appending to it."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read()
    except FileNotFoundError:
        return [], start
    end = data.rfind(b"\n")
    if end < 0:
        return [], start
    return data[: end + 1].splitlines(), start + end + 1


def iter_records(job_dir: Path) -> Iterator[dict[str, Any]]:
    """The finished query records of a job's output, in the order they finished."""
    lines, _ = complete_lines(job_dir / OUTPUT_NAME)
    for line in lines:
        if line.strip():
            yield json.loads(line)


class OutputTail:
    """Counts a job output's records as they are appended (reads only the new bytes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.queries = 0
        self.passages = 0
        self.unjudged = 0

    def reset(self) -> None:
        self.offset = self.queries = self.passages = self.unjudged = 0

    def poll(self) -> bool:
        """Read what was appended since the last poll; True if anything was."""
        lines, self.offset = complete_lines(self.path, self.offset)
        moved = False
        for line in lines:
            if not line.strip():
                continue
            rec = json.loads(line)
            self.queries += 1
            self.passages += int(rec.get("n_passages", 0))
            self.unjudged += int(rec.get("unjudged", 0))
            moved = True
        return moved


def export_text(job_dir: Path, kind: str, tag: str = "judge") -> str:
    """The job's output as a TREC file: ``qrels`` (the verdicts, as ``judge score
    --export-qrels`` writes them) or ``run`` (the input ranking, as ``--export-run``)."""
    records = list(iter_records(job_dir))
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
