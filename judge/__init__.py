"""``judge``: an LLM relevance judge for search and RAG retrieval.

    import judge
    result = judge.evaluate("小狗贫血的表现", ["段落一……", "段落二……"], mode="graded")
    print(result.score, result.ap, result.ndcg)

Everything here is imported lazily (module ``__getattr__``), so ``import judge`` stays
light: CLI commands such as ``judge trec`` never import deepeval or an LLM client. Importing
``judge`` sets deepeval's opt-outs (no telemetry, no files written, no ``.env`` reading)
unless the user already chose otherwise; import ``judge`` before ``deepeval``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import judge._env  # noqa: F401  # deepeval opt-outs (telemetry, read-only FS) before any deepeval import

if TYPE_CHECKING:
    from judge import search
    from judge._api import aevaluate, evaluate
    from judge.backends import resolve_backend
    from judge.judging import (
        ContextualRecallJudge,
        JudgeConfig,
        JudgeResult,
        Passage,
        PassageVerdict,
        RelevancyJudge,
    )
    from judge.metrics import answer_scores, gen_eval, redundancy_by_k
    from judge.systems import aexperiment, compare_systems, experiment

__all__ = [
    "ContextualRecallJudge",
    "JudgeConfig",
    "JudgeResult",
    "Passage",
    "PassageVerdict",
    "RelevancyJudge",
    "aevaluate",
    "aexperiment",
    "answer_scores",
    "compare_systems",
    "evaluate",
    "experiment",
    "gen_eval",
    "redundancy_by_k",
    "resolve_backend",
    "search",
]

_LAZY = {
    "evaluate": "judge._api",
    "aevaluate": "judge._api",
    "JudgeConfig": "judge.judging",
    "Passage": "judge.judging",
    "JudgeResult": "judge.judging",
    "PassageVerdict": "judge.judging",
    "RelevancyJudge": "judge.judging",
    # Also public (lazily, like the rest): contextual recall as a deepeval metric.
    "ContextualRecallJudge": "judge.judging",
    "resolve_backend": "judge.backends",
    "gen_eval": "judge.metrics",
    "answer_scores": "judge.metrics",
    "redundancy_by_k": "judge.metrics",
    "compare_systems": "judge.systems",
    "experiment": "judge.systems",
    "aexperiment": "judge.systems",
}


def _search_package() -> Any:
    # ``judge.search`` is a package that is also callable (``judge.search(queries, config, out)``).
    return importlib.import_module("judge.search")


def __getattr__(name: str) -> Any:
    if name == "search":
        package = _search_package()
        globals()["search"] = package
        return package
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'judge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
