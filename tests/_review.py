"""A fake judge for the review tests whose P(yes) is written in the passage (``[p=0.47]``),
so the review queue's order is known in advance; and a dataset for it.

In probability mode it answers the candidates with ``{"yes": p, "no": 1 - p}``; asked to
explain it writes a reason naming p; asked to generate it says yes iff p >= 0.5.
Importable as ``_review:p_backend`` for ``judge serve --backend-factory``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from judge.backends import ChatRequest, RuleBackend

_P = re.compile(r"\[p=([01]\.\d+)\]")


def p_of(request: ChatRequest) -> float:
    text = "\n".join(m.content for m in request.messages if m.role == "user")
    m = _P.search(text)
    return float(m.group(1)) if m else 0.0


def _rule(request: ChatRequest) -> Any:
    p = p_of(request)
    if request.candidates is not None:
        return {"yes": p, "no": 1.0 - p}
    if request.answer_prefix and "reason" in request.answer_prefix:
        return f'模型估计的相关概率为 {p:.2f}。"}}'
    verdict = "yes" if p >= 0.5 else "no"
    return json.dumps({"verdict": verdict, "reason": f"模型估计的相关概率为 {p:.2f}。"}, ensure_ascii=False)


def p_backend(latency_s: float = 0.0) -> RuleBackend:
    return RuleBackend(
        _rule,
        name="fake:p",
        model="p",
        supports_probabilities=True,
        prefers_probabilities=True,
        latency_s=latency_s,
    )


# Per query, the passages' P(yes) in rank order, and which of them people call relevant.
# Ranks 1-2 hold the borderline ones (0.47-0.53), so the queue starts with them.
TABLE: list[tuple[str, list[float], list[int]]] = [
    ("小狗贫血的表现", [0.52, 0.10, 0.95, 0.30], [0, 0, 1, 0]),
    ("感冒吃什么药", [0.49, 0.90, 0.05, 0.60], [1, 1, 0, 0]),
    ("如何办理护照", [0.97, 0.51, 0.20, 0.08], [1, 0, 0, 0]),
    ("高铁票怎么退", [0.48, 0.85, 0.15, 0.70], [1, 1, 0, 1]),
    ("手机电池鼓包怎么办", [0.12, 0.53, 0.92, 0.02], [0, 1, 1, 0]),
    ("公积金怎么提取", [0.80, 0.25, 0.47, 0.99], [1, 0, 0, 1]),
]


def records() -> list[dict[str, Any]]:
    out = []
    for i, (query, ps, truth) in enumerate(TABLE):
        ctx = [
            {"id": f"d{j}", "text": f"关于「{query}」的第{j + 1}段说明。[p={p:.2f}]"}
            for j, p in enumerate(ps)
        ]
        out.append(
            {
                "id": f"q{i}",
                "query": query,
                "retrieval_context": ctx,
                "qrels": {f"d{j}": g for j, g in enumerate(truth)},
            }
        )
    return out
