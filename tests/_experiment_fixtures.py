"""Shared fixtures of the experiment tests: the bundled Chinese search data in a tmp folder.

``bundled(tmp)`` builds the embedded engine's index of ``datasets/search/corpus.zh.jsonl``,
writes ``bm25.toml`` pointing at it and a qrels file that grades EVERY corpus passage for
every query (the query set's grades, 0 elsewhere), so the qrels-backed judge answers every
pair with exactly one call (no unjudged pair, no re-ask).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "datasets" / "search"


@dataclass(frozen=True)
class Bundled:
    root: Path
    queries: Path
    config: Path
    qrels: Path
    index: Path

    def write_config(self, name: str, body: str) -> Path:
        path = self.root / f"{name}.toml"
        path.write_text(f'name = "{name}"\nindex = "{self.index}"\n{body}', encoding="utf-8")
        return path


def bundled(tmp: Path, *, depth: int = 10) -> Bundled:
    from judge.search import build_index

    index = tmp / "index.zh"
    if not index.exists():
        build_index(DATA / "corpus.zh.jsonl", index, language="zh")
    docs = [
        json.loads(line)["id"] for line in (DATA / "corpus.zh.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    lines = []
    queries = [
        json.loads(line) for line in (DATA / "queries.zh.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    for q in queries:
        grades = q.get("qrels") or {}
        lines += [f"{q['id']} 0 {d} {int(grades.get(d, 0))}" for d in docs]
    qrels = tmp / "all.qrels"
    qrels.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp / "bm25.toml"
    config.write_text(
        f'engine = "embedded"\nindex = "{index}"\ndepth = {depth}\n[params]\nk1 = 1.2\nb = 0.75\n',
        encoding="utf-8",
    )
    return Bundled(tmp, DATA / "queries.zh.jsonl", config, qrels, index)


def trec_rankings(path: Path, depth: int | None = None) -> dict[str, list[str]]:
    """A TREC run's rankings (file order is rank order), cut at ``depth``."""
    out: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if parts:
            out.setdefault(parts[0], []).append(parts[2])
    return {q: (d if depth is None else d[:depth]) for q, d in out.items()}
