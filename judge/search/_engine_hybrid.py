"""The ``hybrid`` engine: two configurations' results combined.

``sources = ["a.toml", "b.toml"]`` names any two configurations (a team's OpenSearch BM25
and the embedded dense retriever, two remote engines...). Each is asked for
``max(depth, fusion_depth)`` results; the two lists are combined by
:func:`judge.search._fusion.fuse` under the ``[params]`` knobs (``weight`` is the second
source's share) and cut at ``depth``. The metadata keeps both sources' names, hashes,
rendered requests, versions and statistics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from judge.search._fusion import fuse
from judge.search._hits import Engine, Hit
from judge.search._search_config import SearchConfig, replace_depth
from judge.search._search_errors import SearchError


class HybridEngine:
    def __init__(self, config: SearchConfig, open_source: Callable[[SearchConfig], Engine]) -> None:
        self.config = config
        self.where = None if config.path is None else str(config.path)
        p = config.params
        self.fusion: dict[str, Any] = {
            "weight": float(p["weight"]),  # type: ignore[arg-type]
            "normalization": str(p["normalization"]),
            "combination": str(p["combination"]),
            "rrf_k": float(p["rrf_k"]),  # type: ignore[arg-type]
        }
        depth = max(config.depth, int(p["fusion_depth"]))  # type: ignore[call-overload]
        self.sources = [replace_depth(s, depth) for s in config.sources]
        self.engines: list[Engine] = []
        try:
            for source in self.sources:
                self.engines.append(open_source(source))
        except BaseException:
            for engine in self.engines:
                close = engine.close()
                if asyncio.iscoroutine(close):
                    close.close()
            raise

    async def prepare(self) -> None:
        for engine in self.engines:
            prepare = getattr(engine, "prepare", None)
            if prepare is not None:
                await prepare()

    def _scored(self, i: int, hits: list[Hit]) -> list[tuple[str, float]]:
        if self.fusion["combination"] == "rrf":
            return [(h.id, 0.0) for h in hits]
        if any(h.score is None for h in hits):
            raise SearchError(
                f"source {self.sources[i].name!r} returns hits without scores: map response.score or "
                'use combination = "rrf"',
                path=self.where,
                field=f"sources[{i}]",
            )
        return [(h.id, float(h.score or 0.0)) for h in hits]

    async def search(self, query: str, depth: int) -> list[Hit]:
        results = await asyncio.gather(
            *(e.search(query, s.depth) for e, s in zip(self.engines, self.sources, strict=True))
        )
        texts: dict[str, str] = {}
        for hits in results:
            for h in hits:
                texts.setdefault(h.id, h.text)
        fused = fuse(self._scored(0, results[0]), self._scored(1, results[1]), **self.fusion)
        return [Hit(key, texts[key], score) for key, score in fused[:depth]]

    async def _source_info(self, i: int) -> dict[str, Any]:
        source, engine = self.config.sources[i], self.engines[i]
        info: dict[str, Any] = {"name": source.name, "config_hash": source.hash, "engine": source.engine}
        try:
            info["version"] = await engine.version()
        except Exception:
            info["version"] = None
        try:
            info["stats"] = await engine.stats()
        except Exception:
            info["stats"] = {}
        return info

    async def version(self) -> str | None:
        infos = [await self._source_info(i) for i in range(len(self.engines))]
        return " + ".join(f"{info['name']} ({info['version'] or info['engine']})" for info in infos)

    async def stats(self) -> dict[str, Any]:
        return {"sources": [await self._source_info(i) for i in range(len(self.engines))]}

    def describe_request(self, query: str, depth: int) -> dict[str, Any]:
        sources = [
            {
                "name": s.name,
                "config_hash": given.hash,
                "engine": s.engine,
                "request": e.describe_request(query, s.depth),
            }
            for given, s, e in zip(self.config.sources, self.sources, self.engines, strict=True)
        ]
        return {"query": query, "depth": depth, **self.fusion, "sources": sources}

    async def close(self) -> None:
        for engine in self.engines:
            await engine.close()
