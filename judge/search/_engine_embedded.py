"""The embedded engine: BM25 over an index built by ``judge index build`` (no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge.search._bm25_index import BM25Index
from judge.search._hits import Hit
from judge.search._search_config import SearchConfig
from judge.search._search_errors import SearchError

_OPEN: dict[tuple[str, int], BM25Index] = {}


def open_index(path: str) -> BM25Index:
    """One opened index per folder for the process (a grid's configurations share its
    tokens and score matrices); an index rebuilt since is opened again."""
    try:
        stamp = (Path(path) / "index.json").stat().st_mtime_ns
    except OSError:
        stamp = 0
    index = _OPEN.get((path, stamp))
    if index is None:
        index = _OPEN[(path, stamp)] = BM25Index(path)
    return index


class EmbeddedEngine:
    def __init__(self, config: SearchConfig) -> None:
        assert config.index is not None
        self.config = config
        try:
            self.index = open_index(str(config.index.resolve()))
        except SearchError as exc:
            where = None if config.path is None else str(config.path)
            raise SearchError(f"{config.index}: {exc.message}", path=where, field="index") from None
        p = config.params
        self.knobs = (str(p["method"]), float(p["k1"]), float(p["b"]), float(p["delta"]))  # type: ignore[arg-type]

    async def prepare(self) -> None:
        self.index.scorer(*self.knobs)

    async def search(self, query: str, depth: int) -> list[Hit]:
        found = self.index.search(query, depth, *self.knobs)
        return [Hit(self.index.ids[i], self.index.text(i), score) for i, score in found]

    async def version(self) -> str | None:
        tools = self.index.meta.get("tools", {})
        return f"bm25s {tools.get('bm25s', '?')}"

    async def stats(self) -> dict[str, Any]:
        return self.index.stats()

    def describe_request(self, query: str, depth: int) -> dict[str, Any]:
        method, k1, b, delta = self.knobs
        return {
            "index": str(self.config.index),
            "query": query,
            "tokens": self.index.tokenize(query),
            "depth": depth,
            "method": method,
            "k1": k1,
            "b": b,
            "delta": delta,
        }

    async def close(self) -> None:
        return None
