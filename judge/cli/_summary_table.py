"""``judge score``'s summary as a person reads it on a terminal: a short table of the means,
the judge's against the ground truth's where the input has one, and where the full JSON was
written. A pipe or ``--json`` gets the JSON itself (what scripts read)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _fig(value: Any) -> str:
    return "-" if value is None else f"{float(value):.4f}"


def _rows(judge: Mapping[str, Any], truth: Mapping[str, Any] | None) -> list[tuple[str, Any, Any]]:
    """(name, judge's, ground truth's) for mAP, each NDCG and P cutoff, MRR."""
    other = truth or {}
    rows: list[tuple[str, Any, Any]] = [("mAP", judge.get("map"), other.get("map"))]
    for cut, value in (judge.get("ndcg") or {}).items():
        rows.append((f"NDCG@{cut}", value, (other.get("ndcg") or {}).get(cut)))
    for cut, value in (judge.get("precision") or {}).items():
        rows.append((f"P@{cut}", value, (other.get("precision") or {}).get(cut)))
    rows.append(("MRR", judge.get("mrr"), other.get("mrr")))
    return rows


def _agreement(summary: Mapping[str, Any]) -> str | None:
    truth = summary.get("ground_truth") or {}
    agree = truth.get("judge_agreement")
    if not agree or "accuracy" not in agree:
        return None
    relevant = ((summary.get("conventions") or {}).get("ground_truth") or {}).get("relevant", "relevant")
    fn, tp, fp, tn = (int(agree.get(k, 0)) for k in ("fn", "tp", "fp", "tn"))
    accuracy = float(agree["accuracy"])
    return (
        f"agreement with the ground truth ({relevant} is relevant): accuracy {accuracy:.3f},\n"
        f"  the judge said no to {fn} of {fn + tp} relevant passages and yes to {fp} of {fp + tn} others"
    )


def _notes(summary: Mapping[str, Any]) -> list[str]:
    """One line each for what changed the figures: labels, the adaptation, unjudged."""
    notes = []
    labels = summary.get("labels")
    if labels:
        applied, changed, unmatched = (labels.get(k, 0) for k in ("applied", "changed", "unmatched"))
        notes.append(f"human labels: {applied} applied ({changed} changed a verdict), {unmatched} unmatched")
    adaptation = summary.get("adaptation")
    if adaptation:
        state = "applied" if adaptation.get("applied") else "not applied"
        notes.append(f"--adapt: {state}: {adaptation.get('reason', '')}".rstrip(": "))
    if summary.get("ppi"):
        notes.append('prediction-powered figures with intervals: the summary\'s "ppi"')
    unjudged = int(summary.get("unjudged") or 0)
    if unjudged:
        notes.append(f"{unjudged} passages unjudged: judge score --retry-unjudged {summary.get('output')}")
    return notes


def summary_table(summary: Mapping[str, Any], output_path: str | Path, summary_path: str | Path) -> str:
    """The terminal's summary of one ``judge score`` run (see the module doc)."""
    verdicts = summary.get("verdicts") or {}
    order = sorted(verdicts, key=lambda name: (name != "yes", name != "no", str(name)))
    counts = ", ".join(f"{verdicts[name]} {name}" for name in order)
    run = summary.get("this_run") or {}
    lines = [
        f"judge score: {summary.get('queries', 0)} queries, {summary.get('passages', 0)} passages"
        + (f" ({counts}, {summary.get('unjudged', 0)} unjudged)" if counts else "")
        + (
            f"; this run asked the judge {run.get('passages_asked', 0)}, "
            f"the cache answered {run.get('passages_cached', 0)}"
            if run
            else ""
        ),
        "",
    ]
    truth = summary.get("ground_truth")
    rows = _rows(summary.get("judge") or {}, truth)
    width = max(len(name) for name, _, _ in rows)
    header = f"{'':<{width}}   {'judge':>7}" + (f"   {'ground truth':>12}" if truth else "")
    lines.append(header)
    for name, mine, theirs in rows:
        lines.append(f"{name:<{width}}   {_fig(mine):>7}" + (f"   {_fig(theirs):>12}" if truth else ""))
    agreement = _agreement(summary)
    notes = ([agreement] if agreement else []) + _notes(summary)
    if notes:
        lines.append("")
        lines.extend(notes)
    lines += [
        "",
        f"output   {output_path}",
        f"summary  {summary_path} (every figure as JSON; --json prints it here)",
    ]
    return "\n".join(lines)
