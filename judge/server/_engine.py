"""The server's one seam onto the batch layer (``judge.batch``): everything a job does to
judge passages, read its output or export it goes through here, so re-pointing the service
at another batch driver means editing this module only.

A job is a directory: ``input.jsonl`` (the submitted records, as ``judge score`` reads
them), ``output.jsonl`` (one line per finished query, appended and fsynced),
``output.summary.json`` and ``output.rejects.jsonl``. Resuming after a kill is what
``judge score`` does on the same output: finished queries are in the output, judged passages
in the verdict cache. A comparison of systems (``POST /v1/compare``) runs ``judge
compare-systems`` in its job's directory instead (see "compare jobs" below).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from judge.backends import Backend
from judge.batch import (
    BatchOptions,
    RunSpec,
    SampleLabelOptions,
    comparison_review_queue,
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
    read_qrels,
    read_sample_labels,
)
from judge.judging import ExampleBank, JudgeConfig, PassageVerdict, VerdictStore
from judge.store import LabelSet, atomic_write_text, read_label_file, trec_token
from judge.systems import (
    REASONS_DIR,
    ComparisonReport,
    Inputs,
    PoolRun,
    PoolVerdicts,
    ReportFolder,
    SystemsOptions,
    SystemsReport,
    build_pool,
    check_sample_pairs,
    explain_pairs,
    map_human,
    pool_dataset_lines,
    pool_scale,
    read_reasons,
    read_systems,
    reasons_config,
    run_comparison,
)

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
    return SampleLabelOptions(
        read_sample_labels(job_dir / SAMPLE_LABELS),
        level=int(options.get("sample_level") or 1),
        confidence=float(options.get("confidence") or 0.95),
    )


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
) -> BatchOptions:
    """The batch options of a scoring job; with ``examples`` its labelled passages take their
    labels without a call (``labels``: the job's snapshot, as ``judge score --labels``);
    with ``adapt`` the snapshot's labels teach the decision rule (``judge score --adapt``)."""
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
        **decided,
    )


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


def results_path(job_dir: Path, kind: str) -> Path:
    """The job's result records: a scoring job's output, a comparison's pooled verdicts."""
    return ReportFolder(job_dir).pool_judged if kind == "compare" else job_dir / OUTPUT_NAME


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


# ------------------------------------------------------------------------ compare jobs
# A comparison of systems (``judge compare-systems``) runs in the job's directory, which is
# its report folder (:class:`judge.systems.ReportFolder`): ``systems/NAME.jsonl`` (each
# system's submitted records), ``human.qrels`` (the optional human labels), then what
# compare-systems writes there. Resuming is re-running it: the pool's output and the
# verdict cache hold what was judged. Verdicts come first; the reasons asked afterwards (the
# report's, the review queue's first items, the pairs the review page opens) are in
# ``reasons/`` (see "reasons on request" below), never in the pool's records.
SYSTEMS_DIR = "systems"
HUMAN_QRELS = "human.qrels"
COMPARE_REJECTS = "compare.rejects.jsonl"
# the file whose appended records are a comparison's progress (its pool's judged records)
POOL_JUDGED = ReportFolder(Path()).pool_judged.name


def system_path(job_dir: Path, name: str) -> Path:
    return job_dir / SYSTEMS_DIR / f"{name}.jsonl"


def write_systems(job_dir: Path, systems: Mapping[str, Sequence[Mapping[str, Any]] | str]) -> None:
    """Save each system's records (a list of objects, or NDJSON text as given) as
    ``systems/NAME.jsonl``, in the order given (the first is the baseline)."""
    (job_dir / SYSTEMS_DIR).mkdir(parents=True, exist_ok=True)
    for name, given in systems.items():
        with open(system_path(job_dir, name), "w", encoding="utf-8") as fh:
            if isinstance(given, str):
                fh.write(given if not given or given.endswith("\n") else given + "\n")
            else:
                for rec in given:  # ASCII escapes: a bad string is rejected by its line
                    fh.write(json.dumps(rec) + "\n")


def _systems_of(job_dir: Path, options: Mapping[str, Any]) -> dict[str, Path]:
    return {name: system_path(job_dir, name) for name in options["systems"]}


class _Collect:
    """The bad-input reporter compare-systems' reader calls (``report(err, action)``,
    ``rejected``): problems kept as records naming the system, nothing printed."""

    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = names
        self.records: list[dict[str, Any]] = []
        self.rejected = 0
        self.warned = 0

    def report(self, err: InputError, action: str) -> None:
        if action == "rejected":
            self.rejected += 1
        else:
            self.warned += 1
        rec = error_record(err, action=action)
        name = self.names.get(str(err.path), "")
        self.records.append({"system": name, **rec, "path": f"{SYSTEMS_DIR}/{name}.jsonl"})

    def close(self) -> None:
        pass


def public_message(job_dir: Path, err: InputError) -> str:
    """An input error's text without the server's directories."""
    return str(err).replace(str(job_dir) + "/", "")


def _human(job_dir: Path) -> Any:
    path = job_dir / HUMAN_QRELS
    return read_qrels(path) if path.exists() else None


def _read_inputs(job_dir: Path, options: Mapping[str, Any], reporter: _Collect) -> Inputs:
    return read_systems(
        _systems_of(job_dir, options),
        field_map=options.get("map") or {},
        max_passage_chars=int(options["max_passage_chars"]),
        strict=bool(options.get("strict")),
        reporter=cast(Any, reporter),  # duck-typed: the reader needs report() and rejected
    )


_SCALE_FIELDS = {
    "--qrels-level": "qrels_level",
    "--qrels-yes-grade": "qrels_yes_grade",
    "-l": "relevance_level",
}


def _on_pool_scale(job_dir: Path, options: Mapping[str, Any], human: Any) -> Any:
    """The human labels on the judge's scale, as compare-systems will put them; an
    :class:`InputError` naming ``options.FIELD`` when the scales cannot meet."""
    config = JudgeConfig(mode=options.get("mode") or "binary")
    try:
        return map_human(human, pool_scale(systems_options(job_dir, options), config, human))
    except InputError as err:
        message = err.message
        for flag, name in _SCALE_FIELDS.items():
            message = message.replace(flag, f"options.{name}")
        raise InputError(message, field=f"options.{_SCALE_FIELDS.get(err.field or '', err.field)}") from None


def validate_compare(job_dir: Path, options: Mapping[str, Any]) -> Validation:
    """Read the saved systems (and human labels) once, as compare-systems will: the pool's
    queries and passages still to judge, and the rejected lines naming system, line, field.
    Raises :class:`InputError` for what compare-systems refuses outright (``strict`` with a
    problem, a system without a valid query, bad qrels)."""
    human = _human(job_dir)
    paths = _systems_of(job_dir, options)
    collect = _Collect({str(p): name for name, p in paths.items()})
    try:
        inputs = _read_inputs(job_dir, options, collect)
    except InputError:
        if collect.records:
            with open(job_dir / COMPARE_REJECTS, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in collect.records)
        raise
    human = _on_pool_scale(job_dir, options, human)
    pool = build_pool(inputs, depth=options.get("depth"), human=human)
    sample = sample_label_options(job_dir, options)
    if sample is not None:
        check_sample_pairs(sample, pool)
    lines = pool_dataset_lines(pool, inputs)
    with open(job_dir / COMPARE_REJECTS, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in collect.records)
    return Validation(
        queries=len(lines),
        passages=sum(len(line["retrieval_context"]) for line in lines),
        rejects=collect.records,
    )


def compare_rejects(job_dir: Path) -> list[dict[str, Any]]:
    lines, _ = complete_lines(job_dir / COMPARE_REJECTS)
    return [json.loads(x) for x in lines if x.strip()]


def systems_options(job_dir: Path, options: Mapping[str, Any]) -> SystemsOptions:
    return SystemsOptions(
        depth=options.get("depth"),
        measures=tuple(options["measures"]) if options.get("measures") else None,
        relevance_level=options.get("relevance_level"),
        qrels=job_dir / HUMAN_QRELS if (job_dir / HUMAN_QRELS).exists() else None,
        qrels_level=options.get("qrels_level"),
        qrels_yes_grade=options.get("qrels_yes_grade"),
        seed=int(options.get("seed") or 0),
        resamples=int(options.get("resamples") or 10_000),
        stability_resamples=int(options.get("stability_resamples", 1000)),
        confidence=float(options.get("confidence") or 0.95),
        strict=bool(options.get("strict")),
        field_map=dict(options.get("map") or {}),
        max_passage_chars=int(options["max_passage_chars"]),
        top_queries=int(options.get("top_queries", 10)),
        top_passages=int(options.get("top_passages", 5)),
        until_decided=bool(options.get("until_decided")),
        budget=options.get("budget"),
        adaptive_batch=options.get("batch"),
        sample_labels=sample_label_options(job_dir, options),
    )


def _pool_run(
    options: Mapping[str, Any],
    spec: RunSpec,
    *,
    concurrency: int,
    settings: Mapping[str, Any],
    executor: Any = None,
    retry: bool = False,
) -> PoolRun:
    """How a comparison job's pool (and its reasons) are judged."""
    return PoolRun(
        spec=spec,
        concurrency=concurrency,
        progress="quiet",
        listwise=bool(options.get("listwise") or options.get("listwise_template")),
        listwise_template=options.get("listwise_template"),
        retry_unjudged=retry,
        settings=dict(settings),
        executor=executor,
    )


async def run_compare(
    job_dir: Path,
    backend: Backend,
    spec: RunSpec,
    store: VerdictStore | None,
    options: Mapping[str, Any],
    *,
    concurrency: int,
    settings: Mapping[str, Any],
    retry: bool = False,
    executor: Any = None,
    labels: Any = None,
) -> dict[str, Any]:
    """Run (or resume) ``judge compare-systems`` in the job's directory with the job's
    :class:`~judge.batch.RunSpec` (``concurrency``: the calls in flight the server's backend
    enforces); the job's summary: the report's pool and means, the winner on the primary
    measure, the pool's verdicts.

    Verdicts and P(yes) first, as the CLI judges a pool: a reason only for the pairs the
    report shows (:func:`judge.systems.run_comparison`) and, here, for the review queue's
    first :data:`QUEUE_REASONS` items (``labels``: the runtime's label-store reader, which
    takes the labelled pairs out of the queue); any other pair's reason is asked when the
    review page opens it (:func:`explain_one`). ``explain: true`` in the body asks every
    reason with its verdict instead."""
    run = _pool_run(options, spec, concurrency=concurrency, settings=settings, executor=executor, retry=retry)
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
        pairs = await asyncio.to_thread(queue_head_pairs, job_dir, options, labels)
        calls = 0
        if pairs:
            lines = await asyncio.to_thread(pool_lines, job_dir, pairs, options)
            got = await explain_pairs(job_dir, "queue", lines, backend, explaining, store=store, run=run)
            calls = got.calls
        summary["reasons"] = {"queue": sum(len(d) for d in pairs.values()), "calls": calls}
    return summary


# ------------------------------------------------------------- reasons on request
#: The review queue's first items whose reasons a finished comparison asks beside its report's
#: (the review page opens on them); any other pair's reason is asked when a reviewer opens it.
QUEUE_REASONS = 10
#: ``reasons/asked/DIGEST.*`` of a comparison: one pair each, asked when the review page opened it
ASKED_DIR = "asked"


def explaining_config(backend: Backend, spec: RunSpec, options: Mapping[str, Any]) -> JudgeConfig | None:
    """The config a comparison job's reasons on request are asked with; None: the job gets
    none on request (``explain`` set, listwise, or probability mode chosen explicitly)."""
    listwise = bool(options.get("listwise") or options.get("listwise_template"))
    return reasons_config(spec.config, backend, listwise=listwise)


def explained(job_dir: Path) -> dict[tuple[str, str], PassageVerdict]:
    """Every reason asked so far for a comparison's pooled pairs (its report's, its queue's,
    the pairs opened on the review page), by (query id, docno) and (query token, docno)."""
    found = read_reasons(job_dir)
    return {**found, **{(trec_token(q), d): v for (q, d), v in found.items()}}


def pool_lines(
    job_dir: Path, pairs: Mapping[str, Sequence[str]], options: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Dataset lines of ``pairs`` (``{query id: [docno]}``) with the texts the pool was judged
    on: the pool input's lines (``pool.input.jsonl``) cut to them, in the pool's order; a
    pair it lacks (an adaptive comparison judges in rounds) from the systems' saved records
    (``options``: the job's)."""
    lines, _ = complete_lines(ReportFolder(job_dir).pool_input)
    out: dict[str, dict[str, Any]] = {}
    for raw in lines:
        if not raw.strip():
            continue
        line = json.loads(raw)
        wanted = set(pairs.get(str(line["id"]), ()))
        context = [p for p in line["retrieval_context"] if str(p["id"]) in wanted]
        if context:
            out[str(line["id"])] = {**line, "retrieval_context": context}
    rest = {
        q: [d for d in docs if d not in {str(p["id"]) for p in out.get(q, {}).get("retrieval_context", [])}]
        for q, docs in pairs.items()
    }
    if options is not None and any(rest.values()):
        inputs = _read_inputs(job_dir, {**options, "strict": False}, _Collect({}))
        for qid, docs in rest.items():
            texts = inputs.passages.get(qid, {})
            context = [{"id": d, "text": texts[d].text} for d in docs if d in texts]
            if context:
                line = out.setdefault(qid, {"id": qid, "query": inputs.queries[qid], "retrieval_context": []})
                line["retrieval_context"] = [*line["retrieval_context"], *context]
    return list(out.values())


def queue_head_pairs(
    job_dir: Path, options: Mapping[str, Any], labels: Callable[[Any], Any] | None
) -> dict[str, list[str]]:
    """``{query id: [docno]}``: the judged verdicts without a reason among the first
    :data:`QUEUE_REASONS` items of the comparison's review queue (as the review page lists
    it: ``labels`` gives the label store's labels of the job's queries)."""
    records = list(iter_pool_records(job_dir))
    found = labels({str(r["id"]) for r in records})[0] if labels is not None and records else None
    items = comparison_review_queue(records, system_rankings(job_dir, options), found, limit=QUEUE_REASONS)
    by_token = {trec_token(r["id"]): r for r in records}
    have = explained(job_dir)
    pairs: dict[str, list[str]] = {}
    for item in items:
        record = by_token.get(item.qid)
        index = item.candidate.extra.get("index")
        if record is None or not isinstance(index, int):
            continue
        verdict = record["verdicts"][index]
        qid, docno = str(record["id"]), item.docno
        if verdict.get("verdict") == "unjudged" or verdict.get("reason") or (qid, docno) in have:
            continue
        pairs.setdefault(qid, []).append(docno)
    return pairs


def _asked_paths(job_dir: Path, qid: str, docno: str) -> tuple[str, Path]:
    digest = hashlib.sha256(f"{qid}\t{docno}".encode()).hexdigest()[:24]
    name = f"{ASKED_DIR}/{digest}"
    return name, job_dir / REASONS_DIR / name


def asked_by(job_dir: Path, qid: str, docno: str) -> dict[str, Any] | None:
    """Who asked a pair's reason on the review page, and when (None: not asked there)."""
    _, base = _asked_paths(job_dir, qid, docno)
    try:
        found: dict[str, Any] = json.loads(base.with_suffix(".asked.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return found


async def explain_one(
    job_dir: Path,
    qid: str,
    docno: str,
    backend: Backend,
    spec: RunSpec,
    store: VerdictStore | None,
    options: Mapping[str, Any],
    *,
    concurrency: int,
    settings: Mapping[str, Any],
    executor: Any = None,
) -> PassageVerdict | None:
    """Ask one pooled pair's reason (``reasons/asked/``, the explaining config's cache key):
    the explained verdict (``cached`` when it came from the cache), or None when the job gets
    no reasons on request. A verdict without its reason leaves nothing behind, so the next
    ask calls the judge again; an error that dooms every request propagates."""
    explaining = explaining_config(backend, spec, options)
    if explaining is None:
        return None
    name, base = _asked_paths(job_dir, qid, docno)
    run = _pool_run(options, spec, concurrency=concurrency, settings=settings, executor=executor)
    lines = await asyncio.to_thread(pool_lines, job_dir, {qid: [docno]}, options)
    got: PoolVerdicts | None = None
    try:
        got = await explain_pairs(job_dir, name, lines, backend, explaining, store=store, run=run)
    finally:
        verdict = None if got is None else got.verdicts.get(qid, {}).get(docno)
        if verdict is None or not verdict.judged or not verdict.reason:
            for suffix in (".input.jsonl", ".judged.jsonl"):
                base.with_suffix(suffix).unlink(missing_ok=True)
    return verdict


def record_asked(job_dir: Path, qid: str, docno: str, who: str, when: str, calls: int) -> dict[str, Any]:
    """Keep who asked a pair's reason on the review page and when (the server's clock)."""
    _, base = _asked_paths(job_dir, qid, docno)
    entry = {"query_id": qid, "docno": docno, "asked_by": who, "asked_at": when, "calls": calls}
    atomic_write_text(base.with_suffix(".asked.json"), json.dumps(entry, ensure_ascii=False) + "\n")
    return entry


def compare_summary(job_dir: Path, report: SystemsReport) -> dict[str, Any]:
    verdicts: dict[str, int] = {}
    queries = passages = unjudged = 0
    for rec in iter_pool_records(job_dir):
        queries += 1
        passages += int(rec.get("n_passages", len(rec.get("verdicts", []))))
        unjudged += int(rec.get("unjudged", 0))
        for v in rec.get("verdicts", []):
            verdicts[str(v.get("verdict"))] = verdicts.get(str(v.get("verdict")), 0) + 1
    data = report.to_json()
    measures = list(data["conventions"].get("measures") or [])
    primary = "map" if "map" in measures else (measures[0] if measures else None)
    return {
        "schema": data["schema"],
        "baseline": data["conventions"].get("baseline"),
        "primary": primary,
        "best": _best(data, primary),
        "systems": {name: s["measures"] for name, s in data["systems"].items()},
        "pool": data["pool"],
        "queries": queries,
        "passages": passages,
        "unjudged": unjudged,
        "verdicts": verdicts,
        "comparisons": len(data["comparisons"]),
        "warnings": data["warnings"],
    }


def _best(data: Mapping[str, Any], primary: str | None) -> str | None:
    """The system with the highest mean on the primary measure (the first on a tie)."""
    if primary is None:
        return None
    best: tuple[float, str] | None = None
    for name, s in data["systems"].items():
        value = s["measures"].get(primary)
        if isinstance(value, int | float) and (best is None or value > best[0]):
            best = (float(value), name)
    return None if best is None else best[1]


def iter_pool_records(job_dir: Path) -> Iterator[dict[str, Any]]:
    lines, _ = complete_lines(ReportFolder(job_dir).pool_judged)
    for line in lines:
        if line.strip():
            yield json.loads(line)


def report_text(job_dir: Path, fmt: str) -> str | None:
    """The finished comparison's report as ``json``, ``md`` or ``html`` (None: not yet)."""
    return ReportFolder(job_dir).view(fmt)


def compare_export(job_dir: Path, kind: str, system: str | None) -> tuple[str, str] | None:
    """The pool's qrels (``kind="qrels"``) or one system's run, as ``(file name, text)``
    (None: not written yet / no such)."""
    folder = ReportFolder(job_dir)
    text = folder.export(kind, system)
    if text is None:
        return None
    return (folder.pool_qrels if kind == "qrels" else folder.run(str(system))).name, text


def system_rankings(job_dir: Path, options: Mapping[str, Any]) -> dict[str, dict[str, list[str]]]:
    """``{system: {qid: [docno, ...]}}``: each system's ranking within the pooling depth, qids
    as the label store names them (what a comparison's review queue weighs passages by)."""
    inputs = _read_inputs(job_dir, {**options, "strict": False}, _Collect({}))
    depth = options.get("depth")
    return {
        system.name: {
            trec_token(qid): list(sq.docnos[:depth] if depth else sq.docnos)
            for qid, sq in system.queries.items()
        }
        for system in inputs.systems
    }


def read_differences(job_dir: Path, options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The viewer's per-query view of a finished comparison (computed once, then read;
    None: not finished)."""
    folder = ReportFolder(job_dir)
    found = folder.saved_differences()
    if found is not None or not folder.written:
        return found
    return load_report(job_dir, options).save_differences()


def load_report(job_dir: Path, options: Mapping[str, Any]) -> ComparisonReport:
    """A finished comparison job's report with its views, from the job's directory."""
    return ComparisonReport.load(
        job_dir, systems_options(job_dir, options), systems=_systems_of(job_dir, options)
    )
