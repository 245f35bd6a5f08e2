"""Writing a stability report: ``report.json``, ``report.md`` and two PNG plots.

``report.json`` keys (schema ``judge.stability/1``; keys are only ever added):

* ``schema``, ``created`` (UTC ISO time), ``dataset`` {path, queries, passages}, ``backend``
  (a description, never a key), ``judge_config`` (every :class:`JudgeConfig` field),
  ``settings`` (runs, threshold, metric, k, concurrency, parallel_runs, confidence,
  bootstrap_resamples, bootstrap_seed, top), ``conventions`` (text of every convention).
* ``check`` {metric, threshold, relative_spread (null when infinite), spread_infinite,
  passed, status ``pass``|``breach``}.
* ``runs`` [{run, map, score, ndcg@K..., ci {estimate, low, high, half_width, se,
  n_queries, confidence} of the checked figure, queries, unjudged_queries,
  unjudged_passages, calls, prompt_tokens, completion_tokens, cost, elapsed_s, file}].
* ``figures`` {map|score|ndcg@K|<checked measure>: {values, mean, min, max, range, sd, relative_spread, cv}}.
* ``agreement`` {labels, passages, unstable_passages, flip_rate, deviation_rate,
  fleiss_kappa, fleiss_subjects, krippendorff_alpha, alpha_level, unjudged_ratings}.
* ``noise`` {metric, judge {sd, range, half_range}, query_sampling {estimate, low, high,
  half_width, se, n_queries, confidence}, dominant ``judge``|``query_sampling``|``none``|
  ``unknown``, query_se_over_judge_sd, target_half_width, queries_needed,
  queries_needed_comparison, formula}.
* ``query_ranges`` {ap: [...], score: [...]} (per query, dataset order: max - min across runs).
* ``unstable_queries`` [{id, query, metric, values, range, ap, ap_range, score,
  score_range}] and ``unstable_passages`` [{query_id, index, passage_id, labels, p_yes,
  minority, text}], least stable first.
* ``plots`` {map_per_run, query_ranges}: file names beside the report (a plot that could not
  be drawn is left out, and ``warnings`` says why: a plot never fails a run).
* ``warnings`` [text] (only when there is one).
* with labels: ``human_labels`` {source, passages, mapping, convention}; with ``--adapt``
  also ``settings.adapt`` (true) and ``adaptation`` {labels_source, labels_sha256 (null
  when the runs learned from different labelled pairs; then ``labels_note``),
  same_labels_in_every_run, applied_runs, applied (``every run``|``some runs``|``no run``),
  runs_agree, statement, convention, runs [{run, applied, reason, labels_sha256, method,
  features, labels, queries, kappa_alone, kappa_adapted, decided, changed}]} (the
  leave-one-query-out κ of the judge alone and of the rule on the run's labels).

Non-finite numbers are written as ``null`` (the conventions say when that happens).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from judge.io import InputError
from judge.stability._harness import StabilityReport
from judge.store import atomic_write_bytes, atomic_write_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "PLOT_MAP_PER_RUN",
    "PLOT_QUERY_RANGES",
    "atomic_write_bytes",
    "drawn_or_warning",
    "error_bars",
    "plot_map_per_run",
    "plot_query_ranges",
    "render_markdown",
    "require_plots",
    "summary_lines",
    "write_report",
]

PLOT_MAP_PER_RUN = "map_per_run.png"
PLOT_QUERY_RANGES = "query_ranges.png"


PLOT_EXTRA_MESSAGE = "the stability plots need matplotlib: pip install 'judge[plot]'"


def require_plots() -> None:
    """Fail early (exit 2, before any judging) when matplotlib (extra ``plot``) is missing."""
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise InputError(PLOT_EXTRA_MESSAGE) from None


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A matplotlib figure without pyplot's global state; a clear error naming the extra when
    matplotlib is not installed."""
    require_plots()
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def drawn_or_warning(draw: Callable[[], bytes | None], what: str) -> tuple[bytes | None, str | None]:
    """``draw()``'s PNG, or (when matplotlib refuses or fails to draw it) None and a warning
    naming ``what``: a plot never fails a run; the report is written without it. A missing
    matplotlib is not caught here (the commands that need their plots refuse before any work)."""
    try:
        return draw(), None
    except ImportError:
        raise
    except Exception as exc:
        return None, f"the {what} could not be drawn ({type(exc).__name__}: {exc}); written without it"


def error_bars(
    y: npt.NDArray[np.float64], low: Sequence[float], high: Sequence[float]
) -> npt.NDArray[np.float64]:
    """Error bar lengths below and above ``y`` from an interval's ends: missing ends draw no
    bar, and a bar is never negative (an interval of equal values can lie a rounding error
    off its mean, which matplotlib refuses)."""
    err = np.vstack([y - np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64) - y])
    return np.clip(np.nan_to_num(err, nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    return buf.getvalue()


def _label(metric: str) -> str:
    named = {"map": "mAP", "score": "mean score", "expected_map": "expected mAP"}
    return named.get(metric, metric.replace("ndcg", "NDCG"))


def plot_map_per_run(report: StabilityReport) -> bytes:
    """The checked figure per run with its bootstrap interval over queries (PNG bytes).

    The dashed line is the mean over runs; the shaded band is ``mean ± threshold * mean / 2``:
    the runs pass the check when they all fit in a band of that width.
    """
    data = report.data
    metric = data["check"]["metric"]
    runs = data["runs"]
    xs = [r["run"] for r in runs]
    ys = [r[metric] if r[metric] is not None else np.nan for r in runs]
    lows = [r["ci"]["low"] if r["ci"]["low"] is not None else np.nan for r in runs]
    highs = [r["ci"]["high"] if r["ci"]["high"] is not None else np.nan for r in runs]
    y = np.asarray(ys, dtype=np.float64)
    err = error_bars(y, lows, highs)
    fig = new_figure((6.4, 4.0))
    ax = fig.add_subplot()
    ax.errorbar(xs, y, yerr=err, fmt="o", capsize=4, label=f"{_label(metric)} (95% CI over queries)")
    mean = data["figures"][metric]["mean"]
    if mean is not None:
        half = data["check"]["threshold"] * abs(mean) / 2.0
        ax.axhline(mean, linestyle="--", color="grey", linewidth=1, label="mean over runs")
        ax.axhspan(mean - half, mean + half, color="tab:green", alpha=0.15, label="mean ± threshold/2")
    spread = data["check"]["relative_spread"]
    spread_text = "inf" if spread is None else f"{spread:.2%}"
    ax.set_title(
        f"{_label(metric)} per run: spread {spread_text} "
        f"(threshold {data['check']['threshold']:.2%}) — {data['check']['status'].upper()}"
    )
    ax.set_xlabel("run")
    ax.set_ylabel(_label(metric))
    ax.set_xticks(xs)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    return _png(fig)


def plot_query_ranges(report: StabilityReport) -> bytes:
    """Histograms of per-query AP and score ranges (max - min across runs) (PNG bytes)."""
    ranges = report.data["query_ranges"]
    fig = new_figure((8.0, 3.6))
    bins = [i / 20 for i in range(21)]
    for i, (key, title) in enumerate((("ap", "AP"), ("score", "score"))):
        ax = fig.add_subplot(1, 2, i + 1)
        values = np.clip(np.asarray(ranges[key], dtype=np.float64), 0.0, 1.0)
        ax.hist(values, bins=bins, color="tab:blue", edgecolor="white")
        moved = int(np.count_nonzero(values > 0))
        ax.set_title(f"per-query {title} range across runs ({moved}/{values.size} moved)", fontsize="small")
        ax.set_xlabel(f"max - min of {title}")
        ax.set_ylabel("queries")
    fig.tight_layout()
    return _png(fig)


def _pct(value: float | None) -> str:
    return "inf" if value is None else f"{value:.2%}"


def _f(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _count(value: int | None) -> str:
    return "n/a" if value is None else str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _vals(values: Sequence[Any]) -> str:
    out = []
    for v in values:
        if v is None:
            out.append("—")
        elif isinstance(v, float):
            out.append(f"{v:.3f}")
        else:
            out.append(str(v))
    return " / ".join(out)


def summary_lines(report: StabilityReport) -> list[str]:
    """A few lines for a terminal: verdict, spreads, agreement, noise."""
    d = report.data
    chk, agr, noise = d["check"], d["agreement"], d["noise"]
    metric = chk["metric"]
    fig = d["figures"][metric]
    status = "PASS" if chk["passed"] else "BREACH"
    lines = [
        f"{status}: {_label(metric)} relative spread {_pct(chk['relative_spread'])} over "
        f"{d['settings']['runs']} runs (threshold {chk['threshold']:.2%})",
        f"  {_label(metric)} per run: {_vals(fig['values'])}; CV {_pct(fig['cv'])}",
    ]
    for name, f in d["figures"].items():
        if name != metric:
            lines.append(f"  {_label(name)}: mean {_f(f['mean'])}, spread {_pct(f['relative_spread'])}")
    lines.append(
        f"  flip rate {agr['flip_rate']:.2%} ({agr['unstable_passages']}/{agr['passages']} passages), "
        f"Fleiss' kappa {_f(agr['fleiss_kappa'], 3)}, Krippendorff's alpha "
        f"({agr['alpha_level']}) {_f(agr['krippendorff_alpha'], 3)}"
    )
    qs = noise["query_sampling"]
    lines.append(
        f"  judge noise SD {_f(noise['judge']['sd'])} vs query-sampling SE {_f(qs['se'])} "
        f"(95% CI [{_f(qs['low'])}, {_f(qs['high'])}] over {qs['n_queries']} queries): "
        f"{noise['dominant'].replace('_', ' ')} dominates"
    )
    if noise["queries_needed"] is not None:
        lines.append(
            f"  queries for a CI half-width <= {_f(noise['target_half_width'])}: "
            f"{noise['queries_needed']} (comparing two systems: {noise['queries_needed_comparison']})"
        )
    lines += _determinism_lines(d)
    return lines


def _determinism_lines(d: dict[str, Any]) -> list[str]:
    """Borderline verdicts (liable to flip on another machine) and the backend fingerprint."""
    lines: list[str] = []
    border = d.get("borderline")
    if border and border.get("count"):
        lines.append(
            f"  {border['count']} borderline verdicts (P(yes) within {border['margin']:g} of "
            f"{_threshold_text(border['threshold'])}): liable to flip on another machine (see expected mAP)"
        )
    if d.get("backend_fingerprint"):
        lines.append(f"  backend fingerprint: {d['backend_fingerprint']}")
    human = d.get("human_labels")
    if human:
        lines.append(
            f"  {human['passages']} passage(s) decided by human labels ({human['source']}) in every run"
        )
    adapt = d.get("adaptation")
    if adapt:
        digest = adapt["labels_sha256"]
        labels = f"labels sha256 {digest[:12]}" if digest else "the runs learned from different labels"
        lines.append(f"  --adapt ({labels}): {adapt['statement']}")
    return lines


def _adaptation(d: dict[str, Any]) -> list[str]:
    """The ``--adapt`` section of the Markdown report: one hash, each run's rule."""
    a = d.get("adaptation")
    if not a:
        return []
    digest = a["labels_sha256"]
    out = [
        "",
        "## Adapted decision (--adapt)",
        "",
        f"Labels: {a['labels_source']}, `labels_sha256` "
        + (f"**{digest}** in every run." if digest else f"**differs between runs**: {a['labels_note']}."),
        "",
        f"**{a['statement'][0].upper()}{a['statement'][1:]}.**",
        "",
        "| run | applied | LOQO κ alone | LOQO κ adapted | decided | changed | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in a["runs"]:
        out.append(
            f"| {r['run']} | {'yes' if r['applied'] else 'no'} | {_f(r['kappa_alone'], 3)} | "
            f"{_f(r['kappa_adapted'], 3)} | {r['decided']} | {r['changed']} | {_cell(r['reason'])} |"
        )
    return [*out, "", f"Convention: {a['convention']}."]


def _least_stable(d: dict[str, Any], metric: str) -> list[str]:
    """The least stable queries' and passages' tables of the Markdown report."""
    queries = [
        [_cell(q["id"]), _cell(q["query"][:60]), _vals(q["values"]), f"{q['range']:.3f}", _vals(q["score"])]
        for q in d["unstable_queries"]
    ]
    passages = [
        [
            _cell(p["query_id"]),
            str(p["index"] + 1),
            _cell(str(p["passage_id"] or "—")),
            _vals(p["labels"]),
            _vals(p["p_yes"]),
            _cell(p["text"][:80]),
        ]
        for p in d["unstable_passages"]
    ]
    return [
        *_table(
            ["id", "query", f"{metric_name(metric)} per run", "range", "score per run"],
            queries,
            "Every query has the same figures in every run.",
        ),
        *["", "## Least stable passages", ""],
        *_table(
            ["query", "rank", "passage id", "label per run", "p_yes per run", "text"],
            passages,
            "Every passage got the same label in every run.",
        ),
    ]


def _table(columns: list[str], rows: list[list[str]], empty: str) -> list[str]:
    """A Markdown table of ``rows`` under ``columns``, or the sentence ``empty`` without rows."""
    if not rows:
        return [empty]
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)] + [
        "| " + " | ".join(row) + " |" for row in rows
    ]


def _borderline_and_appendix(d: dict[str, Any], metric: str) -> list[str]:
    """Borderline verdicts, backend fingerprint, plots and conventions of the Markdown report."""
    out: list[str] = []
    border = d.get("borderline")
    if border is not None:
        out += ["", "## Borderline verdicts (liable to flip on another machine)", ""]
        out.append(
            f"P(yes) within {border['margin']:g} of the threshold {_threshold_text(border['threshold'])}: "
            f"{border['count']}. Runs on one machine agree bit for bit; another CPU's llama.cpp kernels "
            "round differently and may flip these (the expected mAP does not depend on them)."
        )
        if border["verdicts"]:
            out += ["", "| query | rank | passage id | verdict | p_yes |", "|---|---|---|---|---|"]
            for b in border["verdicts"]:
                out.append(
                    f"| {_cell(str(b['query_id']))} | {b['index'] + 1} | "
                    f"{_cell(str(b['passage_id'] or '—'))} | {b['verdict']} | {_f(b['p_yes'], 4)} |"
                )
    if d.get("backend_fingerprint"):
        out += ["", f"Backend fingerprint: `{d['backend_fingerprint']}`"]
    plots = d.get("plots", {})
    if plots or d.get("warnings"):
        out += ["", "## Plots", ""]
        titles = {"map_per_run": f"{_label(metric)} per run", "query_ranges": "per-query ranges"}
        shown = [f"![{titles.get(key, key)}]({name})" for key, name in plots.items()]
        out += [line for image in shown for line in (image, "")][:-1]
        for warning in d.get("warnings") or []:
            out += ["", f"Warning: {warning}."]
    out += ["", "## Conventions", ""]
    for key, value in d["conventions"].items():
        if key == "measures" and isinstance(value, dict):
            out.append("- measures (registry, label-free conventions):")
            for name, params in value.items():
                rest = ", ".join(f"{p}={v}" for p, v in params.items() if p != "key")
                out.append(f"  - {_label(name)}: `{params.get('key', name)}` ({rest})")
        else:
            out.append(f"- {key}: {value}")
    return out


def render_markdown(report: StabilityReport) -> str:
    """The whole report as Markdown (plots referenced by file name)."""
    d = report.data
    chk, agr, noise, cfg = d["check"], d["agreement"], d["noise"], d["judge_config"]
    metric = chk["metric"]
    metrics = list(d["figures"])
    status = "PASS" if chk["passed"] else "BREACH"
    out: list[str] = [
        f"# Stability report: {d['dataset']['path'] or 'dataset'}",
        "",
        f"**{status}**: relative spread of {_label(metric)} across {d['settings']['runs']} runs = "
        f"**{_pct(chk['relative_spread'])}** (threshold {chk['threshold']:.2%}).",
        "",
        f"- created: {d['created']}",
        f"- backend: `{d['backend']}`",
        f"- dataset: {d['dataset']['queries']} queries, {d['dataset']['passages']} passages",
        f"- judge: mode {cfg['mode']}, language {cfg['language']}, probability {cfg['probability']}, "
        f"samples {cfg['samples']}, temperature {cfg['temperature']}, seed {cfg['seed']}",
        "- cache: bypassed (every run asks the backend)",
        "",
        "## Per run",
        "",
        "| run | "
        + " | ".join(_label(m) for m in metrics)
        + f" | {_label(metric)} 95% CI | unjudged | calls | time (s) |",
        "|---|" + "---|" * len(metrics) + "---|---|---|---|",
    ]
    for r in d["runs"]:
        out.append(
            f"| {r['run']} | "
            + " | ".join(_f(r[m]) for m in metrics)
            + f" | [{_f(r['ci']['low'])}, {_f(r['ci']['high'])}] | {r['unjudged_passages']} | "
            + f"{r['calls']} | {r['elapsed_s']:.1f} |"
        )
    out += _adaptation(d)
    out += [
        "",
        "## Across runs",
        "",
        "| figure | mean | min | max | relative spread | CV |",
        "|---|---|---|---|---|---|",
    ]
    for m in metrics:
        f = d["figures"][m]
        out.append(
            f"| {_label(m)} | {_f(f['mean'])} | {_f(f['min'])} | {_f(f['max'])} | "
            f"{_pct(f['relative_spread'])} | {_pct(f['cv'])} |"
        )
    out += [
        "",
        "## Verdict agreement across runs",
        "",
        f"- passages: {agr['passages']}; unstable (label not identical in every run): "
        f"{agr['unstable_passages']} → **flip rate {agr['flip_rate']:.2%}**",
        "- deviation rate (labels differing from the passage's most common label): "
        f"{agr['deviation_rate']:.2%}",
        f"- Fleiss' kappa (runs as raters, {agr['fleiss_subjects']} passages judged in every run): "
        f"{_f(agr['fleiss_kappa'], 3)}",
        f"- Krippendorff's alpha ({agr['alpha_level']}): {_f(agr['krippendorff_alpha'], 3)}",
        f"- unjudged ratings: {agr['unjudged_ratings']}",
        "",
        "## Judge noise vs query-sampling noise",
        "",
    ]
    qs = noise["query_sampling"]
    out += [
        f"- judge noise (run to run): SD {_f(noise['judge']['sd'])}, range {_f(noise['judge']['range'])}",
        f"- query sampling: {qs['confidence']:.0%} bootstrap CI of {_label(metric)} over "
        f"{qs['n_queries']} queries [{_f(qs['low'])}, {_f(qs['high'])}] "
        f"(half-width {_f(qs['half_width'])}, SE {_f(qs['se'])})",
        f"- dominant: **{noise['dominant'].replace('_', ' ')}** "
        f"(query SE / judge SD = {_f(noise['query_se_over_judge_sd'], 1)})",
        f"- queries needed for a CI half-width ≤ threshold × |mean| = {_f(noise['target_half_width'])}: "
        f"**{_count(noise['queries_needed'])}**; to compare two independent systems at that margin: "
        f"{_count(noise['queries_needed_comparison'])}",
        f"- formula: `{noise['formula']}` (the half-width shrinks as 1/√n)",
        "",
        "## Least stable queries",
        "",
    ]
    out += _least_stable(d, metric)
    out += _borderline_and_appendix(d, metric)
    return "\n".join(out) + "\n"


def metric_name(metric: str) -> str:
    return "AP" if metric == "map" else metric


def write_report(report: StabilityReport, out_dir: str | Path) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and the plots into ``out_dir``; returns their paths
    (a plot that could not be drawn is not among them: ``report.data["warnings"]`` says why).

    ``runs/run-<i>.jsonl`` are written by the harness itself as each run completes.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "markdown": out / "report.md"}
    plots: dict[str, str] = {}
    for key, name, draw in (
        ("map_per_run", PLOT_MAP_PER_RUN, plot_map_per_run),
        ("query_ranges", PLOT_QUERY_RANGES, plot_query_ranges),
    ):
        png, warning = drawn_or_warning(partial(draw, report), f"plot {name}")
        if png is None:
            (out / name).unlink(missing_ok=True)  # never an earlier run's plot beside this report
            report.data.setdefault("warnings", []).append(warning)
            continue
        atomic_write_bytes(out / name, png)
        plots[key] = name
        paths[key] = out / name
    report.data["plots"] = plots
    atomic_write_text(
        paths["json"], json.dumps(report.data, ensure_ascii=False, indent=2, allow_nan=False) + "\n"
    )
    atomic_write_text(paths["markdown"], render_markdown(report))
    return paths


def _threshold_text(threshold: float | list[float]) -> str:
    """One threshold, or (language auto) each language's template's."""
    if isinstance(threshold, list):
        return " / ".join(f"{t:g}" for t in threshold) + " (per query language)"
    return f"{threshold:g}"
