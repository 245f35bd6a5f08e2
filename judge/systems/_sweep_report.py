"""The experiment section of a comparison report: configurations, best, coverage, calls, heat map.

Markdown and HTML (rendered into ``report.md`` / ``report.html`` by the comparison's views
when the report carries an experiment) and the heat map as a PNG (matplotlib, the ``plot``
extra) when exactly two knobs vary; the tables are the fallback when matplotlib is absent.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from html import escape
from pathlib import PurePath
from typing import Any

from judge.systems._model import ExperimentConfiguration, ExperimentSummary, SystemsReport
from judge.systems._sweep_space import format_value

HEATMAP_FILE = "heatmap.png"


def _f(x: float | None, digits: int = 4) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _ci(r: SystemsReport, name: str, measure: str) -> str:
    s = r.systems.get(name)
    ci = s.ci.get(measure) if s is not None else None
    return "—" if ci is None else f"{ci[0]:.4f} to {ci[1]:.4f}"


def _comparison(r: SystemsReport, name: str, measure: str) -> tuple[str, str]:
    """(diff, Holm p) of ``name`` against the baseline on ``measure`` ("—" for the baseline)."""
    for c in r.comparisons:
        if c.system == name and c.measure == measure:
            p = "—" if c.p_holm is None else f"{c.p_holm:.4f}" if c.p_holm >= 0.0001 else f"{c.p_holm:.1e}"
            if c.p_holm is not None and c.p_holm_se:
                p += f" ± {c.p_holm_se:.4f}"
            return f"{c.diff:+.4f}", p
    return "—", "—"


def _rows(r: SystemsReport, e: ExperimentSummary) -> tuple[list[str], list[list[str]]]:
    ks = sorted({k for c in e.configurations for k in c.coverage}, key=int)
    header = ["configuration", "hash", *e.knobs, e.objective, f"{e.objective} interval", "diff vs baseline",
              "p (Holm)", *(f"judged@{k}" for k in ks)]  # fmt: skip
    rows = []
    for c in e.configurations:
        diff, p = _comparison(r, c.name, e.objective)
        mark = " (best)" if c.name == e.best else ""
        rows.append(
            [
                c.name + mark,
                c.hash[:12],
                *(format_value(c.params.get(k, "—")) for k in e.knobs),
                _f(c.objective),
                _ci(r, c.name, e.objective),
                diff,
                p,
                *(_f(c.coverage.get(k), 3) for k in ks),
            ]
        )
    return header, rows


def heatmap_grid(e: ExperimentSummary) -> tuple[list[Any], list[Any], list[list[float | None]]] | None:
    """(x values, y values, objective[y][x]) when exactly two knobs vary; the first
    configuration at a cell wins. None otherwise."""
    if len(e.knobs) != 2:
        return None
    kx, ky = e.knobs
    xs = _sorted_values(c.params.get(kx) for c in e.configurations)
    ys = _sorted_values(c.params.get(ky) for c in e.configurations)
    cells: dict[tuple[str, str], float | None] = {}
    for c in e.configurations:
        cells.setdefault((repr(c.params.get(kx)), repr(c.params.get(ky))), c.objective)
    grid = [[cells.get((repr(x), repr(y))) for x in xs] for y in ys]
    return xs, ys, grid


def _sorted_values(values: Any) -> list[Any]:
    distinct: dict[str, Any] = {}
    for v in values:
        distinct.setdefault(repr(v), v)
    items = list(distinct.values())
    try:
        return sorted(items)
    except TypeError:
        return items


def heatmap_png(e: ExperimentSummary) -> bytes | None:
    """The heat map of the objective over the two varying knobs (PNG), or None when fewer or
    more knobs vary or matplotlib is not installed."""
    found = heatmap_grid(e)
    if found is None:
        return None
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    import numpy as np

    xs, ys, grid = found
    values = np.array([[math.nan if v is None else v for v in row] for row in grid], dtype=np.float64)
    fig = Figure(figsize=(1.2 + 1.1 * len(xs), 1.0 + 0.7 * len(ys)))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", origin="lower", aspect="auto")
    ax.set_xticks(range(len(xs)), [format_value(x) for x in xs])
    ax.set_yticks(range(len(ys)), [format_value(y) for y in ys])
    ax.set_xlabel(e.knobs[0])
    ax.set_ylabel(e.knobs[1])
    finite = values[np.isfinite(values)]
    middle = float((finite.min() + finite.max()) / 2) if finite.size else 0.0
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v is not None:
                ax.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize="small",
                        color="black" if v > middle else "white")  # fmt: skip
    ax.set_title(f"{e.objective} by {e.knobs[0]} and {e.knobs[1]}")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def experiment_title(e: ExperimentSummary) -> str:
    """``Search experiment: QUERY SET, N configurations`` (the query set's file name)."""
    return f"Search experiment: {PurePath(e.query_set).name}, {len(e.configurations)} configurations"


def _calls_sentence(e: ExperimentSummary) -> str:
    depths = {c.depth for c in e.configurations}
    depth = (
        f"depth {e.depth}"
        if e.depth is not None
        else f"depth {depths.pop()}"
        if len(depths) == 1
        else "depth"
    )
    if e.pairs is None:  # a report written before pairs and calls were told apart
        return f"Judge calls over the whole experiment: {e.calls} ({e.nominal_pairs} nominal pairs)."
    share = "—" if e.pairs_ratio is None else f"{e.pairs_ratio:.1%}"
    per_pair = "—" if e.calls_per_pair is None else f"{e.calls_per_pair:.2f}"
    this_run = "" if e.calls_this_run is None else f", {e.calls_this_run} of them this run"
    return (
        f"Pairs: the judge was asked about {e.pairs} unique pairs of {e.nominal_pairs} nominal "
        f"({len(e.configurations)} configurations x {e.queries} queries x {depth}) = {share}; every other "
        "pair was pooled (several configurations found it) or a human label. "
        f"Calls: {e.calls} over the whole experiment{this_run} ({per_pair} per pair; a verdict from the "
        "cache costs none, a reason is a call of its own)."
    )


def _best_sentence(r: SystemsReport, e: ExperimentSummary) -> str:
    if e.best is None:
        return f"No configuration could be scored on {e.objective}."
    level = f"{float(r.conventions.get('confidence') or 0.95) * 100:g}%"
    baseline = e.configurations[0].name if e.configurations else "—"
    if e.best == baseline:
        vs = " It is the baseline: no configuration scored higher."
    else:
        vs = f" Against the baseline: {e.best_vs_baseline}." if e.best_vs_baseline else ""
    return (
        f"Best on {e.objective}: **{e.best}**, {_f(e.best_value)} "
        f"({level} interval {_ci(r, e.best, e.objective)}).{vs}"
    )


def _p(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}" if x >= 0.0001 else f"{x:.1e}"


def tie_sentence(r: SystemsReport, e: ExperimentSummary) -> str | None:
    """The best's tie group: the configurations its test cannot tell from the best."""
    if e.tie_group is None or not e.pairwise:
        return None
    alpha = round(1.0 - float(r.conventions.get("confidence") or 0.95), 10)
    others = [n for n in e.tie_group if n != e.best]
    figure = r.conventions.get("tested_figure") or "thresholded"
    group = ", ".join(e.tie_group)
    return (
        f"Tie group of the best ({figure} {e.objective}, Holm over all {len(e.pairwise)} pairs of "
        f"configurations, p < {alpha:g} separates): {group}"
        + (
            f" — {len(others)} configuration(s) the test cannot tell from {e.best}."
            if others
            else f" — every other configuration is significantly below {e.best}."
        )
    )


def pairwise_rows(e: ExperimentSummary) -> tuple[list[str], list[list[str]]]:
    """Every pair of configurations: a, b, n, diff (b - a), randomization p, Holm p."""
    header = ["a", "b", "n", "diff (b − a)", "randomization p", "p (Holm, all pairs)"]
    rows = [[p.a, p.b, str(p.n), f"{p.diff:+.4f}", _p(p.p_value), _p(p.p_holm)] for p in e.pairwise]
    return header, rows


def experiment_head(r: SystemsReport) -> list[str]:
    """The answer first: the best with its interval and its test against the baseline,
    then the pairs and calls (markdown paragraphs)."""
    e = r.experiment
    if e is None:
        return []
    ties = tie_sentence(r, e)
    return [_best_sentence(r, e), "", *([ties, ""] if ties else []), _calls_sentence(e), ""]


def experiment_markdown(r: SystemsReport) -> list[str]:
    """The configurations' table and the heat map (after :func:`experiment_head`)."""
    e = r.experiment
    if e is None:
        return []
    header, rows = _rows(r, e)
    lines = [
        "## Experiment",
        "",
        f"Query set `{e.query_set}` ({e.queries} queries); {len(e.configurations)} configurations "
        f"({e.strategy}{': ' + ' '.join(e.space) if e.space else ''}"
        f"{f', seed {e.seed}' if e.strategy == 'trials' else ''}); baseline "
        f"`{e.configurations[0].name if e.configurations else '—'}`.",
        "",
        *_md_table(header, rows),
        "",
        "`judged@k`: the share of a configuration's top k passages with a verdict or a human label "
        "(unjudged ones count as not relevant).",
        "",
    ]
    if e.pairwise:
        head, body = pairwise_rows(e)
        lines += [f"### Every pair of configurations ({e.objective})", "", *_md_table(head, body), ""]
    found = heatmap_grid(e)
    if found is not None:
        xs, ys, grid = found
        lines += [f"### {e.objective} by {e.knobs[1]} (rows) and {e.knobs[0]} (columns)", ""]
        if e.heatmap:
            lines += [f"![heat map]({e.heatmap})", ""]
        head = [f"{e.knobs[1]} \\ {e.knobs[0]}", *(format_value(x) for x in xs)]
        body = [[format_value(y), *(_f(v) for v in row)] for y, row in zip(ys, grid, strict=True)]
        lines += [*_md_table(head, body), ""]
    return lines


def _color(v: float | None, low: float, high: float) -> str:
    if v is None:
        return "#eeeeee"
    t = 0.5 if high <= low else (v - low) / (high - low)
    # white (low) to the report's blue (high)
    r, g, b = (int(255 + (c - 255) * t) for c in (0x33, 0x66, 0xAA))
    return f"#{r:02x}{g:02x}{b:02x}"


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def experiment_html(r: SystemsReport) -> list[str]:
    e = r.experiment
    if e is None:
        return []
    header, rows = _rows(r, e)
    best = escape(_best_sentence(r, e)).replace("**", "")
    parts = [
        f'<p class="summary" id="best"><b>{best}</b></p>',
        *([f'<p id="tie-group">{escape(ties)}</p>'] if (ties := tie_sentence(r, e)) else []),
        f"<p>{escape(_calls_sentence(e))}</p>",
        '<h2 id="experiment">Experiment</h2>',
        f"<p>Query set <code>{escape(e.query_set)}</code> ({e.queries} queries); "
        f"{len(e.configurations)} configurations ({escape(e.strategy)}"
        f"{': ' + escape(' '.join(e.space)) if e.space else ''}).</p>",
        _html_table([escape(h) for h in header], [[escape(c) for c in row] for row in rows]),
        '<p class="muted">judged@k: the share of a configuration\'s top k passages with a verdict or a '
        "human label (unjudged ones count as not relevant).</p>",
    ]
    if e.pairwise:
        pair_head, pair_rows = pairwise_rows(e)
        parts.append(f'<h3 id="pairwise-all">Every pair of configurations ({escape(e.objective)})</h3>')
        parts.append(
            _html_table([escape(h) for h in pair_head], [[escape(c) for c in row] for row in pair_rows])
        )
    found = heatmap_grid(e)
    if found is not None:
        xs, ys, grid = found
        finite = [v for row in grid for v in row if v is not None]
        low, high = (min(finite), max(finite)) if finite else (0.0, 0.0)
        head = [escape(f"{e.knobs[1]} \\ {e.knobs[0]}"), *(escape(format_value(x)) for x in xs)]
        body = "".join(
            f"<tr><th>{escape(format_value(y))}</th>"
            + "".join(f'<td style="background:{_color(v, low, high)}">{_f(v)}</td>' for v in row)
            + "</tr>"
            for y, row in zip(ys, grid, strict=True)
        )
        parts.append(
            f'<h3 id="heatmap">{escape(e.objective)} by {escape(e.knobs[0])} and {escape(e.knobs[1])}</h3>'
        )
        parts.append(
            "<table><thead><tr>"
            + "".join(f"<th>{h}</th>" for h in head)
            + f"</tr></thead><tbody>{body}</tbody></table>"
        )
        if e.heatmap:
            parts.append(
                f'<p class="muted">Also drawn as <code>{escape(e.heatmap)}</code> in the report folder.</p>'
            )
    return parts


def coverage_keys(depths: Sequence[int]) -> list[int]:
    """The k of judged coverage@k: 5 and 10 below the deepest configuration, and its depth."""
    deepest = max(depths, default=10)
    return sorted({k for k in (5, 10) if k < deepest} | {deepest})


__all__ = [
    "HEATMAP_FILE",
    "ExperimentConfiguration",
    "coverage_keys",
    "experiment_head",
    "experiment_html",
    "experiment_markdown",
    "experiment_title",
    "heatmap_grid",
    "heatmap_png",
]
