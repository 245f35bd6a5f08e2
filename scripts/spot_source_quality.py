#!/usr/bin/env python
"""A spot check of the source-quality judge on well-known sites.

There is no labelled site-quality data in ``../shared``; this asks the judge (default: the
embedded model) for the grade of a fixed list of sites whose kind is plain (government,
encyclopedia, national media, Q&A community, blog platform, and made-up ad/spam domains),
and prints each grade beside the kind's expected range. It is a sanity check of the prompt
and the plumbing, not an agreement figure. Verdicts go to the verdict cache (``--cache``),
so a re-run is free.

    python scripts/spot_source_quality.py [--backend SPEC] [--language zh|en]
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# site -> (kind, expected grades)
SITES: dict[str, tuple[str, tuple[int, ...]]] = {
    "gov.cn": ("government", (3,)),
    "nhc.gov.cn": ("government", (3,)),
    "xinhuanet.com": ("national media", (3,)),
    "people.com.cn": ("national media", (3,)),
    "baike.baidu.com": ("encyclopedia", (2, 3)),
    "zh.wikipedia.org": ("encyclopedia", (3,)),
    "cnki.net": ("academic", (2, 3)),
    "zhihu.com": ("Q&A community", (1, 2)),
    "zhidao.baidu.com": ("Q&A community", (1,)),
    "tieba.baidu.com": ("forum", (1,)),
    "blog.sina.com.cn": ("blogs", (1,)),
    "cheap-pills-buy-now.top": ("ads/spam (made up)", (0,)),
    "best-health-tips-free.xyz": ("content farm (made up)", (0, 1)),
    "download-crack-free.cc": ("spam (made up)", (0,)),
}


async def run(args: argparse.Namespace) -> None:
    from judge.backends import make_backend
    from judge.judging import JudgeConfig
    from judge.judging._source_grades import grade_sites
    from judge.store import SQLiteVerdictStore

    backend = make_backend(args.backend)
    store = SQLiteVerdictStore(args.cache)
    try:
        config = JudgeConfig(language=args.language, explain=args.explain)
        grades, _ = await grade_sites(backend, list(SITES), config, store=store)
    finally:
        store.close()
        await backend.aclose()
    hits = 0
    print("| site | kind | expected | grade | reason |")
    print("|---|---|---|---|---|")
    for site, (kind, expected) in SITES.items():
        g = grades[site]
        ok = g.grade in expected
        hits += ok
        shown = "unjudged" if g.grade is None else str(g.grade)
        print(
            f"| {site} | {kind} | {'/'.join(map(str, expected))} | {shown}{'' if ok else ' ✗'} | {g.reason} |"
        )
    print(f"\n{hits} of {len(SITES)} sites graded in the expected range")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="local:qwen2.5-coder-1.5b-q4km")
    parser.add_argument("--language", default="zh", choices=("zh", "en"))
    parser.add_argument("--explain", action="store_true", help="generate a reason per site (slower)")
    parser.add_argument("--cache", default=str(ROOT / "runs" / "eval_recall" / "cache.sqlite"))
    asyncio.run(run(parser.parse_args()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
