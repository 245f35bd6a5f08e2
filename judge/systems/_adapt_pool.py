"""``--adapt`` on a comparison or an experiment: the pool's human labels teach the rule.

A pool normally never sends a labelled pair to the judge. Under ``--adapt`` the labelled
pooled pairs are judged too (one call each; the summary's calls count them), so that the
batch engine (:func:`judge.batch.adapt_records`, through the pool's ``judge score`` run) can
fit the decision rule on their P(yes) and decide every unlabelled pooled pair with it where
its leave-one-query-out κ beats the judge alone's. The labelled pairs keep their labels, as
without ``--adapt``; the report's conventions carry the pool run's ``adaptation`` block.

A comparison's rule reads the judge's log-odds only (raw and centred on its query), never the
encoder's columns ``judge score --adapt`` adds: measured on a BM25 sweep of TREC DL 2019
(docs/agreement.md, "The order of configurations"), the encoder's query similarity made the
pooled verdicts agree better with people and the order of nine configurations much worse. What
a comparison is for is the order, so the report and the command say what was measured
(:data:`ADAPT_ORDER_NOTE`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from judge.io import InputError
from judge.judging import JudgeConfig
from judge.store import Label, LabelSet

if TYPE_CHECKING:
    from judge.systems._options import SystemsOptions
    from judge.systems._pool import Pool, PoolRun

__all__ = ["ADAPT_ORDER_NOTE", "check_pool_adapt", "pool_adapt_labels"]

#: What ``--adapt`` was measured to do to the order of configurations (the report's
#: ``conventions.adaptation.order`` and the command's warning).
ADAPT_ORDER_NOTE = (
    "--adapt on a comparison was measured to make the pooled verdicts agree better with people, "
    "not to order the configurations better: on a 9-configuration BM25 sweep (20 queries, 4 labels "
    "per query, 3 seeds) Kendall's tau against the labels' order went 0.67 -> 0.63 on TREC DL 2019 "
    "and 0.89 -> 0.91 on RGB with the labels alone as the baseline; with the encoder's query similarity "
    "in the rule it fell to 0.26 on DL 2019, so a comparison's rule reads the judge's log-odds only "
    "(docs/agreement.md, 'The order of configurations')"
)


def check_pool_adapt(run: PoolRun, options: SystemsOptions, config: JudgeConfig) -> None:
    """``--adapt`` on a comparison, before anything is read (exit 2 naming ``--adapt``):
    human labels to learn from, binary probability-mode pointwise judging, not with
    ``--examples`` or ``--until-decided``."""
    if not run.spec.adapt:
        return
    if options.qrels is None and options.labels is None:
        raise InputError("needs human labels to learn from: --qrels FILE (or --labels)", field="--adapt")
    if config.mode != "binary":
        raise InputError("adapts binary verdicts only; drop --mode graded", field="--adapt")
    if config.probability is False or run.listwise:
        raise InputError("needs each passage's P(yes): pointwise, probability mode", field="--adapt")
    if run.spec.examples.active:
        raise InputError("cannot be used with --examples", field="--adapt")
    if options.until_decided:
        raise InputError("cannot be used with --until-decided", field="--adapt")


def pool_adapt_labels(pool: Pool) -> LabelSet:
    """The labels of the pooled pairs (already on the pool's binary scale), to learn from."""
    return LabelSet(
        [
            Label(qid=q.qid, docno=d, label=int(q.human[d]), reviewer="qrels", scale="binary")
            for q in pool.queries
            for d in q.pooled
            if d in q.human
        ],
        source="the pool's human labels",
    )
