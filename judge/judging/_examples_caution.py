"""Where worked examples were measured to hurt: :func:`examples_caution`, the
warning a run with ``--examples`` gets where ``docs/agreement.md`` measured them to lower
agreement with people, naming the measurement.

What the docs measured, with the embedded judge (``local:qwen2.5-coder-1.5b-q4km``) only:

* English, TREC DL 2019, same-query examples ("Worked examples from the team's labels"):
  κ 0.35 zero-shot, 0.20 / 0.23 / 0.17 with 2 / 4 / 8 examples (with 8 below zero-shot
  beyond its interval), ROC AUC 0.76 -> 0.65-0.69; and choosing a configuration ("The
  choice of configuration"): the order of nine BM25 configurations τ 0.72 zero-shot,
  -0.22 with 4 examples. Every English query of a run is warned about.
* Chinese, RGB: agreement held (κ 0.70 zero-shot and with 4, 0.82 with 8), but the order
  of the nine configurations fell (τ 0.78 -> 0.67 with 4): a comparison's Chinese queries
  (``compare-systems``, ``experiment``: the bank is ``pooled``) are warned about; a
  ``judge score`` run on Chinese queries is not.

Another backend was not measured: no warning (the docs say a stronger judge may use
examples better). A query's language is the run's (``--language``, the template's) or,
with ``auto``, :func:`judge.io.language_of` its text and its labelled passages' texts, as
judging binds it.
"""

from __future__ import annotations

from judge.backends import EMBEDDED_BACKEND
from judge.io import language_of
from judge.judging._config import JudgeConfig
from judge.judging._examples import ExampleBank
from judge.judging._templates import load_template

__all__ = ["EXAMPLES_MEASURED", "examples_caution"]

#: Where the figures are (the warning names it).
EXAMPLES_MEASURED = "docs/agreement.md, 'Worked examples from the team's labels'"

_ENGLISH = (
    "on English with the embedded judge, docs/agreement.md measured --examples to lower agreement with "
    "people (TREC DL 2019, same-query examples: kappa 0.35 zero-shot, 0.20 / 0.23 / 0.17 with 2 / 4 / 8, "
    "ROC AUC 0.76 -> 0.65-0.69; choosing among 9 configurations, their order tau 0.72 -> -0.22 with 4)"
)
_ORDER = (
    "on Chinese with the embedded judge, agreement held (RGB: kappa 0.70 zero-shot and with 4 examples) "
    "but the order of 9 configurations fell (tau 0.78 -> 0.67 with 4; docs/agreement.md, 'The choice "
    "of configuration')"
)
_ADVICE = (
    "measure them on labels held out of the examples (judge agree) before trusting these verdicts, "
    "or drop --examples"
)


def _languages(bank: ExampleBank, config: JudgeConfig) -> dict[str, str]:
    """Each query's language, as its passages are judged."""
    if config.template:
        fixed: str | None = load_template(config.template).language
    else:
        fixed = config.language if config.language in ("zh", "en") else None
    out: dict[str, str] = {}
    for qid, query in bank.queries.items():
        if fixed is not None:
            out[qid] = fixed
        else:
            out[qid] = language_of([query, *(e.text for e in bank.labelled.get(qid, ()))])
    return out


def examples_caution(bank: ExampleBank | None, config: JudgeConfig, backend_name: str) -> str | None:
    """The warning for a run with worked examples ``bank`` judged by ``backend_name`` with
    ``config`` (None: nothing measured against it; see the module docstring)."""
    if bank is None or not bank.spec.active or backend_name != EMBEDDED_BACKEND:
        return None
    languages = _languages(bank, config)
    english = sum(1 for lang in languages.values() if lang == "en")
    chinese = len(languages) - english
    parts: list[str] = []
    if english:
        parts.append(f"{english} of this run's {len(languages)} queries are English: {_ENGLISH}")
    if bank.pooled and chinese:
        parts.append(f"{chinese} of this run's {len(languages)} queries are Chinese: {_ORDER}")
    if not parts:
        return None
    return "; ".join(parts) + "; " + _ADVICE
