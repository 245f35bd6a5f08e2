"""The HTML view of a comparison of systems: ``report.html``.

One self-contained file: inline CSS, inline SVG charts drawn here, no script, no font or
image from anywhere (it opens offline); UTF-8 with a ``<meta charset>`` so Chinese queries,
passages and reasons render. Sections: the verdict in one sentence per system, the pool, the
systems' means, the means with their bootstrap intervals as a chart, the comparisons, the
per-query differences as a chart, the queries where the systems differ most (each system's
top passages with verdicts and reasons; in an experiment two configurations',
:func:`~judge.systems._render_common.example_systems`), then conventions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape

import numpy as np

from judge.judging import PassageVerdict
from judge.systems._inputs import SystemInput
from judge.systems._model import SystemsReport
from judge.systems._ppi_report import ppi_html
from judge.systems._render_common import (
    _ADAPTIVE_HEADER,
    ReportData,
    _adaptive_rows,
    _alpha,
    _f,
    _p,
    _p_holm,
    _p_raw,
    _scale_sentence,
    _signed,
    _significant,
    _test_interval,
    _verdict_sentence,
    differing_queries,
    example_systems,
    figure_sentence,
    p_yes_text,
    palette,
    per_query_table,
    systems_table,
    thresholded_table,
)
from judge.systems._scoring import Paired, system_verdicts
from judge.systems._sweep_report import experiment_html, experiment_title

_WIN, _LOSS, _TIE = "#2a9d63", "#d1495b", "#999999"


def _adaptive_html(r: SystemsReport) -> list[str]:
    head, rows = _adaptive_rows(r)
    if not head:
        return []
    return [
        '<h2 id="adaptive">Adaptive judging (--until-decided)</h2>',
        f"<p>{escape(head)}</p>",
        _html_table(list(_ADAPTIVE_HEADER), [[escape(x) for x in row] for row in rows], left=4),
    ]


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


def _thresholded_html(r: SystemsReport, measure_names: Sequence[str]) -> list[str]:
    """The thresholded means beside the tested ones (nothing when those are tested)."""
    head, rows = thresholded_table(r, measure_names)
    if not rows:
        return []
    return [
        '<h3 id="thresholded">Thresholded figures (judge trec on pool.qrels)</h3>',
        _html_table([escape(h) for h in head], [[escape(c) for c in row] for row in rows]),
    ]


def _per_query_html(r: SystemsReport) -> list[str]:
    """Each system's per-query values of the primary measure: what the paired tests read."""
    measure, head, rows = per_query_table(r)
    if not rows:
        return []
    return [
        f'<h2 id="per-query-values">Per-query {escape(str(measure))} '
        "(the tested figure: the values the paired tests read)</h2>",
        _html_table([escape(h) for h in head], [[escape(c) for c in row] for row in rows]),
    ]


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
        f'<p id="tested-figure">{escape(figure_sentence(r))}</p>'
    )
    columns, rows = systems_table(r, measure_names)
    parts.append('<h2 id="systems">Systems</h2>')
    parts.append(_html_table(columns, [[escape(row[0]), *row[1:]] for row in rows]))  # a name is text
    parts.append(
        '<p class="muted">Pooled measures score every system against the same judged pool. '
        "<code>map_isolated</code> judges each list alone (AP's denominator: the relevant passages "
        "that list found), which rewards finding few: compare systems on the pooled figures.</p>"
    )
    parts += [*_thresholded_html(r, measure_names), *ppi_html(r)]
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
    parts += [*_per_query_html(r), *_adaptive_html(r)]
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
