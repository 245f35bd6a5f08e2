"""Answer metrics: a generated answer against its reference answers (``judge gen-eval``).

Every metric takes one ``prediction`` and a non-empty list of ``golden_answers`` and returns
a float in [0, 1]; where several gold answers are given the best one counts (max over gold):

* ``em``: 1 if the prediction's tokens equal some gold answer's tokens (after normalisation);
* ``acc``: 1 if some gold answer is contained in the prediction (substring of the
  normalised text, as UltraRAG's ``acc``; a prediction normalising to nothing scores 0);
* ``coverem``: 1 if every token of some gold answer occurs among the prediction's tokens
  (order and repetition ignored);
* ``f1``: token F1 (SQuAD's bag-of-tokens overlap), max over gold answers;
* ``rouge-1``, ``rouge-2``, ``rouge-l``: the F-measure of the ``rouge-score`` library on the
  normalised texts, max over gold answers.

**Normalisation.** ``squad`` (default): Unicode NFKC (full-width forms become ASCII), lower
case, punctuation removed (ASCII punctuation as SQuAD, plus every Unicode punctuation
character, so ``，。！`` go too), the English articles ``a an the`` removed, whitespace
collapsed. ``ultrarag``: UltraRAG's evaluation server's variant, unchanged: ``True``/``False``
(the whole answer) become ``yes``/``no``, ``_`` becomes a space, lower case, ASCII
punctuation and ``‘ ’ ´ ``` become a space (not deleted: ``e-mail`` is two tokens), articles
removed, whitespace collapsed.

**Tokens (mixed text).** The normalised text is split on whitespace, then every CJK
character (Han ideographs, Hiragana, Katakana; see :data:`CJK_RANGES`) becomes a token of its
own; the runs of other characters between them stay one token each. ``iPhone手机`` gives
``iphone 手 机``. On text without CJK characters this is exactly SQuAD's whitespace split.
Hangul is left as words: Korean is written with spaces between words.

**ROUGE tokens.** rouge-score's own tokenizer keeps only ``[a-z0-9]`` and so drops every CJK
character. :class:`CjkRougeTokenizer` keeps them: lower case, each CJK character one token,
runs of other letters and digits one token, and the ASCII ones (the only ones rouge-score's
tokenizer keeps) Porter-stemmed when longer than 3 characters, exactly as rouge-score
with ``use_stemmer=True`` (UltraRAG's setting). On ASCII text the tokens, and so the
scores, are identical to rouge-score's default tokenizer.

**Corner cases.** An empty prediction against an empty gold answer (both normalise to
nothing, e.g. ``"The."``) has em 1 and f1 1 (SQuAD v2's rule), acc 0, coverem 0 and ROUGE 0
(rouge-score scores empty texts 0). A gold answer that normalises to nothing is never
"contained" in a prediction (UltraRAG would count it contained, vacuously).
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal, get_args

__all__ = [
    "ANSWER_METRICS",
    "CJK_RANGES",
    "NORMALIZATIONS",
    "CjkRougeTokenizer",
    "Normalization",
    "accuracy",
    "answer_scores",
    "answer_tokens",
    "cover_exact_match",
    "exact_match",
    "gen_eval",
    "normalize_answer",
    "rouge_scores",
    "token_f1",
]

Normalization = Literal["squad", "ultrarag"]
NORMALIZATIONS: tuple[Normalization, ...] = get_args(Normalization)
ANSWER_METRICS: tuple[str, ...] = ("em", "acc", "coverem", "f1", "rouge-1", "rouge-2", "rouge-l")

CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x20000, 0x2FA1F),  # CJK Unified Ideographs Extensions B-F and Compatibility Supplement
)
_CJK_CLASS = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in CJK_RANGES)
_TOKEN_RE = re.compile(f"[{_CJK_CLASS}]|[^\\s{_CJK_CLASS}]+")
_ROUGE_TOKEN_RE = re.compile(f"[{_CJK_CLASS}]|[^\\W_{_CJK_CLASS}]+")
_ASCII_ALNUM_RE = re.compile(r"^[a-z0-9]+$")
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_SQUAD_PUNCT = frozenset(string.punctuation)
_ULTRARAG_PUNCT = frozenset(string.punctuation + "‘’´`")


def _is_punct(ch: str) -> bool:
    return ch in _SQUAD_PUNCT or unicodedata.category(ch).startswith("P")


def normalize_answer(text: str, normalization: Normalization = "squad") -> str:
    """The normalised form of an answer (see the module docstring for both variants)."""
    if normalization == "squad":
        text = unicodedata.normalize("NFKC", text).lower()
        text = "".join(ch for ch in text if not _is_punct(ch))
    elif normalization == "ultrarag":
        text = {"True": "yes", "False": "no"}.get(text, text)
        text = text.replace("_", " ").lower()
        text = "".join(" " if ch in _ULTRARAG_PUNCT else ch for ch in text)
    else:
        raise ValueError(f"unknown normalization {normalization!r}; expected one of {NORMALIZATIONS}")
    return " ".join(_ARTICLES_RE.sub(" ", text).split())


def answer_tokens(text: str, normalization: Normalization = "squad") -> list[str]:
    """Tokens of the normalised text: whitespace-separated words, each CJK character alone."""
    return _TOKEN_RE.findall(normalize_answer(text, normalization))


def _golds(golden_answers: Sequence[str]) -> Sequence[str]:
    if isinstance(golden_answers, str):
        raise TypeError("golden_answers must be a list of strings, not one string")
    if not golden_answers:
        raise ValueError("golden_answers must not be empty")
    return golden_answers


def exact_match(
    prediction: str, golden_answers: Sequence[str], *, normalization: Normalization = "squad"
) -> float:
    """1.0 if the prediction's tokens equal some gold answer's tokens, else 0.0."""
    pred = answer_tokens(prediction, normalization)
    return 1.0 if any(answer_tokens(g, normalization) == pred for g in _golds(golden_answers)) else 0.0


def accuracy(
    prediction: str, golden_answers: Sequence[str], *, normalization: Normalization = "squad"
) -> float:
    """1.0 if some (non-empty) normalised gold answer is a substring of the normalised prediction."""
    pred = " ".join(answer_tokens(prediction, normalization))
    golds = (" ".join(answer_tokens(g, normalization)) for g in _golds(golden_answers))
    return 1.0 if pred and any(g and g in pred for g in golds) else 0.0


def cover_exact_match(
    prediction: str, golden_answers: Sequence[str], *, normalization: Normalization = "squad"
) -> float:
    """1.0 if every token of some (non-empty) gold answer occurs among the prediction's tokens."""
    pred = set(answer_tokens(prediction, normalization))
    for g in _golds(golden_answers):
        tokens = answer_tokens(g, normalization)
        if tokens and all(t in pred for t in tokens):
            return 1.0
    return 0.0


def _f1(pred: Sequence[str], gold: Sequence[str]) -> float:
    if not pred or not gold:
        return 1.0 if not pred and not gold else 0.0
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(
    prediction: str, golden_answers: Sequence[str], *, normalization: Normalization = "squad"
) -> float:
    """SQuAD token F1 (bag-of-tokens overlap), the max over gold answers."""
    pred = answer_tokens(prediction, normalization)
    return max(_f1(pred, answer_tokens(g, normalization)) for g in _golds(golden_answers))


class CjkRougeTokenizer:
    """A rouge-score tokenizer that keeps CJK characters (one token each).

    ASCII ``[a-z0-9]`` runs are tokenised and stemmed exactly as rouge-score's default
    tokenizer does (Porter stemmer on tokens longer than 3 characters); other letter or
    digit runs (accented Latin, Cyrillic, Hangul ...) are kept whole and unstemmed, where
    rouge-score would drop them.
    """

    def __init__(self, use_stemmer: bool = True) -> None:
        from nltk.stem import porter

        self._stemmer = porter.PorterStemmer() if use_stemmer else None

    def tokenize(self, text: str) -> list[str]:
        tokens = _ROUGE_TOKEN_RE.findall(text.lower())
        stemmer = self._stemmer
        if stemmer is None:
            return tokens
        return [stemmer.stem(t) if len(t) > 3 and _ASCII_ALNUM_RE.match(t) else t for t in tokens]


@lru_cache(maxsize=1)
def _rouge_scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], tokenizer=CjkRougeTokenizer(True))


def rouge_scores(
    prediction: str, golden_answers: Sequence[str], *, normalization: Normalization = "squad"
) -> dict[str, float]:
    """``rouge-1``, ``rouge-2``, ``rouge-l`` F-measures (rouge-score) on the normalised texts,
    each the max over gold answers."""
    scorer = _rouge_scorer()
    pred = normalize_answer(prediction, normalization)
    best = {"rouge-1": 0.0, "rouge-2": 0.0, "rouge-l": 0.0}
    for g in _golds(golden_answers):
        scores = scorer.score(normalize_answer(g, normalization), pred)
        for ours, theirs in (("rouge-1", "rouge1"), ("rouge-2", "rouge2"), ("rouge-l", "rougeL")):
            best[ours] = max(best[ours], float(scores[theirs].fmeasure))
    return best


def answer_scores(
    prediction: str, golden_answers: Sequence[str], *, normalization: Normalization = "squad"
) -> dict[str, float]:
    """Every metric of :data:`ANSWER_METRICS` for one prediction, in that order."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"unknown normalization {normalization!r}; expected one of {NORMALIZATIONS}")
    kw: dict[str, Any] = {"normalization": normalization}
    return {
        "em": exact_match(prediction, golden_answers, **kw),
        "acc": accuracy(prediction, golden_answers, **kw),
        "coverem": cover_exact_match(prediction, golden_answers, **kw),
        "f1": token_f1(prediction, golden_answers, **kw),
        **rouge_scores(prediction, golden_answers, **kw),
    }


def gen_eval(
    predictions: Sequence[str],
    golden_answers: Sequence[Sequence[str]],
    *,
    normalization: Normalization = "squad",
    ids: Sequence[object] | None = None,
) -> dict[str, Any]:
    """Answer metrics of many items: ``{"all": {metric: mean}, "per_item": [...], "n": ...}``.

    ``per_item[i]`` holds item i's scores (and ``id`` when ``ids`` is given); ``all`` the mean
    of each metric over the items (``None`` for no items), ``conventions`` how they were computed.
    """
    if isinstance(predictions, str):
        raise TypeError("predictions must be a list of strings, not one string")
    if len(predictions) != len(golden_answers):
        raise ValueError(f"{len(predictions)} predictions but {len(golden_answers)} golden_answers lists")
    if ids is not None and len(ids) != len(predictions):
        raise ValueError(f"{len(ids)} ids for {len(predictions)} predictions")
    per_item: list[dict[str, Any]] = []
    for i, (pred, golds) in enumerate(zip(predictions, golden_answers, strict=True)):
        item: dict[str, Any] = {} if ids is None else {"id": ids[i]}
        item.update(answer_scores(pred, golds, normalization=normalization))
        per_item.append(item)
    return {
        "all": mean_answer_scores(per_item),
        "n": len(per_item),
        "normalization": normalization,
        "conventions": answer_conventions(normalization),
        "per_item": per_item,
    }


def mean_answer_scores(per_item: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Mean of each metric over the items (``None`` when there are none)."""
    if not per_item:
        return dict.fromkeys(ANSWER_METRICS)
    return {m: math.fsum(float(x[m]) for x in per_item) / len(per_item) for m in ANSWER_METRICS}


def answer_conventions(normalization: Normalization) -> dict[str, str]:
    """How the answer metrics were computed, for echoing in outputs."""
    norm = {
        "squad": "SQuAD: NFKC, lower case, punctuation (ASCII and Unicode) removed, articles a/an/the "
        "removed, whitespace collapsed",
        "ultrarag": "UltraRAG: True/False -> yes/no, '_' -> space, lower case, ASCII punctuation and "
        "quotes -> space, articles removed, whitespace collapsed",
    }[normalization]
    return {
        "normalization": norm,
        "tokens": "whitespace-split normalised text; each CJK character (Han, kana) is a token",
        "multiple_gold": "max over golden_answers",
        "em": "token sequences equal",
        "acc": "normalised gold answer is a substring of the normalised prediction",
        "coverem": "all tokens of a gold answer occur in the prediction",
        "f1": "SQuAD bag-of-tokens F1",
        "rouge": "rouge-score F-measure, Porter stemming, CJK characters kept as tokens",
        "mean": "over items",
    }
