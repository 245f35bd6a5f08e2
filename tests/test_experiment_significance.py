"""The README's bundled experiment (16 queries, 2 x 2 grid, judged from the query set's own
labels) gives one answer whatever ``--seed`` and ``--resamples``: its randomization tests
count every sign assignment (at most 16 non-zero differences), so the p-values, the Holm
adjustment and the sentence that opens the report are the same at 2,000 and 10,000
resamples, seeds 1 and 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from _experiment_fixtures import DATA, bundled

from judge.cli import main


def test_the_bundled_experiments_answer_does_not_depend_on_seed_or_resamples(tmp_path: Path) -> None:
    data = bundled(tmp_path)
    config = tmp_path / "bm25.toml"
    shutil.copy(DATA / "bm25.toml", config)  # as shipped: index.zh beside it, built by bundled()
    answers = []
    for resamples, seed in ((2000, 1), (2000, 2), (10_000, 1), (10_000, 2)):
        out = tmp_path / f"exp-{resamples}-{seed}"
        code = main(
            ["experiment", str(data.queries), "--config", str(config), "--grid", "k1=1.2,0.6",
             "--grid", "b=0.75,0.3", "--backend", f"qrels:{DATA / 'queries.zh.qrels'}",
             "--cache", str(tmp_path / "cache.sqlite"), "--resamples", str(resamples), "--seed", str(seed),
             "-o", str(out), "--quiet"]
        )  # fmt: skip
        assert code == 0
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
        tests = {
            (c["system"], c["measure"]): (c["p_value"], c["p_holm"], c["p_method"], c["p_holm_se"])
            for c in report["comparisons"]
        }
        answers.append((report["experiment"]["best"], report["experiment"]["best_vs_baseline"], tests))
    assert all(a == answers[0] for a in answers[1:])
    best, sentence, tests = answers[0]
    assert best == "bm25-k1_0.6-b_0.3"
    # 11 of its 16 ndcg@10 differences are non-zero (10 up, 1 down): 4 of the 2^11 assignments
    # are as extreme, p = 2^-9; it is the 3rd smallest of 15 p-values, so Holm multiplies by 13.
    p, p_holm, method, se = tests[(best, "ndcg_cut_10")]
    assert (p, method, se) == (4 / 2**11, "exact", 0.0)
    assert p_holm == 13 * 4 / 2**11
    assert sentence == "better by +0.0442 than bm25-k1_1.2-b_0.75, significant (Holm p 0.0254)"
    assert all(m == "exact" and s == 0.0 for _, _, m, s in tests.values())
