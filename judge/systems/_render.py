"""The views of a comparison of systems: ``report.md``, ``report.html`` and the
differences (the queries where the systems differ most, as data for the server's viewer).

The Markdown and the differences are here; the HTML page is :mod:`judge.systems._render_html`
and what the views share :mod:`judge.systems._render_common` (their public names are
re-exported here).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from judge.systems._inputs import SystemInput
from judge.systems._model import SystemsReport
from judge.systems._ppi_report import ppi_markdown
from judge.systems._render_common import (
    _ADAPTIVE_HEADER,
    Examples,
    ReportData,
    _adaptive_rows,
    _alpha,
    _f,
    _p,
    _p_holm,
    _p_raw,
    _scale_sentence,
    _signed,
    _test_interval,
    _verdict_sentence,
    differing_queries,
    example_systems,
    figure_sentence,
    p_yes_text,
    palette,
    passage_entry,
    per_query_table,
    systems_table,
    thresholded_table,
)
from judge.systems._render_html import difference_chart, means_chart, render_html
from judge.systems._scoring import system_verdicts
from judge.systems._sweep_report import experiment_head, experiment_markdown, experiment_title

__all__ = [
    "Examples",
    "ReportData",
    "_verdict_sentence",
    "difference_chart",
    "differing_queries",
    "example_systems",
    "means_chart",
    "p_yes_text",
    "palette",
    "passage_entry",
    "render_differences",
    "render_html",
    "render_markdown",
]


# ---------------------------------------------------------------------------- markdown
def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def _adaptive_md(r: SystemsReport) -> list[str]:
    head, rows = _adaptive_rows(r)
    if not head:
        return []
    return ["## Adaptive judging (--until-decided)", "", head, "", *_md_table(_ADAPTIVE_HEADER, rows), ""]


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
        figure_sentence(r),
        "",
        "## Systems",
        "",
    ]
    lines += _md_table(*systems_table(r, measure_names))
    lines += [
        "",
        "Pooled measures score every system against the same judged pool (judge trec on pool.qrels). "
        "`map_isolated` is each list judged alone (AP's denominator: the relevant passages that list "
        "found), which rewards finding few; compare systems on the pooled figures.",
        "",
    ]
    head, rows = thresholded_table(r, measure_names)
    if rows:
        lines += ["### Thresholded figures (judge trec on pool.qrels)", "", *_md_table(head, rows), ""]
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
    measure, head, rows = per_query_table(r)
    if rows:
        lines += [
            f"## Per-query {measure} (the tested figure: the values the paired tests read)",
            "",
            *_md_table(head, rows),
            "",
        ]
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
        *(
            [
                "These reproduce the thresholded figures; the tested (expected) figures weight each "
                "pooled pair by its P(yes) in pool.judged.jsonl (conventions.expected_figure).",
                "",
            ]
            if r.conventions.get("tested_figure") == "expected"
            else []
        ),
        "## Conventions",
        "",
        "```json",
        json.dumps(r.conventions, ensure_ascii=False, indent=2),
        "```",
        "",
    ]
    return "\n".join(lines)


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
