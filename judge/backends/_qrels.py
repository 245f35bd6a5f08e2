"""A judge that answers from known labels: ``--backend qrels:FILE[:level]``.

Every command that takes a backend can run with a perfect judge: the labels of a TREC
qrels file (``qid iter docno grade``). It is the test oracle of adaptive judging and shows
users what a full human pool says.

The request's ``meta`` (:attr:`~judge.backends.ChatRequest.meta`) names what is judged:
``passage_id`` (the docno: in pools and datasets a passage's ``id``) and, where known,
``query_id``. Ids are compared as TREC tokens (whitespace runs become ``_``). Without a
``query_id`` a docno labelled under exactly one query is answered from that label; a docno
labelled under several queries is ambiguous and left unjudged.

Answers:

* binary mode: ``yes`` when the grade is >= ``level`` (default 1), else ``no``;
* graded mode (the request's JSON schema asks for a ``grade``, or the candidates are
  digits): the grade itself, clamped to 0..3 (a negative grade is 0);
* probability mode (``candidates``): probability 1 on the label's answer, 0 elsewhere, so
  P(yes) is 1 or 0;
* no label (or a request without ``passage_id``, e.g. a listwise call): a reply without a
  verdict saying so, which the judging core records as ``unjudged`` with that text as
  ``raw`` (in probability mode at once, in generation mode after its re-asks).

``params()`` holds the file's sha256 and the level, so verdicts cached with one set of
labels are never served for another; the fingerprint names the file, its hash and the
level. Calls cost nothing (``free``) and need no lock (``max_concurrency=None``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from judge.backends._base import ChatRequest, Completion, ConfigurationError, Usage
from judge.backends._fake import _is_graded

__all__ = ["QrelsBackend", "parse_qrels_spec"]

_MAX_GRADE = 3


def _token(value: str) -> str:
    """An id as one TREC token (how pools and runs write it)."""
    return "_".join(value.split()) or "_"


def parse_qrels_spec(target: str) -> tuple[Path, int]:
    """``FILE[:level]`` (the part after ``qrels:``) -> (path, level). A trailing ``:N`` of
    digits is the level (default 1)."""
    target = target.strip()
    path, sep, tail = target.rpartition(":")
    if sep and tail.strip().isdigit() and path:
        return Path(path), int(tail)
    if not target:
        raise ConfigurationError("qrels backend needs a file: qrels:FILE[:level]", field="backend")
    return Path(target), 1


class QrelsBackend:
    """Answers from the labels of a qrels file (see the module docstring)."""

    supports_probabilities = True
    prefers_probabilities = False
    free = True
    max_concurrency: int | None = None

    def __init__(self, path: str | Path, level: int = 1) -> None:
        from judge.io import InputError, read_qrels

        self.path = Path(path)
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise ConfigurationError(f"qrels level must be an integer >= 0, not {level!r}", field="backend")
        if not self.path.is_file():
            raise ConfigurationError(f"qrels file {str(self.path)!r} does not exist", field="backend")
        try:
            qrels = read_qrels(self.path)
        except InputError as exc:
            raise ConfigurationError(
                f"cannot read qrels {str(self.path)!r}: {exc}", field="backend"
            ) from None
        self.level = level
        self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()
        self.labels: dict[str, dict[str, int]] = {}
        self._owners: dict[str, set[str]] = {}
        for qid, docs in qrels.to_dict().items():
            q = _token(qid)
            for docno, grade in docs.items():
                d = _token(docno)
                self.labels.setdefault(q, {})[d] = int(grade)
                self._owners.setdefault(d, set()).add(q)
        self.name = f"qrels:{self.path.name}" + (f":{level}" if level != 1 else "")
        self.model = "qrels"
        self.calls = 0
        self.unlabelled = 0

    @property
    def fingerprint(self) -> str:
        return f"qrels:{self.path.name}|sha256={self.sha256[:16]}|level={self.level}"

    def params(self) -> dict[str, Any]:
        return {"qrels_sha256": self.sha256, "level": self.level}

    def label(self, query_id: str | None, passage_id: str) -> int | None:
        """The grade of (query, passage), or None when unknown or ambiguous."""
        d = _token(passage_id)
        if query_id is not None:
            return self.labels.get(_token(query_id), {}).get(d)
        owners = self._owners.get(d, set())
        if len(owners) != 1:
            return None
        return self.labels[next(iter(owners))][d]

    async def complete(self, request: ChatRequest) -> Completion:
        self.calls += 1
        meta: Mapping[str, str] = request.meta or {}
        passage_id = meta.get("passage_id")
        grade = None if passage_id is None else self.label(meta.get("query_id"), passage_id)
        graded = _is_graded(request, "", "auto")
        if grade is None:
            self.unlabelled += 1
            what = (
                "the request names no passage (listwise judging is not supported)"
                if passage_id is None
                else f"no label for query {meta.get('query_id')!r} passage {passage_id!r}"
            )
            text = f"qrels: {what}"
            probs = dict.fromkeys(request.candidates, 0.0) if request.candidates is not None else None
            return Completion(text=text, model=self.model, token_probs=probs, finish_reason="stop")
        g = min(max(grade, 0), _MAX_GRADE)
        relevant = grade >= self.level
        answer = str(g) if graded else ("yes" if relevant else "no")
        if request.candidates is not None:
            probs = {c: (1.0 if c.strip().lower() == answer else 0.0) for c in request.candidates}
            return Completion(text=answer, model=self.model, token_probs=probs, finish_reason="length")
        reason = f"qrels label {grade}" + ("" if graded else f" (relevant at >= {self.level})")
        payload: dict[str, Any] = (
            {"grade": g, "reason": reason} if graded else {"verdict": answer, "reason": reason}
        )
        text = json.dumps(payload, ensure_ascii=False)
        prefix = request.answer_prefix
        if prefix and text.startswith(prefix):
            text = text[len(prefix) :]
        elif prefix:
            # An explain call prefilled with the answer: only the reason is left to write.
            text = reason + '"}'
        return Completion(text=text, usage=Usage(), model=self.model, finish_reason="stop")

    async def aclose(self) -> None:
        return None
