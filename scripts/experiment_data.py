"""Corpora, query sets and indexes for the experiment benchmarks, built at run time from
``../shared/data`` into a work directory (never copied into the repository).

* ``dl19``: TREC DL 2019 passages (``trec_dl19/dl2019_document.jsonl``, 10,818), the 43
  queries NIST judged (``msmarco-test2019-queries.tsv`` filtered by ``2019qrels-pass.txt``)
  and NIST's graded qrels.
* ``zh``: a Chinese corpus from ``zh_rgb/zh_refine.json``: every query's positive and
  negative passages (300 queries x 21); a query's positives are relevant (1), its negatives
  not (0); passages of other queries are unlabelled (not relevant to it).
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(ROOT.parent / "shared" / "data")
if not DATA.exists():
    DATA = Path("/work/shared/data")


def _write_lines(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def prepare_dl19(work: Path, *, limit: int | None = None, offset: int = 0) -> dict[str, Path]:
    """docs.jsonl, queries.jsonl (the judged queries in the qrels' order, ``limit`` of them
    from the ``offset``-th: 0 is the docs' query set, 20 the held-out one), qrels.txt, index/."""
    src = DATA / "trec_dl19"
    work.mkdir(parents=True, exist_ok=True)
    docs = work / "docs.jsonl"
    if not docs.exists():
        rows = []
        with open(src / "dl2019_document.jsonl", encoding="utf-8") as fh:
            for line in fh:
                o = json.loads(line)
                rows.append({"id": str(o["docid"]), "text": o["doc"]})
        _write_lines(docs, rows)
    judged: dict[str, None] = {}
    for line in (src / "2019qrels-pass.txt").read_text(encoding="utf-8").splitlines():
        if line.strip():
            judged.setdefault(line.split()[0], None)
    queries = []
    for line in (src / "msmarco-test2019-queries.tsv").read_text(encoding="utf-8").splitlines():
        qid, _, text = line.partition("\t")
        if qid in judged:
            queries.append({"id": qid, "query": text.strip()})
    queries.sort(key=lambda q: list(judged).index(str(q["id"])))
    queries = queries[offset:] if limit is None else queries[offset : offset + limit]
    start = f"-from{offset}" if offset else ""
    qpath = work / f"queries{start}{'' if limit is None else f'-{limit}'}.jsonl"
    _write_lines(qpath, queries)
    return {"docs": docs, "queries": qpath, "qrels": src / "2019qrels-pass.txt", "index": work / "index"}


def prepare_zh(work: Path, *, limit: int = 20) -> dict[str, Path]:
    """docs.jsonl (every passage of zh_rgb), queries.jsonl (the first ``limit``), qrels.txt, index/."""
    work.mkdir(parents=True, exist_ok=True)
    with open(DATA / "zh_rgb" / "zh_refine.json", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    docs, queries = [], []
    grades: dict[tuple[str, str], int] = {}
    seen: dict[str, str] = {}
    for r in records:
        qid = f"zh{r['id']}"
        for kind, grade in (("positive", 1), ("negative", 0)):
            for i, text in enumerate(r[kind]):
                did = seen.get(text)
                if did is None:
                    did = seen[text] = f"{qid}-{kind[0]}{i}"
                    docs.append({"id": did, "text": text})
                grades[(qid, did)] = max(grade, grades.get((qid, did), 0))
        if len(queries) < limit:
            queries.append({"id": qid, "query": r["query"]})
    keep = {str(q["id"]) for q in queries}
    _write_lines(work / "docs.jsonl", docs)  # type: ignore[arg-type]
    _write_lines(work / "queries.jsonl", queries)
    qrels = [f"{q} 0 {d} {g}" for (q, d), g in grades.items() if q in keep]
    (work / "qrels.txt").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return {"docs": work / "docs.jsonl", "queries": work / "queries.jsonl", "qrels": work / "qrels.txt",
            "index": work / "index"}  # fmt: skip


def ensure_index(paths: dict[str, Path], language: str) -> None:
    from judge.search import build_index

    if not paths["index"].exists():
        build_index(paths["docs"], paths["index"], language=language)


def write_config(work: Path, depth: int, name: str = "bm25") -> Path:
    path = work / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\nengine = "embedded"\nindex = "index"\ndepth = {depth}\n'
        "[params]\nk1 = 1.2\nb = 0.75\n",
        encoding="utf-8",
    )
    return path
