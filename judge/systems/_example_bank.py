"""Worked examples for a run's passages (``--examples``): the bank of labelled passages a
comparison holds the texts of, and the ``nearest`` mode's neighbours.

The choice of examples per passage is judging's (:class:`judge.judging.ExampleBank`); what
needs a similarity search is here, a floor above :mod:`judge.search` and the batch engine:
:func:`with_neighbours` ranks the labelled queries against every query of the run with the
embedded engine's BM25 (:func:`judge.search.build_index` over the labelled queries' texts,
default knobs) and hands the result down as data (the bank's ``neighbours``).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

from judge.io import InputError
from judge.judging import (
    NEAREST_QUERIES,
    ExampleBank,
    ExampleSpec,
    JudgeConfig,
    bank_of,
    check_examples_config,
)
from judge.metrics import ScaleMapping
from judge.search import EMBEDDED_PARAMS, BM25Index, build_index
from judge.systems._inputs import Inputs
from judge.systems._options import SystemsOptions
from judge.systems._pool import Pool, PoolRun

__all__ = ["check_pool_examples", "pool_example_bank", "with_neighbours"]


def with_neighbours(bank: ExampleBank, *, k: int | None = None) -> ExampleBank:
    """``bank`` with, for every query of the run (``bank.queries``), the ``k`` labelled
    queries most similar to it by BM25 (itself left out; queries sharing no token with it
    are never neighbours), best first; ``k`` default: :data:`NEAREST_QUERIES`, or three
    per example asked for when more (one-pair queries fill a balanced set). Unchanged
    outside ``nearest`` mode or without labelled queries."""
    if bank.spec.source != "nearest":
        return bank
    if k is None:
        k = max(NEAREST_QUERIES, 3 * bank.spec.n)
    labelled = [q for q, examples in bank.labelled.items() if examples and q in bank.queries]
    if not labelled:
        return bank
    params = EMBEDDED_PARAMS
    knobs = (str(params["method"]), float(params["k1"]), float(params["b"]), float(params["delta"]))  # type: ignore[arg-type]
    neighbours: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="judge-examples-") as tmp:
        docs = Path(tmp) / "labelled-queries.jsonl"
        with open(docs, "w", encoding="utf-8") as fh:
            for qid in labelled:
                fh.write(json.dumps({"id": qid, "text": bank.queries[qid]}, ensure_ascii=False) + "\n")
        build_index(docs, Path(tmp) / "index")
        index = BM25Index(Path(tmp) / "index")
        for qid, text in bank.queries.items():
            hits = index.search(text, k + 1, *knobs)
            neighbours[qid] = [index.ids[i] for i, _ in hits if index.ids[i] != qid][:k]
    return replace(bank, neighbours=neighbours)


def pool_example_bank(
    spec: ExampleSpec,
    pool: Pool,
    inputs: Inputs,
    config: JudgeConfig,
    mapping: ScaleMapping | None = None,
) -> ExampleBank | None:
    """The labelled passages of a comparison's pool (human labels already on the pool's
    scale, which is the judge's: ``--qrels`` and ``--labels``), their texts from the
    systems' passages (a label whose passage no system returned is skipped), with
    ``nearest`` neighbours; ``mapping``: how the labels were put on that scale (echoed).
    None without ``--examples``."""
    if not spec.active:
        return None
    labelled = {q.qid: dict(q.human) for q in pool.queries}
    queries = {q.qid: q.query for q in pool.queries}
    texts = {qid: {d: p.text for d, p in inputs.passages.get(qid, {}).items()} for qid in queries}
    yes_at = config.grade_threshold if config.mode == "graded" else 1
    echo = {} if mapping is None else {str(mapping.source): mapping.as_dict()}
    bank = replace(bank_of(spec, labelled, queries, texts, yes_at=yes_at, mapping=echo), pooled=True)
    return with_neighbours(bank)


def check_pool_examples(run: PoolRun, options: SystemsOptions, config: JudgeConfig) -> None:
    """``--examples`` on a comparison, before anything is read: human labels to take them
    from (``--qrels`` or ``--labels``), pointwise judging and templates with the slot
    (exit 2 naming the flag or the template)."""
    spec = run.spec.examples
    if not spec.active:
        return
    if options.qrels is None and options.labels is None:
        raise InputError(
            "needs human labels to take the examples from: --qrels FILE (or --labels)", field="--examples"
        )
    check_examples_config(config, spec, listwise=run.listwise)
