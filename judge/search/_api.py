"""``judge.search(queries, config, out)``: the package called as a function."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from judge.search._options import SearchOptions
from judge.search._queries import Query, read_queries
from judge.search._search_config import SearchConfig, load_config
from judge.search._search_runner import SearchRun, run_search


def resolve_inputs(
    queries: str | Path | Sequence[Query] | Mapping[str, str],
    config: str | Path | SearchConfig,
    *,
    overrides: Mapping[str, object] | None = None,
    qrels: str | Path | None = None,
) -> tuple[list[Query] | Mapping[str, str], SearchConfig]:
    """Paths read as files (a query set, a configuration TOML), objects taken as they are."""
    items: list[Query] | Mapping[str, str]
    if isinstance(queries, str | Path):
        items = read_queries(queries, qrels)
    elif isinstance(queries, Mapping):
        items = queries
    else:
        items = list(queries)
    if isinstance(config, SearchConfig):
        cfg = config.with_params(overrides) if overrides else config
    else:
        cfg = load_config(config, overrides)
    return items, cfg


def search(
    queries: str | Path | Sequence[Query] | Mapping[str, str],
    config: str | Path | SearchConfig,
    out: str | Path,
    *,
    options: SearchOptions | None = None,
    overrides: Mapping[str, object] | None = None,
    qrels: str | Path | None = None,
) -> SearchRun:
    """Run a query set (a path, a list of :class:`Query` or ``{id: text}``) through a
    configuration (a TOML path or a :class:`SearchConfig`; ``overrides`` set its knobs) and
    write ``out`` (dataset JSONL), the ``.trec`` run and the ``.meta.json`` beside it."""
    items, cfg = resolve_inputs(queries, config, overrides=overrides, qrels=qrels)
    return run_search(items, cfg, out, options=options)
