"""The views of a comparison of systems: ``report.md``, ``report.html`` and the
differences (the queries where the systems differ most, as data for the server's viewer).

The HTML page is one self-contained file: inline CSS, inline SVG charts drawn here, no
script, no font or image from anywhere (it opens offline); UTF-8 with a ``<meta charset>``
so Chinese queries, passages and reasons render. Sections: the verdict in one sentence per
system, the pool, the systems' means, the means with their bootstrap intervals as a chart,
the comparisons, the per-query differences as a chart, the queries where the systems
differ most (each system's top passages with verdicts and reasons; in an experiment two
configurations', :func:`example_systems`), then conventions.
"""

from __future__ import annotations

import colorsys
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

import numpy as np

from judge.judging import PassageVerdict
from judge.metrics import UNDECIDED, Evaluation, Measure
from judge.systems._inputs import Inputs, SystemInput
from judge.systems._model import SystemComparison, SystemsReport
from judge.systems._pool import Pool, PoolVerdicts
from judge.systems._ppi_report import ppi_html, ppi_markdown
from judge.systems._scoring import Paired, system_verdicts
from judge.systems._sweep_report import (
    experiment_head,
    experiment_html,
    experiment_markdown,
    experiment_title,
)

_PALETTE = ("#3366aa", "#dd7733", "#339966", "#aa3377", "#7766bb", "#999933", "#44aaaa", "#bb5555")
_WIN, _LOSS, _TIE = "#2a9d63", "#d1495b", "#999999"


def palette(n: int) -> list[str]:
    """``n`` colours, none twice: the report's eight, then hues a golden angle apart at
    varied brightness, skipping any already given (a chart or block of more than eight
    systems never repeats a colour)."""
    colors = list(_PALETTE[:n])
    seen = set(colors)
    step = 0
    while len(colors) < n:
        step += 1
        value = 0.45 + 0.4 * ((step * 0.7548776662466927) % 1.0)
        rgb = colorsys.hsv_to_rgb((step * 0.6180339887498949) % 1.0, 0.65, value)
        color = "#" + "".join(f"{round(c * 255):02x}" for c in rgb)
        if color not in seen:
            seen.add(color)
            colors.append(color)
    return colors


@dataclass
class ReportData:
    """What the renderers need beyond the report: inputs, pool, verdicts, per-query values."""

    report: SystemsReport
    inputs: Inputs
    pool: Pool
    verdicts: PoolVerdicts
    evaluations: Mapping[str, Evaluation | None]
    paired: Sequence[Paired] | Callable[[], Sequence[Paired]]
    """The per-query differences of each comparison, or how to compute them when needed."""
    measures: tuple[Measure, ...]
    level: int
    mode: str
    top_queries: int = 10
    top_passages: int = 5
    thresholds: Mapping[str, float] = field(default_factory=dict)
    """The P(yes) threshold each verdict template decided with (binary probability mode)."""
    objective: str | None = None
    """An experiment's objective measure, known before its section is added to the report
    (its reasons on request are asked before): the example block then compares two
    configurations (:func:`example_systems`). None: a comparison of systems."""

    def differences(self) -> Sequence[Paired]:
        if callable(self.paired):
            self.paired = self.paired()
        return self.paired

    @property
    def primary(self) -> str | None:
        """The measure the per-query views use: an experiment's objective, else ``map`` if
        compared, else the first."""
        names = [m.trec_name for m in self.measures]
        if self.experiment_objective in names:
            return self.experiment_objective
        return "map" if "map" in names else (names[0] if names else None)

    @property
    def experiment_objective(self) -> str | None:
        """The objective of an experiment (None: a comparison of systems)."""
        return self.report.experiment.objective if self.report.experiment is not None else self.objective


def _f(x: float | int | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{digits}f}"


def _p(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x:.4f}" if x >= 0.0001 else f"{x:.1e}"


def _signed(x: float) -> str:
    return f"{x:+.4f}"


def _scale_sentence(r: SystemsReport) -> str:
    """How human labels and the judge met, and what order stability redraws."""
    conv = r.conventions
    scale = conv.get("scale", "binary")
    mapping = conv.get("human_labels_mapping")
    text = f"Scale: {scale} (the judge's); relevance level {conv.get('relevance_level')}."
    if isinstance(mapping, dict):
        source = conv.get("qrels_level_source")
        text += f" Human labels ({mapping.get('source')}): {mapping.get('rule')}" + (
            f" ({source})." if source else "."
        )
    return text + (
        f" Order stability redraws only the judge's verdicts: {r.pool.human_labels} pair(s) fixed by people."
    )


def _alpha(r: SystemsReport) -> float:
    confidence = r.conventions.get("confidence", 0.95)
    return round(1.0 - float(confidence), 10) if isinstance(confidence, int | float) else 0.05


def _significant(c: SystemComparison, alpha: float) -> bool:
    return c.significance(alpha) == "significant"


def _p_holm(c: SystemComparison, alpha: float) -> str:
    """The Holm p as the tables print it: with its Monte Carlo error, and undecided said."""
    text = _p(c.p_holm) if not c.p_holm_se else f"{_p(c.p_holm)} ± {_p(c.p_holm_se)}"
    return text + (" (undecided)" if c.significance(alpha) == "undecided" else "")


def _p_raw(c: SystemComparison) -> str:
    return _p(c.p_value) if c.p_method == "exact" else f"{_p(c.p_value)} ± {_p(c.p_value_se)}"


def _interval(low: float | None, high: float | None) -> str:
    lo = "-inf" if low is None else _f(low)
    hi = "+inf" if high is None else _f(high)
    return f"{lo} to {hi}"


def _test_interval(c: SystemComparison) -> str:
    return _interval(c.randomization_ci_low, c.randomization_ci_high)


def _verdict_sentence(c: SystemComparison, alpha: float = 0.05, comparisons: int = 1) -> str:
    """One sentence whose interval, p-value and verdict come from the same test: the
    randomization test's p with that test's own interval, then its Holm adjustment (the
    verdict); the bootstrap CI is named as such, and a disagreement with the test is said."""
    level = f"{(1 - alpha) * 100:g}%"
    decision = c.significance(alpha)
    verdict = (
        ("better than" if c.diff > 0 else "worse than")
        if decision == "significant"
        else "not significantly different from"
        if decision == "not significant"
        else "undecided against"
    )
    stable = "" if c.order_stability is None else f"; order stability {c.order_stability:.3f}"
    boot_excludes = c.ci_low > 0 or c.ci_high < 0
    test_rejects = c.p_value < alpha
    note = ""
    if boot_excludes and not test_rejects:
        note = (
            " (the bootstrap CI excludes 0 but the randomization test does not reject: "
            "the verdict follows the test)"
        )
    elif test_rejects and not boot_excludes:
        note = (
            " (the randomization test rejects but the bootstrap CI includes 0: the verdict follows the test)"
        )
    holm = (
        f"Holm-adjusted over {comparisons} comparisons p={_p(c.p_holm)}"
        if comparisons > 1
        else f"Holm p={_p(c.p_holm)}"
    )
    if c.p_holm_se:
        holm += f" ± {_p(c.p_holm_se)} (Monte Carlo)"
    if decision == "undecided":
        holm += f"; {UNDECIDED.replace('alpha', f'{alpha:g}')}"
    method = "exact" if c.p_method == "exact" else f"Monte Carlo, se {_p(c.p_value_se)}"
    return (
        f"{c.system} is {verdict} {c.baseline} on {c.measure} ({holm}): diff {_signed(c.diff)}; "
        f"randomization test p={_p(c.p_value)} ({method}), its {level} interval {_test_interval(c)}; "
        f"bootstrap {level} CI {_f(c.ci_low)} to {_f(c.ci_high)}{note}; "
        f"wins {c.wins}, ties {c.ties}, losses {c.losses} over {c.n} queries{stable}"
    )


# ---------------------------------------------------------------------------- markdown
def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def _adaptive_rows(r: SystemsReport) -> tuple[str, list[list[str]]]:
    """``--until-decided``: the headline and one row per comparison (decided or not, the
    decision, its confidence, pairs judged when it was decided against the full pool)."""
    a = r.adaptive
    if a is None:
        return "", []
    share = "" if a.fraction is None else f" ({a.fraction:.0%})"
    head = (
        f"Judged {a.judged_pairs} of the full pool's {a.pool_pairs} pairs{share} in {a.rounds} rounds; "
        f"{a.decided} comparison(s) decided, {a.undecided} undecided (stopped: {a.stop}). A decision is "
        f"which system is better and whether significantly (Holm p < {a.alpha:g}); decided = it holds in at "
        f"least {a.confidence:g} of {a.draws} draws of the unjudged pairs from the prior ({a.prior})."
    )
    rows: list[list[str]] = []
    for c in r.comparisons:
        d = c.adaptive
        if d is None:
            continue
        rows.append(
            [
                c.system,
                c.measure,
                "decided" if d.decided else "undecided",
                d.decision,
                f"{d.confidence:.3f}",
                _signed(d.expected_diff),
                f"{d.judged_pairs if d.judged_pairs is not None else '–'} / {d.pool_pairs}",
            ]
        )
    return head, rows


_ADAPTIVE_HEADER = ("system", "measure", "status", "decision", "confidence", "expected diff", "judged / pool")


def _adaptive_md(r: SystemsReport) -> list[str]:
    head, rows = _adaptive_rows(r)
    if not head:
        return []
    return ["## Adaptive judging (--until-decided)", "", head, "", *_md_table(_ADAPTIVE_HEADER, rows), ""]


def _adaptive_html(r: SystemsReport) -> list[str]:
    head, rows = _adaptive_rows(r)
    if not head:
        return []
    return [
        '<h2 id="adaptive">Adaptive judging (--until-decided)</h2>',
        f"<p>{escape(head)}</p>",
        _html_table(list(_ADAPTIVE_HEADER), [[escape(x) for x in row] for row in rows], left=4),
    ]


def render_markdown(data: ReportData) -> str:
    r = data.report
    measure_names = [m.trec_name for m in data.measures]
    title = experiment_title(r.experiment) if r.experiment else "Systems comparison (judge compare-systems)"
    lines = [f"# {title}", ""]
    primary = data.primary
    alpha = _alpha(r)
    sentences = [
        f"- {_verdict_sentence(c, alpha, len(r.comparisons))}" for c in r.comparisons if c.measure == primary
    ]
    if r.experiment:
        # The answer first: the best, its test, the calls, the table and the heat map; then
        # each configuration's sentence.
        lines += experiment_head(r) + experiment_markdown(r)
        if sentences:
            lines += [f"## Each configuration against the baseline ({primary})", "", *sentences, ""]
    elif sentences:
        lines += [*sentences, ""]
    p = r.pool
    lines += [
        "## Pool",
        "",
        f"{p.queries} queries; {p.pairs} (query, passage) pairs over all systems, {p.unique_pairs} unique: "
        f"{p.human_labels} from human labels, {p.judged} judged, {p.unjudged} unjudged. "
        f"LLM calls this run: {p.calls}; pooling saved {p.calls_saved} judgments.",
        "",
        _scale_sentence(r),
        "",
        "## Systems",
        "",
    ]
    header = ["system", "queries", *measure_names, "map_isolated"]
    rows = [
        [
            name,
            str(s.queries),
            *(_f(s.measures.get(m)) for m in measure_names),
            _f(s.measures.get("map_isolated")),
        ]
        for name, s in r.systems.items()
    ]
    lines += _md_table(header, rows)
    lines += [
        "",
        "Pooled measures score every system against the same judged pool (judge trec on pool.qrels). "
        "`map_isolated` is each list judged alone (AP's denominator: the relevant passages that list "
        "found), which rewards finding few; compare systems on the pooled figures.",
        "",
    ]
    lines += ppi_markdown(r)
    lines += [
        "## Comparisons (each system against the baseline)",
        "",
    ]
    if r.comparisons:
        level = f"{(1 - alpha) * 100:g}%"
        header = ["system", "measure", "n", "baseline", "system mean", "diff", "randomization p",
                  f"randomization {level} interval", "p (Holm)", f"bootstrap {level} CI", "t-test p", "W/T/L",
                  "order stability"]  # fmt: skip
        rows = [
            [
                c.system,
                c.measure,
                str(c.n),
                _f(c.baseline_mean),
                _f(c.system_mean),
                _signed(c.diff),
                _p_raw(c),
                _test_interval(c),
                _p_holm(c, alpha),
                f"{_f(c.ci_low)} to {_f(c.ci_high)}",
                _p(c.t_test_p),
                f"{c.wins}/{c.ties}/{c.losses}",
                _f(c.order_stability, 3),
            ]
            for c in r.comparisons
        ]
        lines += _md_table(header, rows)
    else:
        lines.append("No comparison could be made (see warnings).")
    lines.append("")
    if r.not_in_all_systems:
        lines += [
            "## Queries not in every system (left out of the paired tests)",
            "",
            ", ".join(f"`{q}`" for q in r.not_in_all_systems),
            "",
        ]
    lines += _adaptive_md(r)
    if r.warnings:
        lines += ["## Warnings", "", *(f"- {w}" for w in r.warnings), ""]
    lines += [
        "## Reproduce",
        "",
        "```",
        *(
            f"judge trec -l {data.level} -m {' -m '.join(measure_names)} pool.qrels runs/{name}.run"
            for name in r.systems
        ),
        "```",
        "",
        "## Conventions",
        "",
        "```json",
        json.dumps(r.conventions, ensure_ascii=False, indent=2),
        "```",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- SVG charts
def _svg_text(
    x: float, y: float, text: str, *, anchor: str = "start", size: int = 12, fill: str = "#222"
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}">'
        f"{escape(text)}</text>"
    )


def means_chart(data: ReportData) -> str:
    """One panel per measure: each system's mean (dot) and bootstrap interval (line)."""
    r = data.report
    names = list(r.systems)
    colors = palette(len(names))
    label_w, plot_w, right_w, row_h = 150, 380, 70, 22
    panels: list[str] = []
    y = 0
    for m in data.measures:
        key = m.trec_name
        values = [(n, r.systems[n].measures.get(key), r.systems[n].ci.get(key)) for n in names]
        highs = [ci[1] for _, _, ci in values if ci is not None] + [
            float(v) for _, v, _ in values if isinstance(v, int | float)
        ]
        top = max([1.0, *highs]) if highs else 1.0
        lows = [ci[0] for _, _, ci in values if ci is not None]
        bottom = min([0.0, *lows]) if lows else 0.0
        span = top - bottom or 1.0

        def xpos(v: float, bottom: float = bottom, span: float = span) -> float:
            return label_w + (v - bottom) / span * plot_w

        panels.append(_svg_text(4, y + 14, key, size=13, fill="#000"))
        y += 22
        for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
            tick = bottom + frac * span
            x = xpos(tick)
            panels.append(
                f'<line x1="{x:.1f}" y1="{y - 4}" x2="{x:.1f}" y2="{y + row_h * len(names)}" '
                'stroke="#e4e4e4"/>'
            )
            panels.append(
                _svg_text(
                    x, y + row_h * len(names) + 12, f"{tick:.2f}", anchor="middle", size=10, fill="#666"
                )
            )
        for i, (name, value, ci) in enumerate(values):
            cy = y + i * row_h + row_h / 2
            color = colors[i]
            panels.append(_svg_text(label_w - 8, cy + 4, name, anchor="end"))
            if ci is not None:
                panels.append(
                    f'<line x1="{xpos(ci[0]):.1f}" y1="{cy:.1f}" x2="{xpos(ci[1]):.1f}" y2="{cy:.1f}" '
                    f'stroke="{color}" stroke-width="2">'
                    f"<title>{escape(f'{name} {key} CI {ci[0]:.4f} to {ci[1]:.4f}')}</title></line>"
                )
            if isinstance(value, int | float):
                panels.append(
                    f'<circle cx="{xpos(float(value)):.1f}" cy="{cy:.1f}" r="5" fill="{color}">'
                    f"<title>{escape(f'{name} {key} = {float(value):.4f}')}</title></circle>"
                )
                panels.append(_svg_text(label_w + plot_w + 8, cy + 4, f"{float(value):.4f}", size=11))
        y += row_h * len(names) + 26
    width = label_w + plot_w + right_w
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" width="{width}" height="{y}" '
        f'viewBox="0 0 {width} {y}"><title>Means with {escape(str(r.conventions.get("bootstrap", "")))} '
        f"intervals</title>{''.join(panels)}</svg>"
    )


def difference_chart(p: Paired) -> str:
    """Per-query differences (system - baseline), sorted, as bars around zero."""
    c = p.comparison
    order = np.argsort(-p.differences, kind="stable")
    d = p.differences[order]
    qids = [p.qids[i] for i in order]
    n = d.shape[0]
    width, height, pad = 640, 200, 30
    plot_w = width - 2 * pad
    bar = plot_w / max(n, 1)
    scale = float(np.max(np.abs(d))) if n else 0.0
    scale = scale if scale > 0 else 1.0
    zero = height / 2
    parts = [
        f'<line x1="{pad}" y1="{zero}" x2="{width - pad}" y2="{zero}" stroke="#444"/>',
        _svg_text(pad, 14, f"+{scale:.3f}", size=10, fill="#666"),
        _svg_text(pad, height - 4, f"-{scale:.3f}", size=10, fill="#666"),
        _svg_text(width - pad, 14, f"{c.system} − {c.baseline}, {c.measure}", anchor="end", size=11),
    ]
    for i, (value, qid) in enumerate(zip(d.tolist(), qids, strict=True)):
        h = abs(value) / scale * (height / 2 - 20)
        x = pad + i * bar
        if value > 1e-12:
            color, y0 = _WIN, zero - h
        elif value < -1e-12:
            color, y0 = _LOSS, zero
        else:
            color, y0, h = _TIE, zero - 1, 2
        parts.append(
            f'<rect x="{x:.2f}" y="{y0:.2f}" width="{max(bar - 0.5, 0.5):.2f}" height="{max(h, 1):.2f}" '
            f'fill="{color}"><title>{escape(f"{qid}: {value:+.4f}")}</title></rect>'
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">'
        f"<title>{escape(f'per-query {c.measure}: {c.system} minus {c.baseline}')}</title>"
        f"{''.join(parts)}</svg>"
    )


# ---------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:-apple-system,"Segoe UI","Noto Sans CJK SC","PingFang SC","Microsoft YaHei",
"Hiragino Sans GB","WenQuanYi Micro Hei",Arial,sans-serif;margin:2em auto;max-width:1200px;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #ddd;padding:.25em .55em;text-align:right;vertical-align:top}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.sig{font-weight:bold}.win{color:#2a9d63}.loss{color:#d1495b}
.summary li{margin:.3em 0}.chart{display:block;margin:.6em 0;max-width:100%;height:auto}
.query{border:1px solid #ddd;border-radius:6px;margin:1em 0;padding:.6em 1em}
.query h3{margin:.2em 0 .5em;font-size:1.05em}
.cols{display:flex;gap:1em;flex-wrap:wrap}.col{flex:1 1 320px;min-width:280px}
.col ol{padding-left:1.6em;margin:.3em 0}.col li{margin:.35em 0}
.badge{display:inline-block;border-radius:3px;padding:0 .4em;font-size:.8em;color:#fff;margin-right:.3em}
.yes{background:#2a9d63}.no{background:#888}.unjudged{background:#c0892b}.unpooled{background:#bbb}
.human{outline:2px solid #3366aa}
.reason{color:#555;font-size:.9em}.text{font-size:.9em}.muted{color:#777;font-size:.9em}
pre{background:#f7f7f7;padding:.6em;overflow:auto;font-size:.85em}
"""


def p_yes_text(p: float, threshold: float | None, mode: str) -> str:
    """P(yes) beside what it was compared with: ``p=0.80 < 0.834`` (binary probability mode:
    yes iff p >= threshold), ``P(yes)=0.80, grade by argmax`` (graded), ``p=0.67`` alone
    when no threshold decided (a share of votes). Digits are added until p and the threshold
    print differently, so the sign shown is never contradicted by the rounding."""
    if mode == "graded":
        return f"P(yes)={p:.2f}, grade by argmax"
    if threshold is None:
        return f"p={p:.2f}"
    digits = 2
    while digits < 6 and f"{p:.{digits}f}" == f"{threshold:.{digits}f}" and p != threshold:
        digits += 1
    sign = "≥" if p >= threshold else "<"
    return f"p={p:.{digits}f} {sign} {threshold:g}"


def _badge(v: PassageVerdict, mode: str, thresholds: Mapping[str, float] | None = None) -> str:
    thresholds = thresholds or {}
    if v.backend == "human":
        return (
            f'<span class="badge yes human">human {v.grade}</span>'
            if v.verdict == "yes"
            else (f'<span class="badge no human">human {v.grade}</span>')
        )
    if not v.judged:
        if v.template_id == "":
            return '<span class="badge unpooled">not pooled</span>'
        return '<span class="badge unjudged">unjudged</span>'
    grade = f" {v.grade}" if mode == "graded" and v.grade is not None else ""
    prob = f" {p_yes_text(v.p_yes, thresholds.get(v.template_id), mode)}" if v.p_yes is not None else ""
    return f'<span class="badge {v.verdict}">{v.verdict}{grade}{escape(prob)}</span>'


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    head = "".join(f'<th class="l">{h}</th>' if i < left else f"<th>{h}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>"
        + "".join(f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _snippet(text: str, limit: int = 280) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class Examples:
    """The systems whose top passages the example block shows (``systems``: an experiment's
    best first) and the block's heading, which says which they are."""

    systems: tuple[SystemInput, ...]
    heading: str


def example_systems(data: ReportData) -> Examples:
    """Whose passages the example block shows: every system of a comparison; in an experiment
    two configurations, the best on its objective and the baseline, or, when the best is the
    baseline, the best and the runner-up (nobody reads one column per grid point, and each
    column's reasons cost calls). The one choice the views and the reasons on request follow
    (:func:`differing_queries`, :func:`render_differences` and the reasons step's
    ``shown_pairs``)."""
    objective = data.experiment_objective
    systems = tuple(data.inputs.systems)
    if objective is None or not systems:
        return Examples(systems, "Queries where the systems differ most")
    by_name = {s.name: s for s in systems}
    baseline = systems[0].name
    ranked = data.report.ranked(objective)
    best = ranked[0] if ranked else baseline
    if best != baseline:
        return Examples(
            (by_name[best], by_name[baseline]),
            f"Queries where the best ({best}) and the baseline ({baseline}) differ most",
        )
    runners = [n for n in ranked if n != best] or [s.name for s in systems[1:2]]
    if not runners:  # a single configuration
        return Examples(systems, f"Queries of the only configuration ({best})")
    return Examples(
        (by_name[best], by_name[runners[0]]),
        f"Queries where the best, the baseline ({best}), and the runner-up ({runners[0]}) differ most",
    )


def differing_queries(
    data: ReportData, examples: Examples | None = None
) -> tuple[str | None, list[tuple[str, dict[str, float]]]]:
    """The queries with the largest spread of the primary measure across the systems the
    example block shows (``examples``, default :func:`example_systems` of ``data``), each
    with those systems' values."""
    primary = data.primary
    if primary is None:
        return None, []
    excluded = set(data.report.not_in_all_systems)
    names = [s.name for s in (examples or example_systems(data)).systems]
    per: dict[str, dict[str, float]] = {}
    for name in names:
        ev = data.evaluations.get(name)
        if ev is None:
            continue
        for qid, values in ev.per_query.items():
            value = values.get(primary)
            if isinstance(value, int | float):
                per.setdefault(qid, {})[name] = float(value)
    by_token = {t: q for q, t in data.inputs.tokens.items()}
    rows = [
        (by_token[t], values)
        for t, values in per.items()
        if t in by_token and by_token[t] not in excluded and len(values) == len(names)
    ]
    rows.sort(key=lambda item: (-(max(item[1].values()) - min(item[1].values())), item[0]))
    return primary, [r for r in rows if max(r[1].values()) - min(r[1].values()) > 0][: data.top_queries]


def _query_block(
    data: ReportData,
    qid: str,
    values: Mapping[str, float],
    primary: str,
    shown: Sequence[SystemInput],
    colors: Mapping[str, str],
) -> str:
    """One query's columns: each of the ``shown`` systems' top passages, in its colour."""
    cols: list[str] = []
    for system in shown:
        sq = system.queries.get(qid)
        color = colors[system.name]
        head = (
            f'<h4 style="color:{color};margin:.2em 0">{escape(system.name)} '
            f'<span class="muted">{escape(primary)} {_f(values.get(system.name))}</span></h4>'
        )
        if sq is None:
            cols.append(f'<div class="col">{head}<p class="muted">no result for this query</p></div>')
            continue
        verdicts = system_verdicts(system, qid, data.pool, data.verdicts, data.level)
        items = []
        for v, docno in list(zip(verdicts, sq.docnos, strict=True))[: data.top_passages]:
            text = data.inputs.passages[qid][docno].text
            reason = v.reason if v.judged else (v.error or "")
            items.append(
                f'<li>{_badge(v, data.mode, data.thresholds)}<span class="muted">{escape(docno)}</span>'
                f'<div class="text">{escape(_snippet(text))}</div>'
                + (f'<div class="reason">{escape(reason)}</div>' if reason else "")
                + "</li>"
            )
        more = len(sq.docnos) - data.top_passages
        tail = f'<p class="muted">… {more} more</p>' if more > 0 else ""
        cols.append(f'<div class="col">{head}<ol>{"".join(items)}</ol>{tail}</div>')
    query_text = data.inputs.queries[qid]
    return (
        f'<div class="query" id="q-{escape(data.inputs.tokens[qid])}">'
        f"<h3>{escape(qid)}: {escape(query_text)}</h3>"
        f'<div class="cols">{"".join(cols)}</div></div>'
    )


def render_html(data: ReportData) -> str:
    r = data.report
    measure_names = [m.trec_name for m in data.measures]
    primary = data.primary
    parts: list[str] = []
    title = experiment_title(r.experiment) if r.experiment else "Systems comparison: " + ", ".join(r.systems)
    parts.append(f"<h1>{escape(title)}</h1>")
    alpha = _alpha(r)
    level = f"{(1 - alpha) * 100:g}%"
    sentences = [
        f"<li>{escape(_verdict_sentence(c, alpha, len(r.comparisons)))}</li>"
        for c in r.comparisons
        if c.measure == primary
    ]
    summary = f'<ul class="summary" id="summary">{"".join(sentences)}</ul>' if sentences else ""
    if r.experiment:
        parts.extend(experiment_html(r))
        if summary:
            head = f"Each configuration against the baseline ({primary})"
            parts += [f'<h2 id="pairwise">{escape(head)}</h2>', summary]
    elif summary:
        parts.append(summary)
    p = r.pool
    parts.append(
        '<h2 id="pool">Pool</h2>'
        f"<p>{p.queries} queries; {p.pairs} (query, passage) pairs over all systems, "
        f"<b>{p.unique_pairs}</b> unique: {p.human_labels} from human labels, {p.judged} judged, "
        f"{p.unjudged} unjudged. LLM calls this run: <b>{p.calls}</b>; pooling saved "
        f"{p.calls_saved} judgments.</p>"
        f'<p class="muted">{escape(_scale_sentence(r))}</p>'
    )
    rows = [
        [
            escape(name),
            str(s.queries),
            *(_f(s.measures.get(m)) for m in measure_names),
            _f(s.measures.get("map_isolated")),
        ]
        for name, s in r.systems.items()
    ]
    parts.append('<h2 id="systems">Systems</h2>')
    parts.append(_html_table(["system", "queries", *measure_names, "map_isolated"], rows))
    parts.append(
        '<p class="muted">Pooled measures score every system against the same judged pool. '
        "<code>map_isolated</code> judges each list alone (AP's denominator: the relevant passages "
        "that list found), which rewards finding few: compare systems on the pooled figures.</p>"
    )
    parts += ppi_html(r)
    parts.append('<h2 id="means">Means and bootstrap intervals</h2>')
    parts.append(means_chart(data))
    parts.append('<h2 id="comparisons">Comparisons (each system against the baseline)</h2>')
    if r.comparisons:
        rows = []
        for c in r.comparisons:
            sig = _significant(c, alpha)
            cls = ("win" if c.diff > 0 else "loss") if sig else ""
            rows.append(
                [
                    escape(c.system),
                    escape(c.measure),
                    str(c.n),
                    _f(c.baseline_mean),
                    _f(c.system_mean),
                    f'<span class="{cls}">{_signed(c.diff)}</span>',
                    _p_raw(c),
                    _test_interval(c),
                    f'<span class="{"sig" if sig else ""}">{escape(_p_holm(c, alpha))}</span>',
                    f"{_f(c.ci_low)} to {_f(c.ci_high)}",
                    _p(c.t_test_p),
                    f"{c.wins} / {c.ties} / {c.losses}",
                    _f(c.order_stability, 3),
                ]
            )
        parts.append(
            _html_table(
                [
                    "system",
                    "measure",
                    "n",
                    "baseline",
                    "system",
                    "diff",
                    "randomization p",
                    f"randomization {level} interval",
                    "p (Holm)",
                    f"bootstrap {level} CI",
                    "t-test p",
                    "wins / ties / losses",
                    "order stability",
                ],
                rows,
                left=2,
            )
        )
    else:
        parts.append("<p>No comparison could be made (see warnings).</p>")
    diffs = [pd for pd in data.differences() if pd.comparison.measure == primary]
    if diffs:
        parts.append(f'<h2 id="per-query">Per-query differences ({escape(str(primary))})</h2>')
        parts.append(
            '<p class="muted">One bar per query, sorted: green where the system beats the baseline, '
            "red where it loses, grey for ties.</p>"
        )
        parts.extend(difference_chart(pd) for pd in diffs)
    examples = example_systems(data)
    measure, queries = differing_queries(data, examples)
    parts.append(f'<h2 id="queries">{escape(examples.heading)}</h2>')
    experiment = data.experiment_objective is not None
    if measure is not None and queries:
        among, whose, tail = (
            (
                "between these two configurations",
                "one",
                " Every configuration's figures are in the tables above.",
            )
            if experiment
            else ("across systems", "system", "")
        )
        parts.append(
            f'<p class="muted">By the spread of per-query {escape(measure)} {among}; each '
            f"{whose}'s top {data.top_passages} passages with the pooled verdict and its reason.{tail}</p>"
        )
        names = [s.name for s in data.inputs.systems]
        colors = dict(zip(names, palette(len(names)), strict=True))
        parts.extend(
            _query_block(data, qid, values, measure, examples.systems, colors) for qid, values in queries
        )
    else:
        parts.append(
            f"<p>The {'configurations shown' if experiment else 'systems'} score the same on every query.</p>"
        )
    if r.not_in_all_systems:
        parts.append('<h2 id="missing">Queries not in every system (left out of the paired tests)</h2>')
        parts.append("<p>" + ", ".join(f"<code>{escape(q)}</code>" for q in r.not_in_all_systems) + "</p>")
    parts.extend(_adaptive_html(r))
    if r.warnings:
        parts.append(
            '<h2 id="warnings">Warnings</h2><ul>'
            + "".join(f"<li>{escape(w)}</li>" for w in r.warnings)
            + "</ul>"
        )
    parts.append('<h2 id="conventions">Conventions</h2>')
    parts.append(f"<pre>{escape(json.dumps(r.conventions, ensure_ascii=False, indent=2))}</pre>")
    return (
        '<!DOCTYPE html>\n<html lang="zh-CN">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body>\n</html>\n"
    )


# ---------------------------------------------------------------------------- differences
def _shown_passages(data: ReportData, system: SystemInput, qid: str) -> list[dict[str, Any]]:
    """One system's top passages of a query: rank, docno, text, verdict, grade, P(yes), the
    threshold P(yes) was compared with (binary probability mode), reason and source."""
    sq = system.queries[qid]
    shown: list[dict[str, Any]] = []
    pvs = system_verdicts(system, qid, data.pool, data.verdicts, data.level)
    for rank, (v, docno) in enumerate(zip(pvs, sq.docnos, strict=True), start=1):
        if rank > data.top_passages:
            break
        shown.append(passage_entry(data, qid, docno, rank, v, v.reason if v.judged else (v.error or "")))
    return shown


def passage_entry(
    data: ReportData, qid: str, docno: str, rank: int, v: PassageVerdict, reason: str | None
) -> dict[str, Any]:
    """One shown passage of a query: rank, docno, text, verdict, grade, P(yes), the threshold
    P(yes) was compared with (binary probability mode), ``reason`` and the verdict's source
    (``human``, ``judge`` or ``none``): what the report's differences and the viewer show."""
    return {
        "rank": rank,
        "docno": docno,
        "text": data.inputs.passages[qid][docno].text,
        "verdict": v.verdict,
        "grade": v.grade,
        "p_yes": v.p_yes,
        "p_yes_threshold": data.thresholds.get(v.template_id),
        "reason": reason,
        "source": "human" if v.backend == "human" else ("judge" if v.template_id else "none"),
    }


def render_differences(data: ReportData) -> dict[str, Any]:
    """The queries where the systems differ most on the primary measure (as report.html
    picks them), each with the value and top passages of every system it shows
    (:func:`example_systems`)."""
    examples = example_systems(data)
    primary, rows = differing_queries(data, examples)
    shown = examples.systems
    queries = []
    for qid, values in rows:
        systems: list[dict[str, Any]] = []
        for system in shown:
            sq = system.queries.get(qid)
            systems.append(
                {
                    "name": system.name,
                    "value": values.get(system.name),
                    "passages": [] if sq is None else _shown_passages(data, system, qid),
                    "more": 0 if sq is None else max(0, len(sq.docnos) - data.top_passages),
                }
            )
        spread = max(values.values()) - min(values.values())
        queries.append({"id": qid, "query": data.inputs.queries[qid], "spread": spread, "systems": systems})
    return {"measure": primary, "queries": queries}
