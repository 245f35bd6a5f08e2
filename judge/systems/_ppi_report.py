"""Prediction-powered figures of each system (or experiment configuration) of a comparison:
``--sample-labels`` on ``judge compare-systems`` and ``judge experiment``.

Each system's pooled pairs within the depth are its population; the sample labels that fall
on them correct its judge figures (:func:`judge.batch.ppi_block`, the label-free
conventions of ``judge score``: P@k, nDCG@k with the ideal from the judged list, AP over the
judged list, the share judged relevant). A uniform sample of the pool restricted to one
system's pairs is a uniform sample of them. The figures are levels with intervals; the
report's best, order and significance stay on the judge's paired comparison
(:data:`CHOICE`): correcting each system on its own adds noise larger than the systems'
differences, while the judge's bias is shared by all of them (docs/concepts/prediction-powered.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from html import escape
from typing import Any

from judge.batch import SampleLabelOptions, ppi_block
from judge.io import SampleLabel, SampleLabels
from judge.systems._inputs import Inputs
from judge.systems._model import SystemsReport
from judge.systems._pool import Pool, PoolVerdicts
from judge.systems._scoring import system_verdicts

__all__ = ["CHOICE", "check_sample_pairs", "ppi_html", "ppi_markdown", "system_ppi"]

CHOICE = (
    "best, order and significance: the judge's paired comparison (the prediction-powered "
    "figures are each system's corrected level and interval, not used to rank)"
)


def check_sample_pairs(options: SampleLabelOptions, pool: Pool) -> None:
    """Every sample pair is a pooled pair (query id or TREC qid, docno), else InputError
    naming the sample file's line (before any call)."""
    pairs = {(key, d) for q in pool.queries for key in (q.qid, q.token) for d in q.pooled}
    options.labels.check_pairs(pairs)


def _records(system: Any, pool: Pool, verdicts: PoolVerdicts, level: int, mode: str) -> list[dict[str, Any]]:
    out = []
    for qid, sq in system.queries.items():
        vs = system_verdicts(system, qid, pool, verdicts, level)
        out.append(
            {
                "id": qid,
                "mode": mode,
                "docnos": list(sq.docnos),
                "verdicts": [{"verdict": v.verdict, "grade": v.grade} for v in vs],
            }
        )
    return out


def _on_pairs(
    labels: tuple[SampleLabel, ...], pairs: set[tuple[str, str]], tokens: Mapping[str, str]
) -> tuple[SampleLabel, ...]:
    """The labels on ``pairs``, each with its query's id (a TREC qid token mapped back)."""
    return tuple(
        replace(lab, qid=tokens.get(lab.qid, lab.qid))
        for lab in labels
        if (tokens.get(lab.qid, lab.qid), lab.docno) in pairs
    )


def system_ppi(
    options: SampleLabelOptions,
    inputs: Inputs,
    pool: Pool,
    verdicts: PoolVerdicts,
    *,
    level: int,
    mode: str,
    k: Sequence[int] = (5, 10),
) -> dict[str, dict[str, Any]]:
    """``{system: ppi block}`` from the sample labels on each system's pairs."""
    tokens = {q.token: q.qid for q in pool.queries}
    out: dict[str, dict[str, Any]] = {}
    for system in inputs.systems:
        records = _records(system, pool, verdicts, level, mode)
        pairs = {(str(r["id"]), str(d)) for r in records for d in r["docnos"]}
        held = SampleLabels(
            options.labels.path,
            _on_pairs(options.labels.labels, pairs, tokens),
            _on_pairs(options.labels.unlabelled, pairs, tokens),
        )
        sub = replace(options, labels=held)  # the level, confidence and allow_unlabelled kept
        out[system.name] = ppi_block(records, sub, k)
    return out


def _cell(fig: Mapping[str, Any] | None) -> str:
    if not fig or fig.get("estimate") is None:
        return "—"
    text = f"{fig['estimate']:.4f}"
    if fig.get("low") is not None and fig.get("high") is not None:
        text += f" [{fig['low']:.4f}, {fig['high']:.4f}]"
    elif not fig.get("coverage_ok", True):
        text += " (no valid interval)"
    return text


def _table(r: SystemsReport) -> tuple[list[str], list[list[str]], str] | None:
    """The section's header, rows and sentence (None without sample labels)."""
    blocks = {name: s.ppi for name, s in r.systems.items() if s.ppi is not None}
    if not blocks:
        return None
    first = next(iter(blocks.values()))
    ks = list(first["precision"])
    header = ["system", "labels", *(f"P@{k} judge / ppi" for k in ks), "share relevant judge / ppi"]

    def pair(fig: Mapping[str, Any]) -> str:
        judge = "—" if fig.get("judge") is None else f"{fig['judge']:.4f}"
        return f"{judge} / {_cell(fig)}"

    rows = [
        [
            name,
            f"{b['labels']} of {b['population']}"
            + (f", {b['unlabelled']} unlabelled" if b.get("unlabelled") else ""),
            *(pair(b["precision"][k]) for k in ks),
            pair(b["mean_score"]),
        ]
        for name, b in blocks.items()
    ]
    notes = sorted({b["interval_note"] for b in blocks.values() if b.get("interval_note")})
    sentence = (
        f"Each system's judge figure (label-free conventions: the judged list) and the figure "
        f"corrected by the sample labels on its pairs, with its {first['confidence']:.0%} interval; "
        f"{first['mapping']}. {first['method']['sampling'].capitalize()}. No interval below 40 labels, "
        "drawn pairs left unlabelled not counted (docs/concepts/prediction-powered.md). Corrected nDCG and "
        "AP are not shown: measured, they are "
        "worse than the judge's own figures (about twice the judge's error at 10-15% labelled); the judge's "
        "nDCG and AP are in the tables above. "
        + "".join(f"{note[0].upper()}{note[1:]}. " for note in notes)
        + f"The choice: {CHOICE}."
    )
    return header, rows, sentence


def ppi_markdown(r: SystemsReport) -> list[str]:
    """The report's "Prediction-powered figures" section (empty without sample labels)."""
    table = _table(r)
    if table is None:
        return []
    header, rows, sentence = table

    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return ["## Prediction-powered figures (--sample-labels)", "", sentence, "", *lines, ""]


def ppi_html(r: SystemsReport) -> list[str]:
    """The same section for report.html (empty without sample labels)."""
    table = _table(r)
    if table is None:
        return []
    header, rows, sentence = table
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return [
        '<h2 id="ppi">Prediction-powered figures (--sample-labels)</h2>',
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
        f'<p class="muted">{escape(sentence)}</p>',
    ]
