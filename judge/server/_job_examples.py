"""A scoring job's worked examples (``examples``): the label store's labels of its queries,
snapshotted when the job first starts, as the bank and the labels that decide its labelled
passages without a call."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.batch import (
    RunSpec,
)
from judge.io import (
    DEFAULT_MAX_PASSAGE_CHARS,
    InputError,
    iter_dataset,
)
from judge.judging import ExampleBank
from judge.server._job_files import INPUT_NAME
from judge.store import LabelSet, atomic_write_text, read_label_file

#: a scoring job's label snapshot under ``examples``: the label store's labels of the job's
#: queries when the job first started (every reviewer's latest, in the store's order)
EXAMPLE_LABELS = "examples.labels.jsonl"


@dataclass(frozen=True)
class JobExamples:
    """A scoring job's worked examples and the labels that decide its labelled passages
    (the same snapshot, :data:`EXAMPLE_LABELS`), with the server's stated mapping."""

    bank: ExampleBank | None
    labels: LabelSet
    level: int | None
    yes_grade: int | None


def _label_snapshot(job_dir: Path, ids: set[str], labels: Any) -> tuple[LabelSet, int | None, int | None]:
    """The job's labels for ``examples``: read from :data:`EXAMPLE_LABELS` when the job has
    one (a resumed or retried job), else taken from the label store (``labels``, the
    runtime's reader) now and saved there first. A label given, changed or retracted after
    the job first started never changes which passages the job decides by label or which
    examples its prompts show (the job page still shows the latest label). The file keeps
    the label that counts for each passage (:class:`judge.store.LabelSet`'s resolution)."""
    path = job_dir / EXAMPLE_LABELS
    if path.is_file():  # the server's stated mapping with the job's own labels
        level, yes_grade = labels(set())[1:] if labels is not None else (None, None)
        return LabelSet(read_label_file(path), source="the label store"), level, yes_grade
    if labels is None:
        return LabelSet([], source="the label store"), None, None
    found, level, yes_grade = labels(ids)
    text = "".join(json.dumps(r.label.as_dict(), ensure_ascii=False, sort_keys=True) + "\n" for r in found)
    atomic_write_text(path, text)
    return found, level, yes_grade


async def job_example_bank(
    job_dir: Path, spec: RunSpec, options: Mapping[str, Any], labels: Any
) -> JobExamples | None:
    """A scoring job's worked examples (``examples``) and the labels that decide its labelled
    passages without a call (:func:`judge.batch.labels_decide`, as ``judge score --labels
    store --examples N``): the labels of the server's label store for the job's queries
    (``labels``, the runtime's), snapshotted when the job first starts
    (:func:`_label_snapshot`), texts from the job's input; None without ``examples``. A
    store without labels for them gives a bank with none (every passage is judged
    zero-shot; the summary's ``examples`` says so). With ``adapt`` (and no examples) the same
    snapshot, with no bank: the labels the adaptation learns from."""
    if not spec.examples.active and not spec.adapt:
        return None
    from judge.batch import dataset_example_bank
    from judge.systems import with_neighbours

    path = job_dir / INPUT_NAME
    field_map = options.get("map") or {}
    max_chars = int(options.get("max_passage_chars") or DEFAULT_MAX_PASSAGE_CHARS)

    def build() -> JobExamples:
        ids = {
            item.id
            for item in iter_dataset(path, field_map=field_map, max_passage_chars=max_chars)
            if not isinstance(item, InputError)
        }
        found, level, yes_grade = _label_snapshot(job_dir, ids, labels)
        if not spec.examples.active:
            return JobExamples(None, found, level, yes_grade)
        bank = dataset_example_bank(
            path,
            found,
            spec.examples,
            spec.config.mode,
            grade_threshold=spec.config.grade_threshold,
            level=level,
            yes_grade=yes_grade,
            field_map=field_map,
            max_passage_chars=max_chars,
        )
        return JobExamples(with_neighbours(bank) if bank is not None else None, found, level, yes_grade)

    return await asyncio.to_thread(build)
