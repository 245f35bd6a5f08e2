"""The engine behind a configuration (each engine's module is imported only when used)."""

from __future__ import annotations

from judge.search._hits import Engine
from judge.search._search_config import SearchConfig
from judge.search._search_errors import SearchError


def open_engine(config: SearchConfig, *, timeout_s: float = 30.0) -> Engine:
    """The engine of ``config`` (nothing is sent yet)."""
    if config.engine == "hybrid":
        from judge.search._engine_hybrid import HybridEngine

        return HybridEngine(config, lambda source: open_engine(source, timeout_s=timeout_s))
    if config.engine == "embedded":
        from judge.search._engine_embedded import EmbeddedEngine

        return EmbeddedEngine(config)
    if config.engine in ("http", "opensearch", "elasticsearch", "solr"):
        from judge.search._engine_http import HttpEngine

        return HttpEngine(config, timeout_s=timeout_s)
    if config.engine == "postgres":
        from judge.search._engine_postgres import PostgresEngine

        return PostgresEngine(config)
    if config.engine == "python":
        from judge.search._engine_python import PythonEngine

        return PythonEngine(config)
    raise SearchError(f"unknown engine {config.engine!r}", path=str(config.path), field="engine")
