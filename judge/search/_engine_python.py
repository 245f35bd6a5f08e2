"""The ``python`` engine: a retriever of your own, in process.

``callable = "module:function"``: called as ``function(query, depth, **params)`` (sync or
async); it returns a list of hits, each a dict (``id``, ``text``, optional ``score``), a
tuple ``(id, text[, score])``, or a LangChain ``Document`` (id from ``metadata["id"]``,
else ``Document.id``). ``retriever = "module:attribute"``: a LangChain ``BaseRetriever``
(or a zero-argument factory returning one), asked with ``ainvoke(query)`` and cut at
``depth``. ``pythonpath`` (relative to the TOML) is put first on ``sys.path``.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
from typing import Any

from judge.search._hits import Hit
from judge.search._search_config import SearchConfig
from judge.search._search_errors import SearchError


def _load(spec: str, path: str | None, field: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SearchError(f"cannot import {module_name!r}: {exc}", path=path, field=field) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SearchError(f"{module_name!r} has no attribute {attr!r}", path=path, field=field)
        obj = getattr(obj, part)
    return obj


class PythonEngine:
    def __init__(self, config: SearchConfig) -> None:
        self.config = config
        self.where = None if config.path is None else str(config.path)
        if config.pythonpath is not None and str(config.pythonpath) not in sys.path:
            sys.path.insert(0, str(config.pythonpath))
        self.field = "callable" if config.callable else "retriever"
        spec = config.callable or config.retriever or ""
        target = _load(spec, self.where, self.field)
        self.retriever: Any = None
        self.function: Any = None
        if config.retriever is not None:
            if not hasattr(target, "ainvoke") and callable(target):
                target = target()
            if not hasattr(target, "ainvoke"):
                raise SearchError(
                    f"{spec!r} is not a LangChain retriever", path=self.where, field="retriever"
                )
            self.retriever = target
        else:
            if not callable(target):
                raise SearchError(f"{spec!r} is not callable", path=self.where, field="callable")
            self.function = target

    async def search(self, query: str, depth: int) -> list[Hit]:
        if self.retriever is not None:
            items = list(await self.retriever.ainvoke(query))[:depth]
        else:
            if inspect.iscoroutinefunction(self.function):
                result = await self.function(query, depth, **self.config.params)
            else:
                result = await asyncio.to_thread(self.function, query, depth, **self.config.params)
            if inspect.isawaitable(result):
                result = await result
            items = list(result)[:depth]
        return [self._hit(i, item) for i, item in enumerate(items)]

    def _hit(self, i: int, item: Any) -> Hit:
        score: Any = None
        if isinstance(item, dict):
            hid, text, score = item.get("id"), item.get("text"), item.get("score")
        elif isinstance(item, tuple | list) and len(item) in (2, 3):
            hid, text = item[0], item[1]
            score = item[2] if len(item) == 3 else None
        elif hasattr(item, "page_content"):
            metadata = getattr(item, "metadata", None) or {}
            hid, text = metadata.get("id", getattr(item, "id", None)), item.page_content
            score = metadata.get("score")
        else:
            raise SearchError(
                f"hit {i}: expected a dict, an (id, text[, score]) tuple or a Document, "
                f"got {type(item).__name__}",
                path=self.where,
                field=self.field,
            )
        if isinstance(hid, bool) or not isinstance(hid, str | int):
            raise SearchError(f"hit {i}: no id (got {hid!r})", path=self.where, field=self.field)
        if not isinstance(text, str):
            raise SearchError(
                f"hit {i}: no text (got {type(text).__name__})", path=self.where, field=self.field
            )
        value = float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None
        return Hit(str(hid), text, value)

    async def version(self) -> str | None:
        module = (self.config.callable or self.config.retriever or "").partition(":")[0]
        version = getattr(sys.modules.get(module), "__version__", None)
        return None if version is None else f"{module} {version}"

    async def stats(self) -> dict[str, Any]:
        return {}

    def describe_request(self, query: str, depth: int) -> dict[str, Any]:
        target = self.config.callable or self.config.retriever
        return {self.field: target, "query": query, "depth": depth, "params": dict(self.config.params)}

    async def close(self) -> None:
        return None
