"""A comparison of systems' files in its job's directory: the saved systems and human labels,
their check, the options ``judge compare-systems`` runs with, and the finished report's
views (read by :mod:`judge.server._compare_job`, the job kind, and the review and reasons
routes)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from judge.batch import (
    RunSpec,
)
from judge.io import (
    InputError,
    Qrels,
    error_record,
)
from judge.judging import JudgeConfig
from judge.server._job_files import Validation, complete_lines, sample_label_options
from judge.store import trec_token
from judge.systems import (
    DEFAULT_TEST_FIGURE,
    ComparisonReport,
    Inputs,
    PoolRun,
    ReportFolder,
    SystemsOptions,
    SystemsReport,
    build_pool,
    check_sample_pairs,
    check_test_figure,
    map_human,
    pool_dataset_lines,
    pool_scale,
    query_texts,
    read_qrels_file,
    read_systems,
)

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


def _human(job_dir: Path, options: Mapping[str, Any], queries: Mapping[str, str]) -> Qrels | None:
    """The job's ``qrels`` read as ``--qrels`` reads them (:func:`judge.systems.read_qrels_file`:
    TREC qrels, or a Quepid/SRW judgment list whose query texts are ``queries``' (TREC qid ->
    text), on the scale ``qrels_scale`` states); None without them. An :class:`InputError`
    names ``options.qrels`` (with the line and the file's field: ``options.qrels.query``) or
    ``options.qrels_scale``."""
    path = job_dir / HUMAN_QRELS
    if not path.exists():
        return None
    try:
        return read_qrels_file(path, queries, scale=options.get("qrels_scale"))
    except InputError as err:
        if err.field == "--qrels-scale":
            field = "options.qrels_scale"
        elif err.field in (None, "--qrels"):
            field = "options.qrels"
        else:
            field = f"options.qrels.{err.field}"
        message = err.message.replace("--qrels-scale", "options.qrels_scale")
        raise InputError(message, path=err.path, line=err.line, field=field) from None


def human_labels(job_dir: Path, options: Mapping[str, Any], queries: Mapping[str, str]) -> Qrels | None:
    """The job's human labels read (:func:`_human`) and put on the judge's scale as the run
    will (:func:`_on_pool_scale`): the check of ``qrels`` before anything is stored."""
    return _on_pool_scale(job_dir, options, _human(job_dir, options, queries))


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


def _on_pool_scale(job_dir: Path, options: Mapping[str, Any], human: Qrels | None) -> Qrels | None:
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
    paths = _systems_of(job_dir, options)
    collect = _Collect({str(p): name for name, p in paths.items()})
    try:
        inputs = _read_inputs(job_dir, options, collect)
    except InputError:
        if collect.records:
            with open(job_dir / COMPARE_REJECTS, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in collect.records)
        raise
    human = human_labels(job_dir, options, query_texts(inputs))
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
        qrels_scale=options.get("qrels_scale"),
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
        test_figure=check_test_figure(options.get("test_figure", DEFAULT_TEST_FIGURE), field="test_figure"),
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
