"""The embedded engine: BM25, dense or hybrid retrieval over an index built by ``judge index
build`` (no server). ``params.retriever`` picks: ``bm25`` (the default), ``dense`` (the
index's vectors, ``judge index build --dense``) or ``hybrid`` (both, each to
``fusion_depth``, combined by :func:`judge.search._fusion.fuse`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge.search._bm25_index import BM25Index
from judge.search._dense_index import DenseVectors, open_dense, query_vector
from judge.search._fusion import DENSE_PARAMS, fuse
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
        d = {**DENSE_PARAMS, **p}
        self.retriever = str(d["retriever"])
        self.fusion: dict[str, Any] = {
            "weight": float(d["weight"]),  # type: ignore[arg-type]
            "normalization": str(d["normalization"]),
            "combination": str(d["combination"]),
            "rrf_k": float(d["rrf_k"]),  # type: ignore[arg-type]
        }
        self.fusion_depth = int(d["fusion_depth"])  # type: ignore[call-overload]
        self.ann = bool(d["ann"])
        self.dense: DenseVectors | None = None
        self.encoder: Any = None
        if self.retriever != "bm25":
            try:
                self.dense, self.encoder = open_dense(self.index, encoder=config.encoder)
            except SearchError as exc:
                where = None if config.path is None else str(config.path)
                raise SearchError(f"{config.index}: {exc.message}", path=where, field=exc.field) from None

    async def prepare(self) -> None:
        if self.retriever != "dense":
            self.index.scorer(*self.knobs)

    def _dense(self, query: str, depth: int) -> list[tuple[int, float]]:
        assert self.dense is not None
        vector = query_vector(self.encoder, query)
        return self.dense.search_ann(vector, depth) if self.ann else self.dense.search(vector, depth)

    async def search(self, query: str, depth: int) -> list[Hit]:
        if self.retriever == "bm25":
            found = self.index.search(query, depth, *self.knobs)
        elif self.retriever == "dense":
            found = self._dense(query, depth)
        else:
            k = max(depth, self.fusion_depth)
            lexical = self.index.search(query, k, *self.knobs)
            found = fuse(lexical, self._dense(query, k), **self.fusion)[:depth]
        return [Hit(self.index.ids[i], self.index.text(i), score) for i, score in found]

    async def version(self) -> str | None:
        tools = self.index.meta.get("tools", {})
        lexical = f"bm25s {tools.get('bm25s', '?')}"
        if self.retriever == "bm25":
            return lexical
        dense = f"{self.encoder.name} {self.encoder.version}"
        return dense if self.retriever == "dense" else f"{lexical} + {dense}"

    async def stats(self) -> dict[str, Any]:
        stats = self.index.stats()
        if self.retriever != "bm25":
            stats["dense"] = self.index.meta.get("dense")
        return stats

    def describe_request(self, query: str, depth: int) -> dict[str, Any]:
        method, k1, b, delta = self.knobs
        out: dict[str, Any] = {
            "index": str(self.config.index),
            "query": query,
            "tokens": self.index.tokenize(query),
            "depth": depth,
            "method": method,
            "k1": k1,
            "b": b,
            "delta": delta,
        }
        if self.retriever == "bm25":
            return out
        dense = {"retriever": self.retriever, "encoder": self.encoder.name, "ann": self.ann}
        if self.retriever == "dense":
            return {"index": out["index"], "query": query, "depth": depth, **dense}
        return {**out, **dense, **self.fusion, "fusion_depth": self.fusion_depth}

    async def close(self) -> None:
        return None
