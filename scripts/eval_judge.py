#!/usr/bin/env python
"""How well does a judge agree with human relevance labels?

Runs a judge (default: the embedded model) over labelled data in ``../shared/data`` on a
fixed, seeded sample per dataset, keeps every raw verdict, and prints agreement tables.

Datasets (relevant = ``grade >= level``):

========  ===============================================  ======  =====
name      source                                           grades  level
========  ===============================================  ======  =====
rgb       RGB Chinese ``zh_refine.json`` (positive/negative)  0/1   1
kuake     KUAKE-QTR dev (query, title)                       0-3     2
qbqtc     QBQTC dev (query, title)                           0-2     2
dl19      TREC DL 2019 passage qrels + passage text + queries 0-3     2
========  ===============================================  ======  =====

Sampling: per dataset, ``--n`` pairs (default 200) balanced over the grades (equal counts
per grade, the remainder to the lowest grades), drawn with ``--seed``; each grade's draw
is split in two halves, ``tune`` and ``test`` (so both halves are balanced). Thresholds and
template choices are tuned on ``tune`` and reported on ``test``. Queries can occur in both
halves (DL19 has only 43 queries).

Commands:

``judge``     judge the sample with each ``--configs`` entry, then print the table;
``report``    print the table from recorded verdicts only (no model needed);
``order``     order effects: query groups judged pointwise in their order and shuffled,
              flip rate of the verdicts (and listwise with ``--listwise``);
``listwise``  listwise mode vs pointwise and vs humans on query groups, calls saved.

A config is ``TEMPLATE[:gen]``: a template id (or ``.toml`` path); its mode (binary or
graded) comes from the template; probability mode unless ``:gen`` (greedy generation).

Raw verdicts go to ``--out`` (default ``runs/eval_judge``) as append-only JSONL: one
record per (dataset, pair id, mode, template hash) — ``verdicts.jsonl`` for pointwise
judgments, ``groups.jsonl`` for listwise/order runs. An interrupted run resumes where it
stopped (records already there are skipped; a torn last line is ignored). Unjudged
verdicts caused by backend errors are retried on the next run.

Intervals: percentile bootstrap over pairs (scipy.stats.bootstrap, paired, 1000
resamples, fixed seed); for tuned thresholds the threshold is fixed from the tune half
and only the test half is resampled.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

import judge.backends
from judge.backends import Backend
from judge.judging import JudgeConfig, Passage, PassageVerdict, judge_passage, load_template
from judge.judging._listwise import judge_listwise
from judge.metrics._agreement import (
    AgreementUndefinedError,
    cohen_kappa,
    roc_auc,
)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
DEFAULT_OUT = REPO / "runs" / "eval_judge"
DEFAULT_BACKEND = "local:qwen2.5-coder-1.5b-q4km"
# The plain baseline, the previous default and the shipped defaults (Chinese template on the
# Chinese datasets, English template on DL19: binary.en.v4 since the rules moved into a shared
# prefix), as in
# docs/agreement.md.
DEFAULT_CONFIGS = (
    "baseline_plain.zh.v1",
    "binary.zh.v1",
    "binary.zh.v2@rgb+kuake+qbqtc|binary.en.v4@dl19",
)
MAX_PASSAGE_CHARS = 1500
BOOTSTRAP_RESAMPLES = 1000


# --------------------------------------------------------------------------- datasets


@dataclass(frozen=True)
class Pair:
    dataset: str
    pair_id: str
    query_id: str
    query: str
    text: str
    grade: int


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    grades: tuple[int, ...]
    level: int
    description: str
    language: str


DATASETS: dict[str, DatasetSpec] = {
    "rgb": DatasetSpec("rgb", (0, 1), 1, "RGB zh_refine (positive=1, negative=0)", "zh"),
    "kuake": DatasetSpec("kuake", (0, 1, 2, 3), 2, "KUAKE-QTR dev (0-3)", "zh"),
    "qbqtc": DatasetSpec("qbqtc", (0, 1, 2), 2, "QBQTC dev (0-2)", "zh"),
    "dl19": DatasetSpec("dl19", (0, 1, 2, 3), 2, "TREC DL 2019 passages (0-3)", "en"),
}


def _clip(text: str) -> str:
    return text if len(text) <= MAX_PASSAGE_CHARS else text[:MAX_PASSAGE_CHARS]


def load_rgb(root: Path) -> list[Pair]:
    pairs: list[Pair] = []
    with (root / "zh_rgb" / "zh_refine.json").open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            item = json.loads(line)
            qid = str(item["id"])
            for kind, grade in (("positive", 1), ("negative", 0)):
                for i, text in enumerate(item[kind]):
                    pairs.append(Pair("rgb", f"{qid}:{kind[0]}{i}", qid, item["query"], _clip(text), grade))
    return pairs


def load_kuake(root: Path) -> list[Pair]:
    items = json.loads((root / "zh_kuake_qtr" / "KUAKE-QTR_dev.json").read_text(encoding="utf-8"))
    return [
        Pair("kuake", str(x["id"]), x["query"], x["query"], _clip(x["title"]), int(x["label"])) for x in items
    ]


def load_qbqtc(root: Path) -> list[Pair]:
    pairs: list[Pair] = []
    with (root / "zh_qbqtc" / "dev.json").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                x = json.loads(line)
                pairs.append(
                    Pair("qbqtc", str(x["id"]), x["query"], x["query"], _clip(x["title"]), int(x["label"]))
                )
    return pairs


def load_dl19(root: Path) -> list[Pair]:
    base = root / "trec_dl19"
    docs: dict[str, str] = {}
    with (base / "dl2019_document.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                docs[str(d["docid"])] = d["doc"]
    queries: dict[str, str] = {}
    with (base / "msmarco-test2019-queries.tsv").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                qid, text = line.rstrip("\n").split("\t", 1)
                queries[qid] = text
    pairs: list[Pair] = []
    with (base / "2019qrels-pass.txt").open(encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) != 4:
                continue
            qid, _, docid, grade = parts
            if docid in docs and qid in queries:
                pairs.append(
                    Pair("dl19", f"{qid}:{docid}", qid, queries[qid], _clip(docs[docid]), int(grade))
                )
    return pairs


LOADERS: dict[str, Callable[[Path], list[Pair]]] = {
    "rgb": load_rgb,
    "kuake": load_kuake,
    "qbqtc": load_qbqtc,
    "dl19": load_dl19,
}


def balanced_sample(pairs: Sequence[Pair], n: int, seed: int) -> list[tuple[Pair, str]]:
    """``n`` pairs balanced over the grades, each grade's draw split into tune/test halves.

    Deterministic for a seed: pairs are ordered by id first, so file order does not matter.
    Grade ``g`` (sorted ascending, index ``i``) gets ``n // k`` pairs plus one when
    ``i < n % k``; the first ``quota // 2`` drawn go to ``tune``, the rest to ``test``.
    """
    by_grade: dict[int, list[Pair]] = defaultdict(list)
    for p in sorted(pairs, key=lambda p: p.pair_id):
        by_grade[p.grade].append(p)
    grades = sorted(by_grade)
    if not grades or n < 2 * len(grades):
        raise ValueError(f"need at least {2 * len(grades)} pairs for a balanced tune/test sample")
    rng = np.random.default_rng(seed)
    out: list[tuple[Pair, str]] = []
    for i, grade in enumerate(grades):
        quota = n // len(grades) + (1 if i < n % len(grades) else 0)
        group = by_grade[grade]
        if quota > len(group):
            raise ValueError(f"grade {grade} has only {len(group)} pairs, {quota} needed")
        chosen = [group[j] for j in rng.permutation(len(group))[:quota]]
        half = quota // 2
        out += [(p, "tune") for p in chosen[:half]] + [(p, "test") for p in chosen[half:]]
    return out


def query_groups(pairs: Sequence[Pair], n_groups: int, size: int, seed: int) -> list[list[Pair]]:
    """``n_groups`` queries with at least two labelled passages, up to ``size`` passages each.

    Passages are drawn round-robin over the grades (so each group mixes labels when it
    can), then put in a seeded random order: that order is the group's *original* order.
    """
    by_query: dict[str, list[Pair]] = defaultdict(list)
    for p in sorted(pairs, key=lambda p: p.pair_id):
        by_query[p.query_id].append(p)
    eligible = sorted(q for q, ps in by_query.items() if len(ps) >= 2)
    rng = np.random.default_rng(seed)
    chosen = [eligible[i] for i in rng.permutation(len(eligible))[:n_groups]]
    groups: list[list[Pair]] = []
    for qid in chosen:
        per_grade: dict[int, list[Pair]] = defaultdict(list)
        for p in by_query[qid]:
            per_grade[p.grade].append(p)
        for ps in per_grade.values():
            ps[:] = [ps[j] for j in rng.permutation(len(ps))]
        picked: list[Pair] = []
        while len(picked) < size and any(per_grade.values()):
            for grade in sorted(per_grade):
                if per_grade[grade] and len(picked) < size:
                    picked.append(per_grade[grade].pop())
        groups.append([picked[j] for j in rng.permutation(len(picked))])
    return groups


def load_dataset(name: str, root: Path = DATA) -> list[Pair]:
    if name not in LOADERS:
        raise SystemExit(f"unknown dataset {name!r} (known: {', '.join(LOADERS)})")
    return LOADERS[name](root)


# --------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class RunConfig:
    """One way of judging: a template, its mode, probability or generation."""

    spec: str
    template: str
    mode: str
    probability: bool
    template_id: str
    template_hash: str
    datasets: tuple[str, ...] | None = None  # None: every dataset of the run

    @property
    def key(self) -> str:
        return f"{self.mode}-{'prob' if self.probability else 'gen'}"

    @property
    def label(self) -> str:
        return f"{self.template_id} ({self.key})"

    def judge_config(self) -> JudgeConfig:
        # The recorded verdict is the greedy one (P(yes) >= 0.5), whatever the template's
        # calibration: records are keyed by template hash, not threshold, and the tables
        # apply every threshold to the recorded P(yes) themselves ("κ native" = at 0.5).
        return JudgeConfig(
            mode=self.mode,  # type: ignore[arg-type]
            probability=self.probability,
            p_yes_threshold=0.5,
            template=self.template,
            grade_threshold=2,
        )


def parse_config(spec: str) -> RunConfig:
    """``TEMPLATE[:gen][@DATASET+DATASET...]``."""
    head, _, only = spec.partition("@")
    template, _, flag = head.partition(":")
    if flag not in ("", "gen"):
        raise SystemExit(f"bad config {spec!r}: use TEMPLATE[:gen][@DATASET+...]")
    datasets = tuple(_datasets(only.replace("+", ","))) if only else None
    tpl = load_template(template)
    if tpl.mode not in ("binary", "graded"):
        raise SystemExit(f"template {tpl.id} is a {tpl.mode} template, not a verdict template")
    return RunConfig(spec, template, tpl.mode, flag != "gen", tpl.id, tpl.hash, datasets)


@dataclass(frozen=True)
class Scorer:
    """What a table row scores pairs with: recorded configs, combined.

    Spec: ``ROUTE|ROUTE...``; a route is ``CONFIG&CONFIG...`` (the mean P(yes) of those
    configs; one config alone is used as is). For each dataset the first route whose configs
    all cover it is used (``@DATASET`` restricts a config), e.g.
    ``binary.zh.v2@rgb+kuake+qbqtc|binary.en.v2@dl19`` routes by language.
    """

    spec: str
    routes: tuple[tuple[RunConfig, ...], ...]

    @property
    def label(self) -> str:
        if len(self.routes) == 1 and len(self.routes[0]) == 1:
            return self.routes[0][0].label
        return self.spec

    def parts(self) -> list[RunConfig]:
        return [c for route in self.routes for c in route]

    def route_for(self, dataset: str) -> tuple[RunConfig, ...] | None:
        for route in self.routes:
            if all(c.datasets is None or dataset in c.datasets for c in route):
                return route
        return None


def parse_scorer(spec: str) -> Scorer:
    routes = tuple(tuple(parse_config(c) for c in route.split("&")) for route in spec.split("|"))
    return Scorer(spec, routes)


# --------------------------------------------------------------------------- records


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete record; a torn last line (interrupted write) is skipped."""
    if not path.exists():
        return []
    records: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def record_key(rec: dict[str, Any]) -> tuple[str, str, str, str]:
    return (rec["dataset"], rec["pair_id"], rec["mode"], rec["template_hash"])


def is_final(verdict: dict[str, Any]) -> bool:
    """Judged, or unjudged for a reason a re-run would not change (not a backend error)."""
    if verdict.get("verdict") != "unjudged":
        return True
    return not str(verdict.get("error") or "").startswith("backend error")


class Recorder:
    """Append-only JSONL with the keys already done."""

    def __init__(self, path: Path, key: Callable[[dict[str, Any]], tuple[str, ...]]) -> None:
        self.path = path
        self.key = key
        path.parent.mkdir(parents=True, exist_ok=True)
        self.records = read_jsonl(path)
        self.done = {key(r) for r in self.records if r.get("final", True)}
        if path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            with path.open("a", encoding="utf-8") as fh:
                fh.write("\n")  # isolate a torn last line

    def add(self, rec: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self.records.append(rec)
        if rec.get("final", True):
            self.done.add(self.key(rec))


def verdict_record(pair: Pair, split: str, cfg: RunConfig, v: PassageVerdict, mode: str) -> dict[str, Any]:
    dumped = v.model_dump(mode="json")
    return {
        "dataset": pair.dataset,
        "pair_id": pair.pair_id,
        "split": split,
        "human": pair.grade,
        "mode": mode,
        "template_id": cfg.template_id,
        "template_hash": cfg.template_hash,
        "verdict": dumped,
        "final": is_final(dumped),
    }


# --------------------------------------------------------------------------- judging


def make_backend(spec: str) -> Backend:
    """The judge for ``--backend``, made by the package's one factory (resilient under the
    default call policy, the embedded model included: one call at a time, 600 s per call)."""
    return judge.backends.make_backend(spec)


class Progress:
    def __init__(self, total: int, label: str) -> None:
        self.total = total
        self.label = label
        self.count = 0
        self.started = time.perf_counter()

    def step(self) -> None:
        self.count += 1
        if self.count % 25 == 0 or self.count == self.total:
            rate = (time.perf_counter() - self.started) / self.count
            print(f"  {self.label}: {self.count}/{self.total} ({rate:.2f} s each)", file=sys.stderr)


def run_order(sample: Sequence[tuple[Pair, str]]) -> list[tuple[Pair, str]]:
    """Tune halves first, datasets interleaved, so a partial run already covers every dataset."""
    position: dict[tuple[str, str], int] = defaultdict(int)
    keyed: list[tuple[int, int, str, tuple[Pair, str]]] = []
    for pair, split in sample:
        i = position[(pair.dataset, split)]
        position[(pair.dataset, split)] += 1
        keyed.append((0 if split == "tune" else 1, i, pair.dataset, (pair, split)))
    return [item for *_, item in sorted(keyed, key=lambda k: k[:3])]


async def judge_sample(
    backend: Backend,
    sample: Sequence[tuple[Pair, str]],
    configs: Sequence[RunConfig],
    rec: Recorder,
    splits: Sequence[str] = ("tune", "test"),
) -> None:
    ordered = run_order(sample)
    for cfg in configs:
        todo = [
            (p, s)
            for p, s in ordered
            if s in splits
            and (cfg.datasets is None or p.dataset in cfg.datasets)
            and (p.dataset, p.pair_id, cfg.key, cfg.template_hash) not in rec.done
        ]
        if not todo:
            continue
        progress = Progress(len(todo), cfg.label)
        jc = cfg.judge_config()
        for pair, split in todo:
            v = await judge_passage(backend, pair.query, Passage(pair.text, id=pair.pair_id), 0, jc)
            rec.add(verdict_record(pair, split, cfg, v, cfg.key))
            progress.step()


# --------------------------------------------------------------------------- analysis


def _safe(fn: Callable[..., float], *args: Any) -> float:
    try:
        return fn(*args)
    except AgreementUndefinedError:
        return math.nan


def bootstrap_ci(
    stat: Callable[..., float], arrays: Sequence[np.ndarray], seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of ``stat(*arrays)`` resampling items (paired)."""
    if len(arrays[0]) < 3:
        return (math.nan, math.nan)

    def wrapped(*xs: np.ndarray) -> float:
        return _safe(stat, *xs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            tuple(arrays),
            wrapped,
            paired=True,
            vectorized=False,
            n_resamples=BOOTSTRAP_RESAMPLES,
            confidence_level=0.95,
            method="percentile",
            random_state=np.random.default_rng(seed),
        )
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def tune_threshold(relevant: np.ndarray, scores: np.ndarray, *, prefer: float = 0.5) -> float:
    """The threshold ``t`` (relevant iff ``score >= t``) maximising binary kappa."""
    return tune_threshold_macro([(relevant, scores)], prefer=prefer)


def tune_threshold_macro(
    parts: Sequence[tuple[np.ndarray, np.ndarray]], *, prefer: float = 0.5, untuned: float | None = None
) -> float:
    """The threshold maximising the mean binary kappa over ``parts`` (one per dataset, so
    every dataset weighs the same whatever its size).

    Candidates are the midpoints between consecutive distinct scores of all parts (plus one
    below the lowest and one above the highest); ties go to the candidate closest to
    ``prefer``. A part where kappa is undefined at a candidate is left out of its mean.
    With no scores at all (the tune halves were not judged): ``untuned`` (``prefer`` if None).
    """
    u = np.unique(np.concatenate([scores for _, scores in parts])) if parts else np.array([])
    if u.size == 0:
        return prefer if untuned is None else untuned
    cands = np.concatenate(([u[0] - 1e-9], (u[:-1] + u[1:]) / 2.0, [u[-1] + 1e-9]))
    best_t, best_k = prefer, -math.inf
    for t in cands:
        ks = [_safe(cohen_kappa, relevant, scores >= t) for relevant, scores in parts]
        ks = [k for k in ks if not math.isnan(k)]
        if not ks:
            continue
        k = float(np.mean(ks))
        if k > best_k + 1e-12 or (abs(k - best_k) <= 1e-12 and abs(t - prefer) < abs(best_t - prefer)):
            best_t, best_k = float(t), k
    return best_t


@dataclass
class Judged:
    """Verdicts of one config on one dataset, aligned arrays."""

    human: np.ndarray
    split: np.ndarray
    p_yes: np.ndarray
    expected: np.ndarray | None
    grade: np.ndarray | None
    yes: np.ndarray
    unjudged: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def part(self, split: str) -> Judged:
        m = self.split == split
        return Judged(
            self.human[m],
            self.split[m],
            self.p_yes[m],
            None if self.expected is None else self.expected[m],
            None if self.grade is None else self.grade[m],
            self.yes[m],
        )


def collect(records: Iterable[dict[str, Any]], dataset: str, mode: str, template_hash: str) -> Judged | None:
    latest: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["dataset"] == dataset and r["mode"] == mode and r["template_hash"] == template_hash:
            latest[r["pair_id"]] = r
    if not latest:
        return None
    rows = [latest[k] for k in sorted(latest)]
    judged = [r for r in rows if r["verdict"]["verdict"] != "unjudged"]
    unjudged = len(rows) - len(judged)
    human = np.array([r["human"] for r in judged], dtype=np.int64)
    split = np.array([r["split"] for r in judged])
    yes = np.array([r["verdict"]["verdict"] == "yes" for r in judged])
    p = [r["verdict"].get("p_yes") for r in judged]
    p_yes = np.array([float(x) if x is not None else float(y) for x, y in zip(p, yes, strict=True)])
    graded = mode.startswith("graded")
    grade = np.array([r["verdict"]["grade"] for r in judged], dtype=np.int64) if graded else None
    expected = None
    if graded:
        ex = [r["verdict"].get("expected_grade") for r in judged]
        expected = np.array([float(e) if e is not None else float(g) for e, g in zip(ex, grade, strict=True)])  # type: ignore[arg-type]
    return Judged(human, split, p_yes, expected, grade, yes, unjudged)


def collect_route(
    records: Sequence[dict[str, Any]], dataset: str, route: Sequence[RunConfig]
) -> Judged | None:
    """One config's verdicts, or the mean P(yes) of several over the pairs all of them judged."""
    if len(route) == 1:
        return collect(records, dataset, route[0].key, route[0].template_hash)
    per: list[dict[str, dict[str, Any]]] = []
    for cfg in route:
        latest: dict[str, dict[str, Any]] = {}
        for r in records:
            if r["dataset"] == dataset and r["mode"] == cfg.key and r["template_hash"] == cfg.template_hash:
                latest[r["pair_id"]] = r
        per.append(latest)
    common = sorted(set.intersection(*(set(d) for d in per)))
    judged = [k for k in common if all(d[k]["verdict"]["verdict"] != "unjudged" for d in per)]
    if not judged:
        return None
    first = per[0]
    p_yes = np.array([np.mean([float(d[k]["verdict"]["p_yes"]) for d in per]) for k in judged])
    return Judged(
        np.array([first[k]["human"] for k in judged], dtype=np.int64),
        np.array([first[k]["split"] for k in judged]),
        p_yes,
        None,
        None,
        p_yes >= 0.5,
        len(common) - len(judged),
    )


def _kappa_at(t: float) -> Callable[[np.ndarray, np.ndarray], float]:
    """Binary kappa of relevance against ``score >= t``."""

    def stat(relevant: np.ndarray, scores: np.ndarray) -> float:
        return cohen_kappa(relevant, scores >= t)

    return stat


def _qw_kappa(a: np.ndarray, b: np.ndarray) -> float:
    return cohen_kappa(a, b, weights="quadratic")


def _fmt(value: float, ci: tuple[float, float] | None = None) -> str:
    if math.isnan(value):
        return "undef."
    if ci is None or math.isnan(ci[0]):
        return f"{value:.2f}"
    return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


@dataclass
class Row:
    dataset: str
    config: str
    n: int
    unjudged: int
    kappa_native: float
    kappa_native_ci: tuple[float, float]
    auc: float
    auc_ci: tuple[float, float]
    t_dataset: float
    kappa_t_dataset: float
    kappa_t_dataset_ci: tuple[float, float]
    t_global: float
    kappa_t_global: float
    kappa_t_global_ci: tuple[float, float]
    qwk: float | None = None
    qwk_ci: tuple[float, float] | None = None
    t_expected: float | None = None
    kappa_expected: float | None = None


def _pool_key(cfg: Scorer, dataset: str) -> tuple[int, str]:
    route = cfg.route_for(dataset)
    if route is None:
        raise ValueError(f"{cfg.spec} has no route for {dataset}")
    return cfg.routes.index(route), DATASETS[dataset].language


def _calibrated(cfg: Scorer, dataset: str) -> float:
    """The calibrated P(yes) threshold of the route's template for ``dataset`` (0.5 for a
    route of several configs, or a template without one)."""
    route = cfg.route_for(dataset)
    if route is None or len(route) != 1:
        return 0.5
    return load_template(route[0].template).p_yes_threshold or 0.5


def analyse(
    records: Sequence[dict[str, Any]],
    datasets: Sequence[str],
    configs: Sequence[RunConfig | Scorer],
    split: str,
) -> list[Row]:
    """One row per (dataset, scorer): agreement on ``split`` with thresholds tuned on ``tune``."""
    rows: list[Row] = []
    for item in configs:
        cfg = item if isinstance(item, Scorer) else Scorer(item.spec, ((item,),))
        judged: dict[str, Judged | None] = {}
        for d in datasets:
            route = cfg.route_for(d)
            judged[d] = None if route is None else collect_route(records, d, route)
        # One threshold per (route, language): a template's calibration, tuned for the mean
        # kappa over the tune halves of that language's datasets (prompts/calibration.toml).
        pools: dict[tuple[int, str], list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
        for d, j in judged.items():
            if j is not None:
                t = j.part("tune")
                pools[_pool_key(cfg, d)].append((t.human >= DATASETS[d].level, t.p_yes))
        # Tune halves not judged (``--judge-split test``): the template's calibrated threshold
        # (prompts/calibration.toml, tuned on them in an earlier run), else 0.5.
        untuned = {_pool_key(cfg, d): _calibrated(cfg, d) for d, j in judged.items() if j is not None}
        t_route = {key: tune_threshold_macro(parts, untuned=untuned[key]) for key, parts in pools.items()}
        for d in datasets:
            j = judged[d]
            if j is None:
                continue
            t_global = t_route[_pool_key(cfg, d)]
            level = DATASETS[d].level
            tune, test = j.part("tune"), j.part(split)
            if test.human.size == 0:
                continue
            rel = test.human >= level
            t_d = tune_threshold(tune.human >= level, tune.p_yes) if tune.human.size else t_global

            row = Row(
                dataset=d,
                config=cfg.label,
                n=int(test.human.size),
                unjudged=j.unjudged,
                kappa_native=_safe(cohen_kappa, rel, test.yes),
                kappa_native_ci=bootstrap_ci(cohen_kappa, [rel, test.yes]),
                auc=_safe(roc_auc, rel, test.p_yes),
                auc_ci=bootstrap_ci(roc_auc, [rel, test.p_yes]),
                t_dataset=t_d,
                kappa_t_dataset=_safe(cohen_kappa, rel, test.p_yes >= t_d),
                kappa_t_dataset_ci=bootstrap_ci(_kappa_at(t_d), [rel, test.p_yes]),
                t_global=t_global,
                kappa_t_global=_safe(cohen_kappa, rel, test.p_yes >= t_global),
                kappa_t_global_ci=bootstrap_ci(_kappa_at(t_global), [rel, test.p_yes]),
            )
            if test.grade is not None and test.expected is not None and tune.expected is not None:
                top = max(DATASETS[d].grades)
                model_grade = np.minimum(test.grade, top)
                if len(DATASETS[d].grades) > 2:
                    row.qwk = _safe(_qw_kappa, test.human, model_grade)
                    row.qwk_ci = bootstrap_ci(_qw_kappa, [test.human, model_grade])
                row.t_expected = tune_threshold(tune.human >= level, tune.expected, prefer=2.0)
                row.kappa_expected = _safe(cohen_kappa, rel, test.expected >= row.t_expected)
            rows.append(row)
    return rows


def print_table(rows: Sequence[Row], split: str, file: Any = sys.stdout) -> None:
    print(
        f"\nAgreement on the {split} halves (binary kappa: relevant = grade >= level; RGB: positive)\n",
        file=file,
    )
    print(
        "| dataset | config | n | unj. | κ native [95% CI] | AUC P(yes) [95% CI] "
        "| κ @ t_dataset (t) [95% CI] | κ @ t_lang (t) [95% CI] | qw-κ grade [95% CI] | κ @ E[g]≥t (t) |",
        file=file,
    )
    print("|" + "---|" * 10, file=file)
    for r in rows:
        qwk = "" if r.qwk is None else _fmt(r.qwk, r.qwk_ci)
        ke = "" if r.kappa_expected is None else f"{_fmt(r.kappa_expected)} ({r.t_expected:.2f})"
        print(
            f"| {r.dataset} | {r.config} | {r.n} | {r.unjudged} | {_fmt(r.kappa_native, r.kappa_native_ci)} "
            f"| {_fmt(r.auc, r.auc_ci)} "
            f"| {_fmt(r.kappa_t_dataset, r.kappa_t_dataset_ci)} ({r.t_dataset:.3f}) "
            f"| {_fmt(r.kappa_t_global, r.kappa_t_global_ci)} ({r.t_global:.3f}) | {qwk} | {ke} |",
            file=file,
        )


# --------------------------------------------------------------------------- groups


def group_id(group: Sequence[Pair]) -> str:
    return hashlib.sha256("|".join(p.pair_id for p in group).encode()).hexdigest()[:16]


def permutation(n: int, seed: int, r: int) -> list[int]:
    if r == 0:
        return list(range(n))
    return [int(i) for i in np.random.default_rng([seed, r]).permutation(n)]


def group_key(rec: dict[str, Any]) -> tuple[str, str, str, str]:
    return (rec["dataset"], rec["group_id"], rec["mode"], rec["template_hash"])


async def judge_group_pointwise(
    backend: Backend, group: Sequence[Pair], order: Sequence[int], cfg: RunConfig
) -> dict[str, Any]:
    jc = cfg.judge_config()
    verdicts: dict[str, dict[str, Any]] = {}
    for pos in order:
        p = group[pos]
        v = await judge_passage(backend, p.query, Passage(p.text, id=p.pair_id), pos, jc)
        verdicts[p.pair_id] = v.model_dump(mode="json")
    return {
        "verdicts": verdicts,
        "calls": sum(v["attempts"] for v in verdicts.values()),
        "prompt_tokens": sum(v["tokens"]["prompt_tokens"] for v in verdicts.values()),
        "completion_tokens": sum(v["tokens"]["completion_tokens"] for v in verdicts.values()),
    }


async def judge_group_listwise(
    backend: Backend, group: Sequence[Pair], order: Sequence[int], template: str, mode: str
) -> dict[str, Any]:
    ordered = [group[i] for i in order]
    cfg = JudgeConfig(mode=mode, probability=False, grade_threshold=2)  # type: ignore[arg-type]
    res = await judge_listwise(
        backend, ordered[0].query, [Passage(p.text, id=p.pair_id) for p in ordered], cfg, template=template
    )
    verdicts = {p.pair_id: v.model_dump(mode="json") for p, v in zip(ordered, res.verdicts, strict=True)}
    fallback_tokens = [res.verdicts[i].tokens for i in res.pointwise]
    return {
        "verdicts": verdicts,
        "calls": res.calls,
        "listwise_calls": res.listwise_calls,
        "pointwise": [ordered[i].pair_id for i in res.pointwise],
        "problems": list(res.problems),
        "prompt_tokens": res.usage.prompt_tokens + sum(t.prompt_tokens for t in fallback_tokens),
        "completion_tokens": res.usage.completion_tokens + sum(t.completion_tokens for t in fallback_tokens),
        "latency_s": res.latency_s,
    }


async def run_groups(
    backend: Backend,
    groups: dict[str, list[list[Pair]]],
    jobs: Sequence[tuple[str, str, str, Callable[[Sequence[Pair], list[int]], Any]]],
    shuffles: int,
    seed: int,
    rec: Recorder,
) -> None:
    """``jobs``: (mode label, template id, template hash, judge(group, order)) per way of judging."""
    for mode_label, template_id, template_hash, fn in jobs:
        todo: list[tuple[str, list[Pair], int]] = []
        for d, gs in groups.items():
            for g in gs:
                for r in range(shuffles + 1):
                    key = (d, group_id(g), f"{mode_label}:perm{r}", template_hash)
                    if key not in rec.done:
                        todo.append((d, g, r))
        progress = Progress(len(todo), f"{mode_label} {template_id}")
        for d, g, r in todo:
            order = permutation(len(g), seed, r)
            out = await fn(g, order)
            rec.add(
                {
                    "dataset": d,
                    "group_id": group_id(g),
                    "mode": f"{mode_label}:perm{r}",
                    "template_id": template_id,
                    "template_hash": template_hash,
                    "order": [g[i].pair_id for i in order],
                    "human": {p.pair_id: p.grade for p in g},
                    **out,
                }
            )
            progress.step()


def _label(v: dict[str, Any], threshold: float = 0.5) -> str:
    """yes/no/unjudged; a probability-mode verdict is re-decided at ``threshold`` on P(yes)."""
    label = str(v["verdict"])
    if label != "unjudged" and v.get("p_yes") is not None:
        return "yes" if float(v["p_yes"]) >= threshold else "no"
    return label


def flip_stats(
    records: Sequence[dict[str, Any]], mode_label: str, template_hash: str, threshold: float = 0.5
) -> dict[str, Any]:
    """Verdict flips between a group's original order (perm0) and each shuffled order."""
    by_group: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for rec in records:
        if rec["template_hash"] != template_hash or not rec["mode"].startswith(mode_label + ":perm"):
            continue
        by_group[(rec["dataset"], rec["group_id"])][int(rec["mode"].rsplit("perm", 1)[1])] = rec
    out: dict[str, Any] = {}
    per_dataset: dict[str, list[tuple[int, int, float]]] = defaultdict(list)
    for (d, _), perms in by_group.items():
        if 0 not in perms:
            continue
        base = perms[0]["verdicts"]
        for r, shuffled in perms.items():
            if r == 0:
                continue
            flips = compared = 0
            max_dp = 0.0
            for pid, v in shuffled["verdicts"].items():
                b = base.get(pid)
                if b is None or _label(b) == "unjudged" or _label(v) == "unjudged":
                    continue
                compared += 1
                flips += _label(b, threshold) != _label(v, threshold)
                if b.get("p_yes") is not None and v.get("p_yes") is not None:
                    max_dp = max(max_dp, abs(float(b["p_yes"]) - float(v["p_yes"])))
            per_dataset[d].append((flips, compared, max_dp))
    for d, items in sorted(per_dataset.items()):
        flips = sum(f for f, _, _ in items)
        compared = sum(c for _, c, _ in items)
        out[d] = {
            "flips": flips,
            "compared": compared,
            "flip_rate": flips / compared if compared else math.nan,
            "max_abs_dp_yes": max(m for _, _, m in items),
        }
    return out


def listwise_stats(
    records: Sequence[dict[str, Any]], lw_hash: str, pw_hash: str, pw_mode: str, threshold: float = 0.5
) -> dict[str, dict[str, Any]]:
    """Listwise (perm0) vs pointwise (perm0, yes iff P(yes) >= ``threshold``) vs humans, and
    calls/tokens, per dataset."""
    lw: dict[tuple[str, str], dict[str, Any]] = {}
    pw: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        if r["mode"] == "listwise:perm0" and r["template_hash"] == lw_hash:
            lw[(r["dataset"], r["group_id"])] = r
        elif r["mode"] == f"{pw_mode}:perm0" and r["template_hash"] == pw_hash:
            pw[(r["dataset"], r["group_id"])] = r
    out: dict[str, dict[str, Any]] = {}
    for d in sorted({k[0] for k in lw}):
        keys = [k for k in lw if k[0] == d and k in pw]
        human: list[int] = []
        lw_yes: list[bool] = []
        pw_yes: list[bool] = []
        calls_lw = calls_pw = fallback = groups_with_problems = 0
        tok_lw = tok_pw = 0
        for k in keys:
            a, b = lw[k], pw[k]
            calls_lw += a["calls"]
            calls_pw += b["calls"]
            fallback += len(a["pointwise"])
            groups_with_problems += bool(a["problems"])
            tok_lw += a["prompt_tokens"] + a["completion_tokens"]
            tok_pw += b["prompt_tokens"] + b["completion_tokens"]
            for pid, v in a["verdicts"].items():
                u = b["verdicts"].get(pid)
                if u is None or _label(v) == "unjudged" or _label(u) == "unjudged":
                    continue
                human.append(int(a["human"][pid]))
                lw_yes.append(_label(v) == "yes")
                pw_yes.append(_label(u, threshold) == "yes")
        level = DATASETS[d].level
        h = np.array(human) >= level
        lwa, pwa = np.array(lw_yes), np.array(pw_yes)
        out[d] = {
            "groups": len(keys),
            "passages": len(human),
            "agree_lw_pw": float(np.mean(lwa == pwa)) if human else math.nan,
            "kappa_lw_pw": _safe(cohen_kappa, lwa, pwa),
            "kappa_lw_human": _safe(cohen_kappa, h, lwa),
            "kappa_lw_human_ci": bootstrap_ci(cohen_kappa, [h, lwa]),
            "kappa_pw_human": _safe(cohen_kappa, h, pwa),
            "kappa_pw_human_ci": bootstrap_ci(cohen_kappa, [h, pwa]),
            "calls_listwise": calls_lw,
            "calls_pointwise": calls_pw,
            "fallback_passages": fallback,
            "groups_with_problems": groups_with_problems,
            "tokens_listwise": tok_lw,
            "tokens_pointwise": tok_pw,
        }
    return out


# --------------------------------------------------------------------------- commands


def build_sample(datasets: Sequence[str], n: int, seed: int) -> list[tuple[Pair, str]]:
    sample: list[tuple[Pair, str]] = []
    for d in datasets:
        sample += balanced_sample(load_dataset(d), n, seed)
    return sample


def _datasets(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    for name in names:
        if name not in DATASETS:
            raise SystemExit(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")
    return names


def cmd_judge(args: argparse.Namespace, *, run: bool) -> int:
    datasets = _datasets(args.datasets)
    scorers = [parse_scorer(c) for c in args.configs]
    configs = list({c.spec: c for s in scorers for c in s.parts()}.values())
    sample = build_sample(datasets, args.n, args.seed)
    rec = Recorder(Path(args.out) / "verdicts.jsonl", record_key)
    if run:
        backend = make_backend(args.backend)
        splits = ("tune", "test") if args.judge_split == "both" else (args.judge_split,)
        asyncio.run(judge_sample(backend, sample, configs, rec, splits))
    # The split comes from this sample (a record may have been judged for another sample).
    split_of = {(p.dataset, p.pair_id): s for p, s in sample}
    records = [
        {**r, "split": split_of[(r["dataset"], r["pair_id"])]}
        for r in rec.records
        if (r["dataset"], r["pair_id"]) in split_of
    ]
    counts = Counter(s for _, s in sample)
    print(
        f"sample: {args.n} pairs per dataset, seed {args.seed} "
        f"({counts['tune']} tune / {counts['test']} test); "
        f"backend {args.backend}; records in {rec.path}"
    )
    for split in args.splits:
        print_table(analyse(records, datasets, scorers, split), split)
    return 0


def _threshold(args: argparse.Namespace, cfg: RunConfig) -> float:
    if args.threshold is not None:
        return float(args.threshold)
    return load_template(cfg.template).decision_threshold


def _groups(args: argparse.Namespace) -> dict[str, list[list[Pair]]]:
    return {
        d: query_groups(load_dataset(d), args.groups, args.size, args.seed) for d in _datasets(args.datasets)
    }


def cmd_order(args: argparse.Namespace) -> int:
    groups = _groups(args)
    cfg = parse_config(args.config)
    rec = Recorder(Path(args.out) / "groups.jsonl", group_key)
    backend = make_backend(args.backend)

    async def pointwise(g: Sequence[Pair], order: list[int]) -> dict[str, Any]:
        return await judge_group_pointwise(backend, g, order, cfg)

    jobs: list[tuple[str, str, str, Callable[[Sequence[Pair], list[int]], Any]]] = [
        (f"pointwise-{cfg.key}", cfg.template_id, cfg.template_hash, pointwise)
    ]
    if args.listwise:
        lw = load_template(args.listwise_template)

        async def listwise(g: Sequence[Pair], order: list[int]) -> dict[str, Any]:
            return await judge_group_listwise(backend, g, order, args.listwise_template, lw.mode)

        jobs.append(("listwise", lw.id, lw.hash, listwise))
    asyncio.run(run_groups(backend, groups, jobs, args.shuffles, args.seed, rec))
    print(
        f"order effects: {args.groups} groups of <= {args.size} passages per dataset, "
        f"{args.shuffles} shuffle(s)"
    )
    print("| dataset | mode | flips / compared | flip rate | max abs ΔP(yes) |")
    print("|---|---|---|---|---|")
    for mode_label, _, template_hash, _ in jobs:
        for d, s in flip_stats(rec.records, mode_label, template_hash, _threshold(args, cfg)).items():
            print(
                f"| {d} | {mode_label} | {s['flips']} / {s['compared']} | {s['flip_rate']:.3f} "
                f"| {s['max_abs_dp_yes']:.2e} |"
            )
    return 0


def cmd_listwise(args: argparse.Namespace) -> int:
    groups = _groups(args)
    pw_cfg = parse_config(args.config)
    lw = load_template(args.listwise_template)
    rec = Recorder(Path(args.out) / "groups.jsonl", group_key)
    backend = make_backend(args.backend)

    async def pointwise(g: Sequence[Pair], order: list[int]) -> dict[str, Any]:
        return await judge_group_pointwise(backend, g, order, pw_cfg)

    async def listwise(g: Sequence[Pair], order: list[int]) -> dict[str, Any]:
        return await judge_group_listwise(backend, g, order, args.listwise_template, lw.mode)

    pw_mode = f"pointwise-{pw_cfg.key}"
    jobs: list[tuple[str, str, str, Callable[[Sequence[Pair], list[int]], Any]]] = [
        (pw_mode, pw_cfg.template_id, pw_cfg.template_hash, pointwise),
        ("listwise", lw.id, lw.hash, listwise),
    ]
    asyncio.run(run_groups(backend, groups, jobs, args.shuffles, args.seed, rec))
    print(f"listwise {lw.id} vs pointwise {pw_cfg.label}: {args.groups} groups of <= {args.size} per dataset")
    print(
        "| dataset | groups | passages | LW=PW | κ LW-PW | κ LW-human [95% CI] | κ PW-human [95% CI] "
        "| calls LW / PW | fallback passages | tokens LW / PW |"
    )
    print("|" + "---|" * 10)
    threshold = _threshold(args, pw_cfg)
    for d, s in listwise_stats(rec.records, lw.hash, pw_cfg.template_hash, pw_mode, threshold).items():
        print(
            f"| {d} | {s['groups']} | {s['passages']} | {s['agree_lw_pw']:.2f} | {_fmt(s['kappa_lw_pw'])} "
            f"| {_fmt(s['kappa_lw_human'], s['kappa_lw_human_ci'])} "
            f"| {_fmt(s['kappa_pw_human'], s['kappa_pw_human_ci'])} "
            f"| {s['calls_listwise']} / {s['calls_pointwise']} | {s['fallback_passages']} "
            f"| {s['tokens_listwise']} / {s['tokens_pointwise']} |"
        )
    if args.shuffles:
        print("\nposition bias (verdict flips when the group is shuffled):")
        for mode_label, h in (("listwise", lw.hash), (pw_mode, pw_cfg.template_hash)):
            for d, s in flip_stats(rec.records, mode_label, h, _threshold(args, pw_cfg)).items():
                print(f"  {d} {mode_label}: {s['flips']}/{s['compared']} = {s['flip_rate']:.3f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--backend", default=DEFAULT_BACKEND, help="backend spec (default: %(default)s)")
        p.add_argument(
            "--datasets", default="rgb,kuake,qbqtc,dl19", help="comma-separated (default: %(default)s)"
        )
        p.add_argument("--seed", type=int, default=7, help="sampling seed (default: %(default)s)")
        p.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default: %(default)s)")

    for name in ("judge", "report"):
        p = sub.add_parser(
            name, help="judge the sample and print the table" if name == "judge" else "table only"
        )
        common(p)
        p.add_argument("--n", type=int, default=200, help="pairs per dataset (default: %(default)s)")
        p.add_argument(
            "--configs",
            nargs="+",
            default=list(DEFAULT_CONFIGS),
            help="TEMPLATE[:gen][@DATASET+...] or ROUTE|ROUTE ...",
        )
        p.add_argument(
            "--splits", nargs="+", default=["test"], choices=["tune", "test"], help="halves to report"
        )
        p.add_argument(
            "--judge-split",
            default="both",
            choices=["both", "tune", "test"],
            help="halves to judge (default: %(default)s); tune candidates on 'tune' first",
        )
        p.set_defaults(func=lambda a, run=(name == "judge"): cmd_judge(a, run=run))

    for name, fn in (("order", cmd_order), ("listwise", cmd_listwise)):
        p = sub.add_parser(name, help="order effects" if name == "order" else "listwise vs pointwise")
        common(p)
        p.add_argument("--groups", type=int, default=12, help="queries per dataset (default: %(default)s)")
        p.add_argument(
            "--size", type=int, default=6, help="passages per query at most (default: %(default)s)"
        )
        p.add_argument("--shuffles", type=int, default=1 if name == "order" else 0)
        p.add_argument("--config", default="binary.zh.v2", help="pointwise config (default: %(default)s)")
        p.add_argument("--listwise-template", default="listwise.zh.v1")
        p.add_argument(
            "--threshold",
            type=float,
            default=None,
            help="pointwise probability-mode verdict: yes iff P(yes) >= this "
            "(default: the template's calibrated threshold, else 0.5)",
        )
        if name == "order":
            p.add_argument("--listwise", action="store_true", help="also measure listwise order effects")
        p.set_defaults(func=fn)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
