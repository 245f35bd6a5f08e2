"""Running a query set through a configuration's engine.

``arun_search(queries, config, out)`` writes three files:

* ``out`` (``run.jsonl``): the project's dataset JSONL, one line per query that found
  something, in query-set order: ``{"id", "query", "retrieval_context": [{"id", "text",
  "score"}...], "qrels"?, "search": {"config", "config_hash", "engine", "latency_ms"}}``;
  every command that reads datasets (``judge score``, ``judge compare-systems``...) takes it
  (they ignore the extra keys). A query with no result has no line (a dataset line needs a
  passage); it is listed under ``no_hits`` in the metadata and searched again on resume.
* ``run.trec``: the same rankings as a TREC run, the configuration's name as run tag.
* ``run.meta.json``: the configuration (hash and content), the rendered request of the
  first query (header values from the environment are shown as ``${VAR}``, never their
  values), the engine's version and index statistics where it reports them, the options,
  and every query's latency.

Lines are appended one whole line per write as each query completes, so a kill loses no
line written (a torn last line is dropped on resume). Re-run with the same configuration
hash, a run keeps every line already written and searches only the missing queries; a file
written with another hash is refused (a :class:`SearchError`: pick another output or remove
it). Before the rest, the first query to search is sent alone: an unreachable engine, a bad
template or a response mapping that finds nothing is a :class:`SearchError` naming the
configuration and the field, and nothing else is sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from judge.search._engines import open_engine
from judge.search._hits import Engine, Hit
from judge.search._options import MAX_BACKOFF_S, SearchOptions
from judge.search._queries import Query, check_queries
from judge.search._search_config import SearchConfig
from judge.search._search_errors import SearchError, SearchFailed, TransientSearchError

META_FORMAT = 1


@dataclass(frozen=True)
class SearchRun:
    """A finished run: its three files, the configuration, how many queries were searched
    now and reused from an earlier interrupted run, each query's latency in milliseconds
    (reused queries: as recorded then) and the queries that found nothing."""

    dataset_path: Path
    trec_path: Path
    meta_path: Path
    config: SearchConfig
    queries_searched: int
    queries_reused: int
    latencies_ms: dict[str, float] = field(default_factory=dict)
    no_hits: tuple[str, ...] = ()

    def summary(self) -> str:
        lat = sorted(self.latencies_ms.values())
        median = lat[len(lat) // 2] if lat else 0.0
        return (
            f"{self.config.name} ({self.config.short_hash}): {self.queries_searched} searched, "
            f"{self.queries_reused} reused, {len(self.no_hits)} without results, median "
            f"{median:.1f} ms -> {self.dataset_path}, {self.trec_path.name}, {self.meta_path.name}"
        )


def side_paths(out: Path) -> tuple[Path, Path]:
    """``run.jsonl`` -> (``run.trec``, ``run.meta.json``)."""
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(f"{stem}.trec"), out.with_name(f"{stem}.meta.json")


class _RateLimiter:
    def __init__(self, rate: float | None) -> None:
        self.interval = 0.0 if rate is None else 1.0 / rate
        self.next = 0.0
        self.lock = asyncio.Lock()

    async def wait(self) -> None:
        if not self.interval:
            return
        async with self.lock:
            now = time.monotonic()
            start = max(now, self.next)
            self.next = start + self.interval
        if start > now:
            await asyncio.sleep(start - now)


async def _search_one(
    engine: Engine, query: str, depth: int, options: SearchOptions, limiter: _RateLimiter
) -> list[Hit]:
    retrying = AsyncRetrying(
        stop=stop_after_attempt(options.max_retries + 1),
        wait=wait_exponential(multiplier=options.backoff_s, max=MAX_BACKOFF_S),
        retry=retry_if_exception_type(TransientSearchError),
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            await limiter.wait()
            try:
                return await asyncio.wait_for(engine.search(query, depth), options.timeout_s)
            except TimeoutError:
                raise TransientSearchError(f"no answer within {options.timeout_s:g} s") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _record(q: Query, hits: list[Hit], config: SearchConfig, latency_ms: float) -> dict[str, Any]:
    passages: list[dict[str, Any]] = []
    for h in hits:
        item: dict[str, Any] = {"id": h.id, "text": h.text}
        if h.score is not None:
            item["score"] = h.score
        passages.append(item)
    rec: dict[str, Any] = {"id": q.id, "query": q.query, "retrieval_context": passages}
    if q.qrels is not None:
        rec["qrels"] = q.qrels
    rec["search"] = {
        "config": config.name,
        "config_hash": config.hash,
        "engine": config.engine,
        "latency_ms": round(latency_ms, 3),
    }
    return rec


def _line(rec: Mapping[str, Any]) -> bytes:
    return (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")


def _refuse(out: Path, config: SearchConfig, found: str) -> SearchError:
    return SearchError(
        f"was written by a configuration with hash {found[:12]}, not {config.short_hash} "
        f"({config.name}): give another output file or remove it to start again",
        path=str(out),
        field="config",
    )


def _read_existing(
    out: Path, meta_path: Path, config: SearchConfig, ids: set[str]
) -> dict[str, dict[str, Any]]:
    """The lines of an earlier run of this configuration (a torn last line is cut off)."""
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            found = str(meta["config"]["hash"])
        except (OSError, ValueError, KeyError, TypeError):
            found = config.hash
        if found != config.hash:
            raise _refuse(out, config, found)
    if not out.exists():
        return {}
    data = out.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):  # a line torn by a kill: drop it
        with out.open("r+b") as fh:
            fh.truncate(end)
        data = data[:end]
    existing: dict[str, dict[str, Any]] = {}
    for lineno, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            qid = str(rec["id"])
            found = str(rec["search"]["config_hash"])
        except (ValueError, KeyError, TypeError):
            raise SearchError("not a line written by judge search", path=str(out), line=lineno) from None
        if found != config.hash:
            raise _refuse(out, config, found)
        if qid not in ids:
            raise SearchError(
                f"query {qid!r} is not in the query set", path=str(out), line=lineno, field="id"
            )
        existing[qid] = rec
    return existing


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _trec_token(value: str) -> str:
    token = "_".join(value.split()) or "_"
    return "line" + token[1:] if token.startswith("#") else token


def _trec_text(records: Sequence[Mapping[str, Any]], tag: str) -> bytes:
    lines: list[str] = []
    tag = _trec_token(tag)
    for rec in records:
        ctx = rec["retrieval_context"]
        seen: set[str] = set()
        rank = 0
        for i, p in enumerate(ctx):
            docno = _trec_token(str(p["id"]))
            if docno in seen:
                continue
            seen.add(docno)
            rank += 1
            score = p.get("score")
            value = float(score) if isinstance(score, int | float) else float(len(ctx) - i)
            lines.append(f"{_trec_token(str(rec['id']))} Q0 {docno} {rank} {value!r} {tag}\n")
    return "".join(lines).encode("utf-8")


def _public_content(config: SearchConfig) -> dict[str, Any]:
    content = json.loads(json.dumps(config.content, default=str))
    if "dsn" in content:
        content["dsn"] = "<redacted>"
    return dict(content)


def _meta(
    config: SearchConfig,
    options: SearchOptions,
    status: str,
    engine_info: Mapping[str, Any],
    latencies: Mapping[str, float],
    no_hits: Sequence[str],
    counts: Mapping[str, int],
) -> dict[str, Any]:
    return {
        "format": META_FORMAT,
        "status": status,
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {
            "name": config.name,
            "hash": config.hash,
            "path": None if config.path is None else str(config.path),
            "content": _public_content(config),
        },
        "options": {
            "concurrency": options.concurrency,
            "timeout_s": options.timeout_s,
            "max_retries": options.max_retries,
            "rate_limit": options.rate_limit,
        },
        **engine_info,
        **counts,
        "no_hits": list(no_hits),
        "latency_ms": dict(latencies),
    }


class _Writer:
    """Appends one whole line per write; keeps the records by query id."""

    def __init__(self, out: Path, existing: Mapping[str, dict[str, Any]]) -> None:
        self.records = dict(existing)
        self.fh = out.open("ab")

    def add(self, rec: dict[str, Any]) -> None:
        self.fh.write(_line(rec))
        self.fh.flush()
        self.records[str(rec["id"])] = rec

    def close(self) -> None:
        self.fh.close()


def _where_field(config: SearchConfig) -> str:
    """The configuration key that names where the engine is."""
    if config.engine == "embedded":
        return "index"
    if config.engine == "postgres":
        return "dsn_env" if config.dsn_env else "dsn"
    if config.engine == "python":
        return "retriever" if config.retriever else "callable"
    return "url"


async def _probe(
    engine: Engine, q: Query, config: SearchConfig, options: SearchOptions, limiter: _RateLimiter
) -> tuple[list[Hit], float]:
    started = time.perf_counter()
    try:
        hits = await _search_one(engine, q.query, config.depth, options, limiter)
    except TransientSearchError as exc:
        raise SearchError(
            f"the {config.engine} engine failed for the first query {q.id!r}: {exc}",
            path=None if config.path is None else str(config.path),
            field=exc.field or _where_field(config),
        ) from exc
    return hits, (time.perf_counter() - started) * 1000


async def _engine_info(engine: Engine, config: SearchConfig, first: Query) -> dict[str, Any]:
    version: str | None = None
    stats: dict[str, Any] = {}
    try:
        version = await engine.version()
    except Exception:
        version = None
    try:
        stats = await engine.stats()
    except Exception:
        stats = {}
    return {
        "engine": {"name": config.engine, "version": version, "stats": stats},
        "first_request": {"query_id": first.id, **engine.describe_request(first.query, config.depth)},
    }


async def _search_rest(
    engine: Engine,
    todo: Sequence[Query],
    config: SearchConfig,
    options: SearchOptions,
    limiter: _RateLimiter,
    on_done: Any,
) -> None:
    sem = asyncio.Semaphore(options.concurrency)

    async def one(q: Query) -> None:
        async with sem:
            started = time.perf_counter()
            try:
                hits = await _search_one(engine, q.query, config.depth, options, limiter)
            except TransientSearchError as exc:
                raise SearchFailed(f"query {q.id!r}: {exc}") from exc
            on_done(q, hits, (time.perf_counter() - started) * 1000)

    tasks = [asyncio.create_task(one(q)) for q in todo]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def arun_search(
    queries: Sequence[Query] | Mapping[str, str],
    config: SearchConfig,
    out: str | Path,
    *,
    options: SearchOptions | None = None,
) -> SearchRun:
    """Search every query with ``config`` and write ``out`` (dataset JSONL), the TREC run
    and the metadata beside it (see the module docstring). Resumes an interrupted run of
    the same configuration hash."""
    options = options or SearchOptions()
    items = check_queries(queries if isinstance(queries, Mapping) else list(queries))
    out = Path(out)
    trec_path, meta_path = side_paths(out)
    existing = _read_existing(out, meta_path, config, {q.id for q in items})
    todo = [q for q in items if q.id not in existing]
    latencies: dict[str, float] = {}
    no_hits: list[str] = []
    engine_info: dict[str, Any] = {}
    if meta_path.is_file():
        try:
            old = json.loads(meta_path.read_text(encoding="utf-8"))
            engine_info = {k: old[k] for k in ("engine", "first_request") if k in old}
        except (OSError, ValueError):
            engine_info = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = _Writer(out, existing)

    def done(q: Query, hits: list[Hit], ms: float) -> None:
        latencies[q.id] = round(ms, 3)
        if hits:
            writer.add(_record(q, hits, config, ms))
        else:
            no_hits.append(q.id)

    counts = {"queries": len(items), "queries_searched": len(todo), "queries_reused": len(existing)}
    try:
        if todo:
            engine = open_engine(config, timeout_s=options.timeout_s)
            try:
                prepare = getattr(engine, "prepare", None)
                if prepare is not None:
                    await prepare()
                limiter = _RateLimiter(options.rate_limit)
                hits, ms = await _probe(engine, todo[0], config, options, limiter)
                engine_info = await _engine_info(engine, config, items[0])
                _write_atomic(
                    meta_path, _json(_meta(config, options, "running", engine_info, {}, [], counts))
                )
                done(todo[0], hits, ms)
                await _search_rest(engine, todo[1:], config, options, limiter, done)
            finally:
                await engine.close()
    finally:
        writer.close()
    records = [writer.records[q.id] for q in items if q.id in writer.records]
    for q in items:
        if q.id in existing:
            latencies.setdefault(q.id, float(existing[q.id]["search"].get("latency_ms", 0.0)))
    ordered = b"".join(_line(r) for r in records)
    if out.read_bytes() != ordered:
        _write_atomic(out, ordered)
    _write_atomic(trec_path, _trec_text(records, config.name))
    all_latencies = {q.id: latencies[q.id] for q in items if q.id in latencies}
    missing = set(no_hits)
    no_hits = [q.id for q in items if q.id in missing]
    _write_atomic(
        meta_path, _json(_meta(config, options, "complete", engine_info, all_latencies, no_hits, counts))
    )
    return SearchRun(
        out, trec_path, meta_path, config, len(todo), len(existing), all_latencies, tuple(no_hits)
    )


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def run_search(
    queries: Sequence[Query] | Mapping[str, str],
    config: SearchConfig,
    out: str | Path,
    *,
    options: SearchOptions | None = None,
) -> SearchRun:
    """:func:`arun_search` from synchronous code (not inside a running event loop)."""
    return asyncio.run(arun_search(queries, config, out, options=options))
