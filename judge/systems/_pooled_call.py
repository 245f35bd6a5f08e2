"""The keywords :func:`judge.compare_systems` and :func:`judge.experiment` share, and the one
builder that turns them (or the command line's flags, :mod:`judge.cli`) into
:class:`SystemsOptions`, a run spec, a backend and a verdict cache.

Adding a setting to both entry points: a key of :class:`PooledKeywords`, a line in
:func:`systems_options_of` (or :func:`pooled_call`), and the flag in the command line's
shared group (``judge/cli/_pooled_flags.py``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from judge.backends import Backend
from judge.batch import SampleLabelOptions
from judge.io import InputError, read_sample_labels
from judge.judging import JudgeConfig, Mode, VerdictStore
from judge.systems._expected import DEFAULT_TEST_FIGURE, check_test_figure
from judge.systems._options import SystemsOptions
from judge.systems._pool import PoolRun

__all__ = ["POOLED_KEYWORDS", "PooledCall", "PooledKeywords", "pooled_call", "store_of", "systems_options_of"]


class PooledKeywords(TypedDict, total=False):
    """The keywords of :func:`judge.compare_systems` and :func:`judge.experiment`.

    ``backend``: a spec string, a Backend or a model (None: from the environment);
    ``mode``; ``config`` (a :class:`~judge.judging.JudgeConfig`); ``qrels``: human labels
    filling the pool first, put on the judge's scale by ``qrels_level`` (graded labels with
    a binary judge: grade >= L is relevant; default an explicit ``relevance_level``, else
    refused) or ``qrels_yes_grade`` (0/1 labels with a graded judge: the grade a 1 stands
    for); ``qrels`` may be a Quepid/SRW judgment list (CSV, SRW or RRE JSON; query texts
    matched to the run's queries), its ratings' scale ``qrels_scale`` (``quepid-0-3``,
    ``quepid-1-10``, ``srw-0-1``, ``graded-0-3``, ``binary``; default: detected where
    unambiguous); ``depth``: pool each system's top N; ``measures``; ``relevance_level``; ``cache``
    (True: the default verdict cache; a path; a VerdictStore; False: none); ``seed``,
    ``resamples``, ``confidence``: the tests; ``stability_resamples``: order_stability
    redraws (0 skips); ``strict``; ``concurrency``; ``retry_unjudged``; ``base_url``;
    ``until_decided`` (judge only until every decision holds with ``confidence``;
    ``budget``: most pairs judged, ``batch``: pairs per round, ``draws``: Monte Carlo
    draws); ``cascade="CHEAP,EXPENSIVE"`` with ``margin`` (the cheap judge first, the
    expensive one where the cheap P(yes) is within ``margin`` of the threshold);
    ``sample_labels``: a file of randomly drawn human labels (``--sample-labels``), read at
    ``sample_level`` (grade >= L is relevant; refused without ``sample_labels``): each
    system's prediction-powered figures; ``allow_unlabelled``: intervals though drawn pairs
    the file names as left unlabelled miss their labels (a conservative bound over them).
    ``examples=N`` (0-16): each pooled passage is shown up to N labelled passages of its
    query from ``qrels`` as worked examples, ``examples_from="nearest"``: also of the most
    similar labelled queries (the run spec's one ``examples`` field). ``adapt=True``: the
    pool's human labels teach the decision rule that decides the other pooled pairs where it
    beats the judge alone on held-out queries (the labelled pairs are then judged too).
    ``test_figure``: what the comparisons rank and test, ``"expected"`` (default: the
    judge's probability-weighted figures; thresholded when it gives no P(yes)) or
    ``"thresholded"``; the report's ``conventions.tested_figure`` says which was used."""

    backend: Any
    mode: Mode | None
    config: JudgeConfig | None
    qrels: str | os.PathLike[str] | None
    depth: int | None
    measures: Sequence[str] | None
    relevance_level: int | None
    qrels_level: int | None
    qrels_yes_grade: int | None
    qrels_scale: str | None
    cache: VerdictStore | str | os.PathLike[str] | bool
    seed: int
    resamples: int
    stability_resamples: int
    confidence: float
    strict: bool
    concurrency: int | None
    retry_unjudged: bool
    base_url: str | None
    until_decided: bool
    budget: int | None
    batch: int | None
    draws: int
    cascade: str | None
    margin: float
    sample_labels: str | os.PathLike[str] | None
    sample_level: int
    allow_unlabelled: bool
    examples: int | None
    examples_from: str | None
    adapt: bool | None
    test_figure: str


POOLED_KEYWORDS = frozenset(PooledKeywords.__annotations__)


def check_keywords(kw: Mapping[str, Any], name: str) -> None:
    """A keyword :class:`PooledKeywords` does not know is a TypeError, as in any call."""
    unknown = sorted(set(kw) - POOLED_KEYWORDS)
    if unknown:
        raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}")


def systems_options_of(
    kw: Mapping[str, Any], *, stability_resamples: int = 1000, **extra: Any
) -> SystemsOptions:
    """The :class:`SystemsOptions` of the shared keywords (``stability_resamples``: the
    default when ``kw`` has none; ``extra``: fields only one caller sets, e.g. the command
    line's ``labels`` or ``top_queries``). Checked: a bad value names its flag."""
    measures = kw.get("measures")
    qrels = kw.get("qrels")
    fields: dict[str, Any] = {
        "depth": kw.get("depth"),
        "measures": tuple(measures) if measures else None,
        "relevance_level": kw.get("relevance_level"),
        "qrels": Path(qrels) if qrels is not None else None,
        "qrels_level": kw.get("qrels_level"),
        "qrels_yes_grade": kw.get("qrels_yes_grade"),
        "qrels_scale": kw.get("qrels_scale"),
        "seed": int(kw.get("seed", 0)),
        "resamples": int(kw.get("resamples", 10_000)),
        "stability_resamples": int(kw.get("stability_resamples", stability_resamples)),
        "confidence": float(kw.get("confidence", 0.95)),
        "strict": bool(kw.get("strict", False)),
        "until_decided": bool(kw.get("until_decided", False)),
        "budget": kw.get("budget"),
        "adaptive_batch": kw.get("batch"),
        "adaptive_draws": int(kw.get("draws", 200)),
        "test_figure": check_test_figure(kw.get("test_figure", DEFAULT_TEST_FIGURE), field="test_figure"),
    }
    if kw.get("sample_labels") is not None:
        fields["sample_labels"] = SampleLabelOptions(
            read_sample_labels(kw["sample_labels"]),
            level=int(kw.get("sample_level", 1)),
            confidence=float(kw.get("confidence", 0.95)),
            allow_unlabelled=bool(kw.get("allow_unlabelled", False)),
        )
    else:
        for name in ("sample_level", "allow_unlabelled"):
            if kw.get(name) not in (None, False):
                raise InputError(f"{name} is only used with sample_labels", field=name)
    options = SystemsOptions(**(fields | extra))
    options.check()
    return options


def store_of(cache: VerdictStore | str | os.PathLike[str] | bool | None) -> tuple[VerdictStore | None, bool]:
    """``(store, ours)``: True -> the default cache file, a path -> that file, False -> none."""
    from judge.store import SQLiteVerdictStore

    if cache is True:
        return SQLiteVerdictStore(None), True
    if cache is False or cache is None:
        return None, False
    if isinstance(cache, str | os.PathLike):
        return SQLiteVerdictStore(Path(cache)), True
    return cache, False


@dataclass(frozen=True)
class PooledCall:
    """What a pooled entry point runs with: the resilient backend, the judging config, the
    verdict cache (or None), the options and how the pool is judged."""

    backend: Backend
    config: JudgeConfig
    store: VerdictStore | None
    options: SystemsOptions
    run: PoolRun


@asynccontextmanager
async def pooled_call(
    kw: Mapping[str, Any],
    *,
    name: str,
    stability_resamples: int = 1000,
    command: str = "judge compare-systems",
) -> AsyncIterator[PooledCall]:
    """Open what ``kw`` (:class:`PooledKeywords`) asks for; close what was opened here (a
    backend given as an object and a store given as one stay open)."""
    from judge.backends import make_backend, resolve_cascade
    from judge.batch import run_spec_from_kwargs

    check_keywords(kw, name)
    options = systems_options_of(kw, stability_resamples=stability_resamples)
    backend = kw.get("backend")
    cascade = kw.get("cascade")
    base_url = kw.get("base_url")
    if cascade is not None:
        if backend is not None:
            raise InputError("give either backend or cascade, not both", field="cascade")
        backend = resolve_cascade(cascade, margin=float(kw.get("margin", 0.1)), base_url=base_url)
    spec = run_spec_from_kwargs(
        config=kw.get("config"),
        mode=kw.get("mode"),
        concurrency=kw.get("concurrency"),
        examples=kw.get("examples"),
        examples_from=kw.get("examples_from"),
        adapt=kw.get("adapt"),
    )
    resolved = make_backend(backend, policy=spec.policy, base_url=base_url)
    store, own_store = store_of(kw.get("cache", True))
    run = PoolRun(spec=spec, retry_unjudged=bool(kw.get("retry_unjudged", False)), command=command)
    try:
        yield PooledCall(resolved, spec.config, store, options, run)
    finally:
        if own_store and store is not None:
            await store.aclose()  # type: ignore[attr-defined]
        if backend is None or isinstance(backend, str) or cascade is not None:
            await resolved.aclose()
