"""What every kind of job reads and writes in its directory: the complete lines of a file
being appended to, a growing output's counters, the checked input's
:class:`Validation`, and a job's or comparison's sample labels."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from judge.batch import (
    SampleLabelOptions,
)
from judge.io import (
    read_sample_labels,
)

#: a scoring job's files (its input, output, summary, rejected lines)
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


def in_input_order(lines: list[bytes]) -> list[bytes]:
    """Result lines sorted by the input line each record was read from (its ``line``): the
    output file is written as queries finish, which is not the order they were given in.
    A line without a number keeps its place after the numbered ones (stable sort)."""

    def line_of(raw: bytes) -> float:
        try:
            value = json.loads(raw).get("line")
        except (ValueError, AttributeError):
            return math.inf
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else math.inf

    return sorted(lines, key=line_of)


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


#: a job's or comparison's --sample-labels, saved beside its input
SAMPLE_LABELS = "sample.qrels"


def save_sample_labels(job_dir: Path, options: dict[str, Any]) -> None:
    """Move ``options["sample_labels"]`` (the body's text) into the job's file; the options keep
    its name only."""
    text = options.get("sample_labels")
    if text is None:
        return
    (job_dir / SAMPLE_LABELS).write_text(str(text), encoding="utf-8")
    options["sample_labels"] = SAMPLE_LABELS


def sample_label_options(job_dir: Path, options: Mapping[str, Any]) -> SampleLabelOptions | None:
    """The job's sample labels (None without): InputError naming the file's line."""
    if not options.get("sample_labels"):
        return None
    labels = read_sample_labels(job_dir / SAMPLE_LABELS)
    return SampleLabelOptions(
        replace(labels, path=SAMPLE_LABELS),  # what a report shows: the job's file, never a server path
        level=int(options.get("sample_level") or 1),
        confidence=float(options.get("confidence") or 0.95),
        allow_unlabelled=bool(options.get("allow_unlabelled")),
    )
