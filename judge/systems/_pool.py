"""The pool: per query, the union of every system's passages (or each one's top ``depth``),
judged once through the batch engine of ``judge score``.

The pool is written as a dataset (``pool.input.jsonl``: one line per query with the
passages that need a judge, each under its docno as ``id``) and judged by
:func:`judge.batch.score_dataset` into ``pool.judged.jsonl``. That is the only place this
package touches the batch layer (:func:`judge_pool`), so the verdict cache, resume, fault
handling, progress and rejects of ``judge score`` all apply: a re-run makes no call, a kill
loses nothing (finished queries are in the output, judged passages in the cache), an
unjudged passage stays unjudged (``retry_unjudged=True`` asks again). Verdicts and P(yes)
come first: a reason only when ``explain`` asks for every one, else afterwards for the pairs
the report shows (:mod:`judge.systems._reasons`).

Human labels (TREC qrels) fill the pool first: a labelled pair is never sent to the judge.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from judge.backends import Backend
from judge.io import DEFAULT_MAX_PASSAGE_CHARS, InputError, Qrels
from judge.judging import ExampleBank, JudgeConfig, PassageVerdict, VerdictStore
from judge.store import LabelSet, atomic_write_lines, atomic_write_text, recover_output
from judge.systems._inputs import Inputs

if TYPE_CHECKING:
    from judge.batch import RunSpec


@dataclass
class PoolQuery:
    """One pooled query: its id, TREC qid and text; ``pooled`` the docnos in the pool (first
    appearance, systems in order); ``human`` every human label of the query (pooled or not);
    ``to_judge`` the pooled docnos without a human label."""

    qid: str
    token: str
    query: str
    pooled: list[str]
    human: dict[str, int]
    to_judge: list[str]


@dataclass
class Pool:
    """Every pooled query (first-seen order) and ``pairs``: (query, passage) pairs summed
    over the systems, within the depth."""

    queries: list[PoolQuery]
    pairs: int
    _index: dict[str, PoolQuery] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._index = {q.qid: q for q in self.queries}

    def labels(self, qid: str) -> dict[str, int]:
        """The human labels of one query (empty without ``--qrels``)."""
        q = self._index.get(qid)
        return q.human if q is not None else {}

    @property
    def unique_pairs(self) -> int:
        return sum(len(q.pooled) for q in self.queries)

    @property
    def human_labels(self) -> int:
        return sum(len(q.pooled) - len(q.to_judge) for q in self.queries)


def build_pool(
    inputs: Inputs,
    *,
    depth: int | None,
    human: Qrels | None,
    labels: Mapping[str, Mapping[str, int]] | None = None,
) -> Pool:
    """Per query (first-seen order over the systems), the union of each system's top
    ``depth`` passages (all of them when None); human labels with a grade >= 0 keep their
    pairs out of the judging. ``labels``: ``{qid: {docno: grade}}`` from the label store or
    a labels file, already on the pool's scale; they join the qrels and win on a pair both
    label (the later review)."""
    queries: list[PoolQuery] = []
    pairs = 0
    for qid in inputs.queries:
        token = inputs.tokens[qid]
        seen: dict[str, None] = {}
        for system in inputs.systems:
            sq = system.queries.get(qid)
            if sq is None:
                continue
            top = sq.docnos if depth is None else sq.docnos[:depth]
            pairs += len(top)
            for d in top:
                seen.setdefault(d, None)
        given = {**(human.query(token) if human is not None else {}), **(labels or {}).get(qid, {})}
        known = {d: g for d, g in given.items() if g >= 0}
        pooled = list(seen)
        to_judge = [d for d in pooled if d not in known]
        queries.append(PoolQuery(qid, token, inputs.queries[qid], pooled, known, to_judge))
    return Pool(queries=queries, pairs=pairs)


def pool_dataset_lines(pool: Pool, inputs: Inputs, *, labelled: bool = False) -> list[dict[str, Any]]:
    """``pool.input.jsonl``: one dataset line per query with something to judge; every
    passage under its docno as ``id`` (so the judged output's docnos are the pool's).
    ``labelled`` (``--adapt``): the labelled pooled pairs are judged too."""
    lines: list[dict[str, Any]] = []
    for q in pool.queries:
        docnos = q.pooled if labelled else q.to_judge
        if not docnos:
            continue
        passages = inputs.passages[q.qid]
        lines.append(
            {
                "id": q.qid,
                "query": q.query,
                "retrieval_context": [{"id": d, "text": passages[d].text} for d in docnos],
            }
        )
    return lines


def _default_spec() -> RunSpec:
    from judge.batch import RunSpec

    return RunSpec()


@dataclass(frozen=True)
class PoolRun:
    """How the pool is judged (the batch settings ``judge score`` takes).

    ``spec``: the run's :class:`~judge.batch.RunSpec`, taken as is: its call policy and
    engine decide the calls in flight (:meth:`RunSpec.concurrency_for` the backend), the
    window and who judges (a Ray engine's executor); the judging config is the one
    :func:`run_compare_systems` is given. ``concurrency``: None (the spec's), or a number
    of calls in flight that overrides it. ``executor``: who judges, kept open by its
    owner (a server's shared Ray executor); None: the spec's engine, a Ray executor made
    for this pool (its workers build ``ship``, a ``BackendSpec``; default the backend)
    and closed after it. ``examples``: the pool's labelled passages, the worked examples
    of ``spec.examples`` (set by :func:`run_comparison` from the pool; None: none).
    ``adapt``: under ``--adapt``, the pooled pairs' human labels the judged run learns the
    decision rule from (set by :func:`run_comparison`; None: no adaptation), and
    ``adapt_features`` its extra columns (the encoder's query similarity and relevance feedback, a
    :data:`judge.batch.FeatureFn`; None: none)."""

    spec: RunSpec = field(default_factory=_default_spec)
    concurrency: int | None = None
    progress: str = "quiet"
    command: str = "judge compare-systems"  # the label of the progress lines
    listwise: bool = False
    listwise_template: str | None = None
    retry_unjudged: bool = False
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS
    fsync: bool = True
    settings: Mapping[str, Any] = field(default_factory=dict)
    executor: Any = None
    ship: Any = None
    examples: ExampleBank | None = None
    adapt: LabelSet | None = None
    adapt_features: Any = None


@dataclass
class PoolVerdicts:
    """The judged pool: ``verdicts[qid][docno]`` for every pair sent to the judge."""

    verdicts: dict[str, dict[str, PassageVerdict]]
    mode: str | None
    calls: int
    summary: dict[str, Any] | None

    def judged(self) -> int:
        return sum(1 for vs in self.verdicts.values() for v in vs.values() if v.judged)

    def unjudged(self) -> int:
        return sum(1 for vs in self.verdicts.values() for v in vs.values() if not v.judged)


def verdicts_first(config: JudgeConfig) -> JudgeConfig:
    """The config a pool is judged with: no reasons unless ``explain`` was asked for
    (``explain=None``, the automatic default, becomes False; True and False stay). The
    reasons someone will read are asked afterwards (:mod:`judge.systems._reasons`)."""
    return config if config.explain is not None else replace(config, explain=False)


def _requests(backend: Backend) -> int:
    stats = getattr(backend, "stats", None)
    return int(getattr(stats, "requests", 0) or 0) if stats is not None else 0


def drop_stale_records(output: Path, lines: Sequence[Mapping[str, Any]]) -> int:
    """Remove from an existing ``pool.judged.jsonl`` the queries whose pool changed (another
    system or depth: other passages) or left the pool, so that the engine judges them
    again (their unchanged pairs come from the verdict cache). Returns how many."""
    if not output.exists():
        return 0
    wanted = {
        str(line["id"]): (line["query"], [p["id"] for p in line["retrieval_context"]]) for line in lines
    }
    records = recover_output(output)
    kept = [
        r
        for r in records
        if str(r.get("id")) in wanted and wanted[str(r["id"])] == (r.get("query"), list(r.get("docnos", [])))
    ]
    if len(kept) != len(records):
        atomic_write_lines(output, kept)
    return len(records) - len(kept)


def existing_mode(output: Path) -> str | None:
    """The mode of the verdicts already in ``pool.judged.jsonl`` (None: none yet)."""
    if not output.exists():
        return None
    records = recover_output(output)
    return str(records[0]["mode"]) if records else None


async def judge_pool(
    pool_input: Path,
    pool_output: Path,
    lines: Sequence[Mapping[str, Any]],
    backend: Backend,
    config: JudgeConfig,
    *,
    store: VerdictStore | None,
    run: PoolRun,
) -> PoolVerdicts:
    """Write ``pool_input`` and judge it into ``pool_output`` with the batch engine.

    The one coupling of ``judge.systems`` to ``judge.batch``: everything ``judge score``
    does for a dataset (cache, resume, faults, progress, summary) happens here. Verdicts
    first: without ``explain`` set, no reasons (:func:`verdicts_first`).
    """
    config = verdicts_first(config)
    text = "".join(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in lines)
    atomic_write_text(pool_input, text)
    drop_stale_records(pool_output, lines)
    from judge.batch import executor_for

    own = executor_for(run.spec, backend, run.ship) if run.executor is None and lines else None
    executor = run.executor or own
    counted: Any = executor if executor is not None and hasattr(executor, "stats") else backend
    before = _requests(counted)
    summary: dict[str, Any] | None = None
    try:
        if lines:
            summary = await _judge_lines(pool_input, pool_output, backend, config, store, run, executor)
        else:
            atomic_write_lines(pool_output, [])
    finally:
        if own is not None:
            await own.aclose()
    calls = _requests(counted) - before
    return read_pool_verdicts(pool_output, calls=calls, summary=summary)


async def _judge_lines(
    pool_input: Path,
    pool_output: Path,
    backend: Backend,
    config: JudgeConfig,
    store: VerdictStore | None,
    run: PoolRun,
    executor: Any,
) -> dict[str, Any]:
    from judge.batch import BatchOptions, retry_unjudged, score_dataset

    options = BatchOptions(
        concurrency=run.concurrency if run.concurrency is not None else run.spec.concurrency_for(backend),
        window=run.spec.window,
        progress=run.progress,  # type: ignore[arg-type]
        command=run.command,
        fsync=run.fsync,
        listwise=run.listwise,
        listwise_template=run.listwise_template,
        max_passage_chars=run.max_passage_chars,  # the systems' texts are already cut to it
        settings=dict(run.settings),
        executor=executor,
        examples=run.examples,
        labels=run.adapt,
        adapt=run.adapt is not None,
        adapt_features=run.adapt_features,
    )
    outcome = await score_dataset(pool_input, pool_output, backend, config, store=store, options=options)
    summary = outcome.summary
    if run.retry_unjudged and outcome.summary.get("unjudged"):
        again = await retry_unjudged(
            pool_output, backend, config, store=store, options=replace(options, listwise=False)
        )
        summary = again.summary
    return summary


def read_pool_verdicts(
    pool_output: Path, *, calls: int = 0, summary: dict[str, Any] | None = None
) -> PoolVerdicts:
    """The verdicts of ``pool.judged.jsonl`` by query id and docno."""
    verdicts: dict[str, dict[str, PassageVerdict]] = {}
    mode: str | None = None
    for record in recover_output(pool_output):
        mode = str(record.get("mode", mode))
        by_docno = verdicts.setdefault(str(record["id"]), {})
        for docno, raw in zip(record["docnos"], record["verdicts"], strict=True):
            by_docno[str(docno)] = PassageVerdict.model_validate(raw, strict=False)
    return PoolVerdicts(verdicts=verdicts, mode=mode, calls=calls, summary=summary)


def check_pool_complete(pool: Pool, verdicts: PoolVerdicts) -> None:
    """Every pair sent to the judge has a verdict (judged or unjudged) in the output."""
    for q in pool.queries:
        have = verdicts.verdicts.get(q.qid, {})
        missing = [d for d in q.to_judge if d not in have]
        if missing:
            raise InputError(
                f"query {q.qid!r}: {len(missing)} pooled passage(s) have no verdict in the judged pool",
                field="pool",
            )
