"""Search experiments' first half: query sets, search configurations and the engines that
run them, writing the project's dataset JSONL, a TREC run and the run's metadata. It knows
no judge: what is done with the results (judging, comparing) lives above it.

    from judge.search import load_config, read_queries, run_search
    run = run_search(read_queries("queries.jsonl"), load_config("bm25.toml"), "run.jsonl")

The package is also callable: ``judge.search("queries.jsonl", "bm25.toml", "run.jsonl")``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from judge.search._api import resolve_inputs
from judge.search._api import search as _search
from judge.search._bm25_index import BM25Index, IndexInfo, build_index
from judge.search._dense_index import DenseInfo, build_dense, current_index
from judge.search._encoder import (
    ENTRY_POINT_GROUP,
    Encoder,
    get_encoder,
    register_encoder,
    registered_encoders,
)
from judge.search._engines import open_engine
from judge.search._fusion import MIN_SCORE, fuse, normalize
from judge.search._hits import Engine, Hit
from judge.search._queries import Query, check_queries, read_queries
from judge.search._request_template import Template, compile_template
from judge.search._search_config import (
    BM25_METHODS,
    EMBEDDED_PARAMS,
    ENGINES,
    SearchConfig,
    config_from_dict,
    load_config,
    parse_overrides,
    replace_depth,
    with_encoder,
)
from judge.search._search_errors import SearchError, SearchFailed, TransientSearchError
from judge.search._search_options import (
    DEFAULT_SEARCH_CONCURRENCY,
    DEFAULT_SEARCH_RETRIES,
    DEFAULT_SEARCH_TIMEOUT_S,
    SearchOptions,
)
from judge.search._search_runner import SearchRun, arun_search, run_search, side_paths
from judge.search._tokenize import detect_language, tokenize_en, tokenize_zh

__all__ = [
    "BM25_METHODS",
    "DEFAULT_SEARCH_CONCURRENCY",
    "DEFAULT_SEARCH_RETRIES",
    "DEFAULT_SEARCH_TIMEOUT_S",
    "EMBEDDED_PARAMS",
    "ENGINES",
    "ENTRY_POINT_GROUP",
    "MIN_SCORE",
    "BM25Index",
    "DenseInfo",
    "Encoder",
    "Engine",
    "Hit",
    "IndexInfo",
    "Query",
    "SearchConfig",
    "SearchError",
    "SearchFailed",
    "SearchOptions",
    "SearchRun",
    "Template",
    "TransientSearchError",
    "arun_search",
    "build_dense",
    "build_index",
    "check_queries",
    "compile_template",
    "config_from_dict",
    "current_index",
    "detect_language",
    "fuse",
    "get_encoder",
    "load_config",
    "normalize",
    "open_engine",
    "parse_overrides",
    "read_queries",
    "register_encoder",
    "registered_encoders",
    "replace_depth",
    "resolve_inputs",
    "run_search",
    "side_paths",
    "tokenize_en",
    "tokenize_zh",
    "with_encoder",
]


class _CallableModule(types.ModuleType):
    """``judge.search`` is both this package and :func:`judge.search._api.search`."""

    def __call__(self, *args: Any, **kwargs: Any) -> SearchRun:
        return _search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
