#!/usr/bin/env python
"""Two prompt layouts side by side on the embedded judge's probability pass, in one run
(the template's rules before the query and passage, in a prefix every prompt shares, or after).

    nice -n 10 python scripts/bench_layout.py --pairs 12 --json out/bench_layout.json

The shipped templates put the passage first and about 110 tokens of rules after it
(``binary.en.v2``, ``binary.zh.v2``), so every prompt is evaluated almost whole. The
rules-first candidates (``binary.en.v4``, ``binary.zh.v5``: the same words, the rules before
the passage, the query and a one-line question last) share the system message and the rules
as a prefix with every other prompt, which the model's KV cache serves.

Pairs: TREC DL 2019 passages (English, two per query) and RGB (Chinese, a seeded sample),
read in place from the shared data folder. One model, one process. For each pair both
layouts are timed through the judge's own call (``ResilientBackend.complete``, probability
mode), their order rotating per pair so that a drift in the machine's load favours neither;
before each timed call the KV cache is set to what a run of that layout alone would hold
(the same layout's prompt for the previous pair is evaluated, untimed).

Printed per language and layout: prompts/s, evaluated and reused tokens per prompt, and the
ratio of the candidate's rate to the shipped layout's; the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from _dl19 import dl19_pairs  # noqa: E402

from judge.backends import ChatRequest, ensure_resilient  # noqa: E402
from judge.backends._local import LocalBackend  # noqa: E402
from judge.judging import load_template  # noqa: E402

LAYOUTS = {"en": ("binary.en.v2", "binary.en.v4"), "zh": ("binary.zh.v2", "binary.zh.v5")}


def _pairs(language: str, n: int) -> list[tuple[str, str]]:
    """(query, passage) pairs: DL 2019 for English, a seeded RGB sample for Chinese."""
    if language == "en":
        return [(query, passage) for _, query, passage, _ in dl19_pairs(n, 2)]
    from eval_judge import load_dataset

    rgb = load_dataset("rgb")
    picked = random.Random(7).sample(rgb, n)
    return [(p.query, p.text) for p in picked]


def _request(template_id: str, query: str, passage: str) -> ChatRequest:
    template = load_template(template_id)
    assert template.answer_prefix is not None and template.candidates is not None
    return ChatRequest(
        messages=template.render(query=query, passage=passage),
        max_tokens=1,
        answer_prefix=template.answer_prefix,
        candidates=template.candidates,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=12, help="pairs per language")
    parser.add_argument("--languages", default="en,zh")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    backend = LocalBackend()
    resilient = ensure_resilient(backend)
    loop = asyncio.new_event_loop()
    report: dict[str, Any] = {"pairs": args.pairs, "languages": {}}

    def call(request: ChatRequest) -> tuple[float, int, int]:
        started = time.perf_counter()
        loop.run_until_complete(resilient.complete(request))
        took = time.perf_counter() - started
        last = backend.last_call
        assert last is not None
        return took, last.evaluated_tokens, last.reused_tokens

    for language in args.languages.split(","):
        pairs = _pairs(language, args.pairs)
        layouts = LAYOUTS[language]
        requests = {t: [_request(t, q, p) for q, p in pairs] for t in layouts}
        call(requests[layouts[0]][0])  # the model's load, outside every figure
        rows: dict[str, dict[str, list[float]]] = {
            t: {"seconds": [], "evaluated": [], "reused": []} for t in layouts
        }
        for i in range(len(pairs)):
            order = layouts if i % 2 == 0 else layouts[::-1]
            for t in order:
                backend.reset_cache()
                call(requests[t][i - 1])  # the cache a run of this layout alone would hold
                took, evaluated, reused = call(requests[t][i])
                rows[t]["seconds"].append(took)
                rows[t]["evaluated"].append(evaluated)
                rows[t]["reused"].append(reused)
        rates = {t: len(pairs) / sum(rows[t]["seconds"]) for t in layouts}
        for t in layouts:
            print(
                f"{language} {t:>13}: {rates[t]:.3f} prompts/s, "
                f"{statistics.mean(rows[t]['evaluated']):.0f} tokens evaluated and "
                f"{statistics.mean(rows[t]['reused']):.0f} reused per prompt"
            )
        ratio = rates[layouts[1]] / rates[layouts[0]]
        print(f"{language}: {layouts[1]} at {ratio:.2f}x the rate of {layouts[0]}")
        report["languages"][language] = {"rows": rows, "rates": rates, "ratio": ratio}
    loop.run_until_complete(resilient.aclose())
    loop.close()
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    report["load"] = [load_before, load_after]
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
