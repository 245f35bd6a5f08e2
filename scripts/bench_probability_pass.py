#!/usr/bin/env python
"""The embedded judge's probability pass against llama.cpp alone on the same prompts, in one
run: where does the time between the two go?

    nice -n 10 python scripts/bench_probability_pass.py --pairs 6 --json out/bench_ppass.json

Prompts: ``binary.en.v2`` in probability mode (the English default when docs/benchmarks.md's
figures were measured, pinned so they stay comparable; the default is now the rules-first
``binary.en.v4``) on TREC DL 2019 passages (read in place from the shared data folder). One
model, one process; for each pair the variants below run back to back, their order rotating
per pair so that a drift in the machine's load favours none:

* ``llama.cpp, one batch``: llama-cpp-python alone, ``Llama.eval`` of the prompt's tokens
  after the prefix every prompt shares (kept in the KV cache), in one call (n_batch 512):
  the limit;
* ``llama.cpp, 32-token blocks``: the same tokens evaluated the way the judge does for
  bit-identical logits (blocks of ``EVAL_BLOCK`` tokens aligned to absolute positions);
* ``judge pass``: :meth:`LocalBackend._complete_blocking` (tokenisation, evaluation,
  softmax over the vocabulary, the KV copy kept for a reason), split into those parts;
* ``judge call``: the same request through ``ResilientBackend.complete`` on the event loop
  (worker thread, locks, accounting): the per-call overhead on top of the pass.

Printed: prompts/s and evaluated tokens/s of each, the judge's seconds split by part, the
shared prefix and tokens per prompt, and the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from _dl19 import dl19_pairs  # noqa: E402

from judge.backends import ChatRequest, ensure_resilient  # noqa: E402
from judge.backends._local import EVAL_BLOCK, LocalBackend  # noqa: E402
from judge.judging import JudgeConfig, template_for  # noqa: E402


def _requests(pairs: list[tuple[str, str, str, int]]) -> list[ChatRequest]:
    # Pinned: the documented figures were measured on binary.en.v2 (the default then).
    template = template_for(JudgeConfig(language="en", probability=True, template="binary.en.v2"))
    assert template.answer_prefix is not None and template.candidates is not None
    return [
        ChatRequest(
            messages=template.render(query=query, passage=passage),
            max_tokens=1,
            answer_prefix=template.answer_prefix,
            candidates=template.candidates,
        )
        for _, query, passage, _ in pairs
    ]


def _shared_prefix(prompts: list[list[int]]) -> int:
    n = min(len(p) for p in prompts)
    for i in range(n):
        if len({p[i] for p in prompts}) > 1:
            return i
    return n


class Timed:
    """Wraps a backend method to add its seconds to ``parts[name]`` while ``on``."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self.on = False

    def wrap(self, obj: Any, attr: str, name: str) -> None:
        inner: Callable[..., Any] = getattr(obj, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                if self.on:
                    self.parts[name] = self.parts.get(name, 0.0) + time.perf_counter() - started

        setattr(obj, attr, timed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--per-query", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    requests = _requests(dl19_pairs(args.pairs, args.per_query))
    backend = LocalBackend()
    llm = backend._ensure_loaded()
    prompts = [backend._prompt_tokens(llm, r) for r in requests]
    shared = _shared_prefix(prompts)
    block = EVAL_BLOCK
    timer = Timed()
    timer.wrap(backend, "_prompt_tokens", "tokenise")
    timer.wrap(backend, "_evaluate", "evaluate (blocks)")
    timer.wrap(backend, "_keep", "keep KV for a reason")
    resilient = ensure_resilient(backend)
    loop = asyncio.new_event_loop()

    def prime() -> None:
        """The KV cache holds exactly the shared prefix (as after another prompt)."""
        backend.reset_cache()
        llm.eval(prompts[0][:shared])

    def one_batch(i: int) -> int:
        llm.n_tokens = shared
        llm.eval(prompts[i][shared:])
        return len(prompts[i]) - shared

    def blocks(i: int) -> int:
        start = shared - shared % block
        llm.n_tokens = start
        for at in range(start, len(prompts[i]), block):
            llm.eval(prompts[i][at : at + block])
        return len(prompts[i]) - start

    def judge_pass(i: int) -> int:
        backend._cached_len = shared  # what the judge may reuse: the prefix, block-aligned
        timer.on = True
        try:
            backend._complete_blocking(requests[i])
        finally:
            timer.on = False
        return backend.last_call.evaluated_tokens if backend.last_call else 0

    def judge_call(i: int) -> int:
        backend._cached_len = shared
        loop.run_until_complete(resilient.complete(requests[i]))
        return backend.last_call.evaluated_tokens if backend.last_call else 0

    variants: dict[str, Callable[[int], int]] = {
        "llama.cpp, one batch": one_batch,
        f"llama.cpp, {block}-token blocks": blocks,
        "judge pass": judge_pass,
        "judge call": judge_call,
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    tokens: dict[str, int] = dict.fromkeys(variants, 0)
    names = list(variants)
    for i in range(len(requests)):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            prime()
            started = time.perf_counter()
            tokens[name] += variants[name](i)
            seconds[name].append(time.perf_counter() - started)
    loop.run_until_complete(resilient.aclose())
    loop.close()
    load_after = os.getloadavg()
    limit = sum(seconds["llama.cpp, one batch"])
    print(
        f"{len(requests)} DL 2019 prompts (binary.en.v2), {statistics.mean(map(len, prompts)):.0f} "
        f"tokens each on average, {shared} shared; {backend.n_threads} threads"
    )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    report: dict[str, Any] = {"prompts": len(requests), "shared_prefix": shared, "variants": {}}
    for name in variants:
        total = sum(seconds[name])
        rate = len(requests) / total
        print(
            f"{name:>26}: {rate:.3f} prompts/s, {tokens[name] / total:.0f} evaluated tokens/s, "
            f"{limit / total:.0%} of the limit"
        )
        report["variants"][name] = {"seconds": seconds[name], "tokens": tokens[name]}
    pass_total = sum(seconds["judge pass"])
    for part, value in timer.parts.items():
        print(f"{'judge pass: ' + part:>40}: {value / pass_total:.1%} of its seconds")
    report["parts"] = timer.parts
    report["load"] = [load_before, load_after]
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
