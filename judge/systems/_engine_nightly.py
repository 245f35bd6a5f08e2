"""The nightly regression of a live search engine: ``judge nightly`` with a ``[search]`` section.

Each night the query set is searched with the configuration, the night's run and the stored
baseline run are compared as two systems of one judged pool (only pairs never judged cost a
call: the verdict cache), and a measure that drops significantly (the current run worse than
the baseline, Holm-adjusted randomization p < 1 - ``confidence``) is an alert: exit code 1
and the report. The first night's run becomes the baseline (``baseline.jsonl`` beside the
history; delete it to take a new one).

Config (TOML, or JSON unless the name ends in ``.toml``; relative paths are relative to the
config file)::

    name = "shop-search"              # default: the file's stem
    backend = "qrels:labels.qrels"    # the judge (default: the default backend)
    history = "nightly/history.jsonl" # default
    report_dir = "nightly/reports"    # default; one dated folder per night
    [search]
    queries = "queries.jsonl"         # required: the query set
    config = "engine.toml"            # required: the search configuration
    query_qrels = "q.qrels"           # a qrels file beside the query set
    qrels = "human.qrels"             # human labels filling the pool first
    set = {k1 = 0.9}                  # knobs set on the configuration
    measures = ["ndcg_cut_10", "P_5"] # default: ndcg_cut_10, map, P_5
    depth = 10                        # pool each run's top N (default: all)
    confidence = 0.95                 # default
    resamples = 10000                 # default
    test_figure = "expected"          # default; or "thresholded": what the paired test reads

Each night appends one line (schema ``judge.nightly.search/1``) to the history: timestamp,
name, git_commit, backend, queries, config (path, hash, engine, params), baseline run,
per measure the baseline and current means, diff, p and Holm p (its method and Monte Carlo
error), whether it dropped significantly and whether a drop is undecided (Monte Carlo p
within its error of the level: no alert, said), calls, passed, status (``baseline``,
``pass`` or ``alert``) and the night's report folder; the trend plot (the first measure per
night, alerts in red) is redrawn when matplotlib is installed.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from judge.backends import Backend
from judge.io import InputError
from judge.judging import JudgeConfig, VerdictStore
from judge.search import arun_search, load_config, read_queries
from judge.stability import append_history, drawn_or_warning, git_commit, read_history
from judge.store import atomic_write_bytes
from judge.systems._comparison import ComparisonReport
from judge.systems._expected import DEFAULT_TEST_FIGURE, TestFigure, check_test_figure
from judge.systems._options import SystemsOptions
from judge.systems._pool import PoolRun
from judge.systems._run import run_comparison

SEARCH_HISTORY_SCHEMA = "judge.nightly.search/1"
NIGHTLY_MEASURES = ("ndcg_cut_10", "map", "P_5")

_TOP: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "backend": (str, type(None)),
    "base_url": (str, type(None)),
    "mode": (str,),
    "history": (str,),
    "report_dir": (str,),
    "trend_plot": (str,),
    "search": (dict,),
}
_SEARCH: dict[str, tuple[type, ...]] = {
    "queries": (str,),
    "config": (str,),
    "query_qrels": (str,),
    "qrels": (str,),
    "set": (dict,),
    "measures": (list,),
    "depth": (int,),
    "confidence": (float, int),
    "resamples": (int,),
    "examples": (int,),
    "examples_from": (str,),
    "adapt": (bool,),
    "test_figure": (str,),
}


@dataclass(frozen=True)
class SearchNightlyConfig:
    """A parsed nightly config with a ``[search]`` section (paths resolved)."""

    path: Path
    name: str
    backend: str | None
    base_url: str | None
    mode: str | None
    queries: Path
    config: Path
    query_qrels: Path | None
    qrels: Path | None
    overrides: dict[str, Any]
    measures: tuple[str, ...]
    depth: int | None
    confidence: float
    resamples: int
    history: Path
    report_dir: Path
    trend_plot: Path
    # worked examples from the [search] qrels (judge experiment --examples/--examples-from)
    examples: int | None = None
    examples_from: str | None = None
    # the [search] qrels teach the decision rule (judge experiment --adapt)
    adapt: bool | None = None
    # what the paired test reads: the judge's probability-weighted figures or the thresholded
    test_figure: TestFigure = DEFAULT_TEST_FIGURE
    baseline: Path = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "baseline", self.history.parent / "baseline.jsonl")


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A nightly config file as an object (TOML when the name ends in .toml, else JSON)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(p)) from None
    try:
        obj: Any = tomllib.loads(raw.decode("utf-8")) if p.suffix.lower() == ".toml" else json.loads(raw)
    except UnicodeDecodeError as exc:
        raise InputError(f"invalid UTF-8 at byte {exc.start}", path=str(p)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", path=str(p), line=exc.lineno) from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc})", path=str(p)) from None
    if not isinstance(obj, dict):
        raise InputError("expected an object at the top level", path=str(p))
    return obj


def night_folder(report_dir: Path, when: datetime) -> Path:
    """``report_dir/<YYYYmmddTHHMMSSZ>`` (``-2``, ``-3``... when taken), as the stability nightly does."""
    stem = when.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate, n = report_dir / stem, 2
    while candidate.exists():
        candidate, n = report_dir / f"{stem}-{n}", n + 1
    return candidate


def has_search_section(path: str | Path) -> bool:
    """Whether a nightly config watches a search engine (it has a ``search`` section)."""
    return "search" in read_config_file(path)


def _check_types(
    obj: Mapping[str, Any], keys: Mapping[str, tuple[type, ...]], where: str, prefix: str
) -> None:
    for key, value in obj.items():
        if key not in keys:
            raise InputError(
                f"unknown key (known: {', '.join(sorted(keys))})", path=where, field=prefix + key
            )
        allowed = keys[key]
        if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
            raise InputError(f"must be {names}, got {type(value).__name__}", path=where, field=prefix + key)


def load_search_nightly(path: str | Path) -> SearchNightlyConfig:
    """Read and check a nightly config with a ``[search]`` section; every problem is an
    InputError naming the file and the key."""
    cfg_path = Path(path)
    where = str(cfg_path)
    obj = read_config_file(cfg_path)
    _check_types(obj, _TOP, where, "")
    search = obj.get("search")
    if not isinstance(search, dict):
        raise InputError("missing", path=where, field="search")
    _check_types(search, _SEARCH, where, "search.")
    for key in ("queries", "config"):
        if key not in search:
            raise InputError("missing", path=where, field=f"search.{key}")
    base = cfg_path.resolve().parent

    def resolve(value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else Path(os.path.normpath(base / p))

    measures = search.get("measures", list(NIGHTLY_MEASURES))
    if not measures or not all(isinstance(m, str) for m in measures):
        raise InputError("must be a non-empty list of measure names", path=where, field="search.measures")
    confidence = float(search.get("confidence", 0.95))
    if not 0.0 < confidence < 1.0:
        raise InputError("must be in (0, 1)", path=where, field="search.confidence")
    depth = search.get("depth")
    if depth is not None and depth < 1:
        raise InputError("must be >= 1", path=where, field="search.depth")
    resamples = int(search.get("resamples", 10_000))
    if resamples < 1:
        raise InputError("must be >= 1", path=where, field="search.resamples")
    history = resolve(obj.get("history", "nightly/history.jsonl"))
    backend = obj.get("backend")
    if isinstance(backend, str) and backend.startswith("qrels:"):
        # the labels file of the qrels-backed judge is relative to the config, like every path
        target, level = backend[len("qrels:") :], ""
        head, sep, tail = target.rpartition(":")
        if sep and tail.isdigit():
            target, level = head, f":{tail}"
        backend = f"qrels:{resolve(target)}{level}"
    return SearchNightlyConfig(
        path=cfg_path,
        name=obj.get("name", cfg_path.stem),
        backend=backend,
        base_url=obj.get("base_url"),
        mode=obj.get("mode"),
        queries=resolve(search["queries"]),
        config=resolve(search["config"]),
        query_qrels=resolve(search["query_qrels"]) if "query_qrels" in search else None,
        qrels=resolve(search["qrels"]) if "qrels" in search else None,
        overrides=dict(search.get("set", {})),
        measures=tuple(measures),
        depth=depth,
        confidence=confidence,
        resamples=resamples,
        history=history,
        report_dir=resolve(obj.get("report_dir", "nightly/reports")),
        trend_plot=resolve(obj["trend_plot"]) if "trend_plot" in obj else history.parent / "search-trend.png",
        examples=search.get("examples"),
        examples_from=search.get("examples_from"),
        adapt=search.get("adapt"),
        test_figure=check_test_figure(
            search.get("test_figure", DEFAULT_TEST_FIGURE), field="search.test_figure", path=where
        ),
    )


@dataclass(frozen=True)
class SearchNightlyOutcome:
    """One night: the comparison (baseline vs current), its history entry, where things went."""

    comparison: ComparisonReport
    entry: dict[str, Any]
    report_dir: Path
    history: Path
    trend_plot: Path | None
    warnings: tuple[str, ...] = ()  # a trend plot that could not be drawn

    @property
    def passed(self) -> bool:
        return bool(self.entry["passed"])


def _measure_rows(comparison: ComparisonReport, alpha: float) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for c in comparison.report.comparisons:
        decision = c.significance(alpha)
        dropped = c.diff < 0 and decision == "significant"
        rows[c.measure] = {
            "baseline": c.baseline_mean,
            "current": c.system_mean,
            "diff": c.diff,
            "p_value": c.p_value,
            "p_holm": c.p_holm,
            "p_method": c.p_method,
            "p_holm_se": c.p_holm_se,
            "undecided": c.diff < 0 and decision == "undecided",
            "dropped": dropped,
        }
    return rows


async def run_search_nightly(
    cfg: SearchNightlyConfig,
    backend: Backend,
    config: JudgeConfig,
    *,
    store: VerdictStore | None = None,
    pool_run: PoolRun | None = None,
    now: datetime | None = None,
    commit: str | None = None,
) -> SearchNightlyOutcome:
    """Search, judge the new pairs, compare with the baseline run, append the history."""
    when = now or datetime.now(UTC)
    if not cfg.queries.exists():
        raise InputError("no such file", path=str(cfg.queries), field="search.queries")
    if not cfg.config.exists():
        raise InputError("no such file", path=str(cfg.config), field="search.config")
    queries = read_queries(cfg.queries, cfg.query_qrels)
    search_config = load_config(cfg.config, overrides=cfg.overrides or None)
    out = night_folder(cfg.report_dir, when)
    run = await arun_search(queries, search_config, out / "search" / "current.jsonl")
    new_baseline = not cfg.baseline.exists()
    if new_baseline:
        cfg.baseline.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run.dataset_path, cfg.baseline)
    options = SystemsOptions(
        depth=cfg.depth,
        measures=cfg.measures,
        qrels=cfg.qrels,
        confidence=cfg.confidence,
        resamples=cfg.resamples,
        stability_resamples=0,
        test_figure=cfg.test_figure,
    )
    systems = {"baseline": cfg.baseline, "current": Path(run.dataset_path)}
    comparison = await run_comparison(
        systems, out, backend, config, store=store, options=options, pool_run=pool_run
    )
    alpha = 1.0 - cfg.confidence
    measures = _measure_rows(comparison, alpha)
    alert = any(m["dropped"] for m in measures.values())
    entry = {
        "schema": SEARCH_HISTORY_SCHEMA,
        "timestamp": when.astimezone(UTC).isoformat(timespec="seconds"),
        "name": cfg.name,
        "git_commit": commit if commit is not None else git_commit(),
        "backend": backend.name,
        "queries": str(cfg.queries),
        "config": {
            "path": str(cfg.config),
            "hash": search_config.hash,
            "engine": search_config.engine,
            "params": dict(search_config.params),
        },
        "baseline_run": str(cfg.baseline),
        "measures": measures,
        "tested_figure": comparison.report.conventions.get("tested_figure"),
        "calls": comparison.report.pool.calls,
        "passed": not alert,
        "status": "alert" if alert else ("baseline" if new_baseline else "pass"),
        "report_dir": str(out),
    }
    append_history(cfg.history, entry)
    plot, warning = redraw_search_trend(cfg, cfg.measures[0])
    warnings = (warning,) if warning is not None else ()
    return SearchNightlyOutcome(comparison, entry, out, cfg.history, plot, warnings)


def plot_search_trend(entries: list[dict[str, Any]], measure: str) -> bytes | None:
    """The current mean of ``measure`` per night with the baseline's, alerts in red (PNG);
    None without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    xs: list[int] = []
    current: list[float] = []
    baseline: list[float] = []
    alerts: list[bool] = []

    def number(value: Any) -> float:
        return float(value) if isinstance(value, int | float) else math.nan

    for i, e in enumerate(entries):
        row = (e.get("measures") or {}).get(measure)
        if not isinstance(row, dict):
            continue
        xs.append(i)
        current.append(number(row.get("current")))
        baseline.append(number(row.get("baseline")))
        alerts.append(e.get("status") == "alert")
    fig = Figure(figsize=(8.0, 4.0))
    ax = fig.add_subplot()
    if xs:
        ax.plot(xs, baseline, "--", color="grey", label="baseline run")
        ax.plot(xs, current, "-o", color="tab:green", label="tonight's run")
        bad = [(x, y) for x, y, a in zip(xs, current, alerts, strict=True) if a]
        if bad:
            ax.scatter([x for x, _ in bad], [y for _, y in bad], color="tab:red", marker="X", s=80, zorder=3,
                       label="significant drop")  # fmt: skip
        labels = [str(entries[x].get("timestamp", ""))[5:16] for x in xs]
        ax.set_xticks(xs, labels, rotation=30, ha="right", fontsize="small")
    ax.set_ylabel(measure)
    ax.set_title(f"nightly search regression: {len(xs)} night(s)")
    ax.legend(loc="lower left", fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def redraw_search_trend(cfg: SearchNightlyConfig, measure: str) -> tuple[Path | None, str | None]:
    """Redraw the trend plot from this job's history lines: its path (None: no matplotlib, or
    not drawn) and a warning when matplotlib could not draw it (the night is not failed)."""
    entries = [
        e
        for e in read_history(cfg.history)
        if e.get("schema") == SEARCH_HISTORY_SCHEMA and e.get("name") == cfg.name
    ]
    png, warning = drawn_or_warning(lambda: plot_search_trend(entries, measure), "trend plot")
    if png is None:
        return None, warning
    atomic_write_bytes(cfg.trend_plot, png)
    return cfg.trend_plot, None


__all__ = [
    "NIGHTLY_MEASURES",
    "SEARCH_HISTORY_SCHEMA",
    "SearchNightlyConfig",
    "SearchNightlyOutcome",
    "has_search_section",
    "load_search_nightly",
    "plot_search_trend",
    "read_config_file",
    "run_search_nightly",
]
