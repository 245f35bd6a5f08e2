"""What the views of a comparison share: the data they render (:class:`ReportData`), the
number formats, the verdict sentence, the colours, and which systems and queries the example
block shows (:func:`example_systems`, :func:`differing_queries`, :func:`passage_entry`)."""

from __future__ import annotations

import colorsys
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from judge.judging import PassageVerdict
from judge.metrics import UNDECIDED, Evaluation, Measure
from judge.systems._inputs import Inputs, SystemInput
from judge.systems._model import SystemComparison, SystemsReport
from judge.systems._pool import Pool, PoolVerdicts
from judge.systems._scoring import Paired

_PALETTE = ("#3366aa", "#dd7733", "#339966", "#aa3377", "#7766bb", "#999933", "#44aaaa", "#bb5555")


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


def _adaptive_rows(r: SystemsReport) -> tuple[str, list[list[str]]]:
    """``--until-decided``: the headline and one row per comparison (decided or not, the
    decision, its confidence, pairs judged when it was decided against the full pool)."""
    a = r.adaptive
    if a is None:
        return "", []
    share = "" if a.fraction is None else f" ({a.fraction:.0%})"
    head = (
        f"Judged {a.judged_pairs} of the full pool's {a.pool_pairs} pairs{share} in {a.rounds} rounds "
        f"({max(a.pool_pairs - a.judged_pairs, 0)} judgments saved); "
        f"{a.decided} comparison(s) decided, {a.undecided} undecided (stopped: {a.stop}). A decision is "
        f"which system is better and whether significantly (Holm p < {a.alpha:g}); decided = it holds in at "
        f"least {a.confidence:g} of {a.draws} draws of the unjudged pairs from the prior ({a.prior})."
        + (f" Decided on the {a.figure} figure, the one the report tests." if a.figure else "")
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


def figure_sentence(r: SystemsReport) -> str:
    """Which figure the means, rankings and tests are (``conventions.tested_figure``) and why."""
    conv = r.conventions
    used = conv.get("tested_figure")
    if used is None:  # a report written before the tested figure was chosen
        return "Tested figure: thresholded (trec_eval over pool.qrels)."
    what = (
        "expected (the judge's P(yes) as each pooled passage's relevance; human labels at their grade)"
        if used == "expected"
        else "thresholded (trec_eval over pool.qrels: each verdict cut at its threshold)"
    )
    beside = " The thresholded figures are beside them." if used == "expected" else ""
    return f"Tested figure: {what}; {conv.get('tested_figure_reason', '')}.{beside}"


def systems_table(r: SystemsReport, names: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """The Systems table: each system's queries, its pooled means and ``map_isolated``."""
    rows = [
        [
            name,
            str(s.queries),
            *(_f(s.measures.get(m)) for m in names),
            _f(s.measures.get("map_isolated")),
        ]
        for name, s in r.systems.items()
    ]
    return ["system", "queries", *names, "map_isolated"], rows


def thresholded_table(r: SystemsReport, names: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """The thresholded means beside the tested ones (empty when the thresholded are tested)."""
    rows = [
        [name, *(_f(s.thresholded.get(m)) for m in names)]
        for name, s in r.systems.items()
        if s.thresholded is not None
    ]
    return (["system", *names], rows) if rows else ([], [])


def per_query_table(r: SystemsReport) -> tuple[str | None, list[str], list[list[str]]]:
    """Each system's per-query values of the primary measure (the tested figure: what the
    paired tests read), one row per query: (measure, header, rows)."""
    names = [n for n, s in r.systems.items() if s.per_query is not None]
    if not names:
        return None, [], []
    qids: list[str] = []
    for n in names:
        qids += [q for q in (r.systems[n].per_query or {}) if q not in qids]
    measure = r.conventions.get("per_query_measure")
    rows = [[q, *(_f((r.systems[n].per_query or {}).get(q)) for n in names)] for q in qids]
    return (str(measure) if measure else None), ["query", *names], rows
