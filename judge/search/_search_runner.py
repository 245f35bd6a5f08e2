"""Running a query set through a configuration's engine.

``arun_search(queries, config, out)`` writes three files:

* ``out`` (``run.jsonl``): the project's dataset JSONL, one line per query that found
  something, in query-set order: ``{"id", "query", "retrieval_context": [{"id", "text",
  "score"}...], "qrels"?, "search": {"config", "config_hash", "engine", "latency_ms",
  "dropped"?}}``;
  every command that reads datasets (``judge score``, ``judge compare-systems``...) takes it
  (they ignore the extra keys). A query with no result has no line (a dataset line needs a
  passage); it is listed under ``no_hits`` in the metadata and searched again on resume.
* ``run.trec``: the same rankings as a TREC run, the configuration's name as run tag.
* ``run.meta.json``: the configuration (hash and content), the rendered request of the
  first query (header values from the environment are shown as ``${VAR}``, never their
  values), the engine's version and index statistics where it reports them, the options,
  every query's latency and the hits dropped (``dropped``: ``duplicate_ids``,
  ``beyond_depth``).

Whatever the engine answers, each ranking keeps the first hit of each id and is cut at the
configuration's ``depth``; what was dropped is counted on the query's line
(``search.dropped``) and in the metadata. Every hit's id passes the check ``judge score``
applies (:func:`judge.io.id_problem`) and its score must be a finite number.

Lines are appended one whole line per write as each query completes, so a kill loses no
line written (a torn last line is dropped on resume). Re-run with the same configuration
hash, a run keeps every line already written and searches only the missing queries (a line
is kept when its query has the same id and text: a changed text is searched again); a file
written with another hash is refused (a :class:`SearchError`: pick another output or remove
it). Before the rest, the first query to search is sent alone: an unreachable engine, a bad
template or a response mapping that finds nothing is a :class:`SearchError` naming the
configuration and the field, and nothing else is sent. One process writes an output at a
time: a lock file beside it (``.run.jsonl.lock``) refuses a second writer, naming the
holder (:class:`~judge.io.OutputBusy`).
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

from judge.io import lock_output
from judge.search._engines import open_engine
from judge.search._hits import Engine, Hit, finish_hits
from judge.search._queries import Query, check_queries
from judge.search._search_config import SearchConfig
from judge.search._search_errors import SearchError, SearchFailed, TransientSearchError
from judge.search._search_options import MAX_BACKOFF_S, SearchOptions

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


async def _attempt(
    engine: Engine, query: str, depth: int, options: SearchOptions, limiter: _RateLimiter
) -> list[Hit]:
    await limiter.wait()
    try:
        async with asyncio.timeout(options.timeout_s):  # no extra task per call, unlike wait_for
            return await engine.search(query, depth)
    except TimeoutError:
        raise TransientSearchError(f"no answer within {options.timeout_s:g} s") from None


async def _search_one(
    engine: Engine, query: str, depth: int, options: SearchOptions, limiter: _RateLimiter
) -> list[Hit]:
    """One query: a first attempt, then (on a transient error only) tenacity's retries with
    exponential backoff; the retry machinery is built only when a retry is needed."""
    try:
        return await _attempt(engine, query, depth, options, limiter)
    except TransientSearchError:
        if options.max_retries == 0:
            raise
    await asyncio.sleep(min(options.backoff_s, MAX_BACKOFF_S))  # the first backoff
    retrying = AsyncRetrying(  # the rest: 2x, 4x... the first backoff, capped
        stop=stop_after_attempt(options.max_retries),
        wait=wait_exponential(multiplier=2 * options.backoff_s, max=MAX_BACKOFF_S),
        retry=retry_if_exception_type(TransientSearchError),
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await _attempt(engine, query, depth, options, limiter)
    raise AssertionError("unreachable")  # pragma: no cover


async def _search_query(
    engine: Engine, query: str, config: SearchConfig, options: SearchOptions, limiter: _RateLimiter
) -> tuple[list[Hit], dict[str, int]]:
    """One query's hits, de-duplicated by id (the first kept) and cut at the configuration's
    depth whatever the engine did, with what was dropped (``duplicate_ids``,
    ``beyond_depth``: the counts that are not 0)."""
    hits = await _search_one(engine, query, config.depth, options, limiter)
    kept, duplicates, beyond = finish_hits(hits, config.depth)
    dropped = {k: v for k, v in (("duplicate_ids", duplicates), ("beyond_depth", beyond)) if v}
    return kept, dropped


def _record(
    q: Query, hits: list[Hit], config: SearchConfig, latency_ms: float, dropped: Mapping[str, int]
) -> dict[str, Any]:
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
    if dropped:
        rec["search"]["dropped"] = dict(dropped)
    return rec


def _dropped_total(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The hits every query's engine answer had beyond its depth or under a repeated id."""
    total = {"duplicate_ids": 0, "beyond_depth": 0}
    for rec in records:
        for key, value in (rec["search"].get("dropped") or {}).items():
            if key in total and isinstance(value, int):
                total[key] += value
    return total


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
    out: Path, meta_path: Path, config: SearchConfig, queries: Sequence[Query]
) -> dict[str, dict[str, Any]]:
    """The lines of an earlier run of this configuration (a torn last line is cut off) whose
    query is still in the set with the same text: a line is keyed on the query's id and
    text, so a query whose text changed is searched again (its grades are the set's now)."""
    if not out.exists():
        return {}
    by_id = {q.id: q for q in queries}
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            found = str(meta["config"]["hash"])
        except (OSError, ValueError, KeyError, TypeError):
            found = config.hash
        if found != config.hash:
            raise _refuse(out, config, found)
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
        if qid not in by_id:
            raise SearchError(
                f"query {qid!r} is not in the query set", path=str(out), line=lineno, field="id"
            )
        q = by_id[qid]
        if rec.get("query") != q.query:
            continue  # the text changed: search it again (its new line, once written, is later)
        existing[qid] = _with_qrels(rec, q.qrels)
    return existing


def _with_qrels(rec: Mapping[str, Any], qrels: dict[str, int] | None) -> dict[str, Any]:
    """A reused line with the query set's grades as they are now (the key order of
    :func:`_record` kept)."""
    out = {k: v for k, v in rec.items() if k not in ("qrels", "search")}
    if qrels is not None:
        out["qrels"] = qrels
    out["search"] = rec["search"]
    return out


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
    counts: Mapping[str, Any],
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
    """Appends one whole line per write; keeps the records by query id. The file is opened
    at the first line (an engine that fails to open leaves no empty run file)."""

    def __init__(self, out: Path, existing: Mapping[str, dict[str, Any]]) -> None:
        self.records = dict(existing)
        self.out = out
        self.fh: Any = None

    def add(self, rec: dict[str, Any]) -> None:
        if self.fh is None:
            self.fh = self.out.open("ab")
        self.fh.write(_line(rec))
        self.fh.flush()
        self.records[str(rec["id"])] = rec

    def close(self) -> None:
        if self.fh is not None:
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
) -> tuple[list[Hit], dict[str, int], float]:
    started = time.perf_counter()
    try:
        hits, dropped = await _search_query(engine, q.query, config, options, limiter)
    except TransientSearchError as exc:
        raise SearchError(
            f"the {config.engine} engine failed for the first query {q.id!r}: {exc}",
            path=None if config.path is None else str(config.path),
            field=exc.field or _where_field(config),
        ) from exc
    return hits, dropped, (time.perf_counter() - started) * 1000


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
                hits, dropped = await _search_query(engine, q.query, config, options, limiter)
            except TransientSearchError as exc:
                raise SearchFailed(f"query {q.id!r}: {exc}") from exc
            on_done(q, hits, dropped, (time.perf_counter() - started) * 1000)

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
    if out.is_dir():
        raise SearchError("is a directory: give a file such as run.jsonl", path=str(out), field="-o")
    # creates the folder; one that cannot be written is exit 2 naming -o
    lock = lock_output(out, command="judge search", field="-o")
    try:
        return await _locked_search(items, config, out, options)
    except OSError as exc:
        if exc.filename is None or Path(exc.filename).parent != out.parent:
            raise
        raise SearchError(f"cannot write: {exc.strerror}", path=str(exc.filename), field="-o") from None
    finally:
        lock.release()


async def _locked_search(
    items: Sequence[Query], config: SearchConfig, out: Path, options: SearchOptions
) -> SearchRun:
    trec_path, meta_path = side_paths(out)
    existing = _read_existing(out, meta_path, config, items)
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
    writer = _Writer(out, existing)

    def done(q: Query, hits: list[Hit], dropped: Mapping[str, int], ms: float) -> None:
        latencies[q.id] = round(ms, 3)
        if hits:
            writer.add(_record(q, hits, config, ms, dropped))
        else:
            no_hits.append(q.id)

    counts: dict[str, Any] = {
        "queries": len(items),
        "queries_searched": len(todo),
        "queries_reused": len(existing),
    }
    try:
        if todo:
            engine = open_engine(config, timeout_s=options.timeout_s)
            try:
                prepare = getattr(engine, "prepare", None)
                if prepare is not None:
                    await prepare()
                limiter = _RateLimiter(options.rate_limit)
                hits, dropped, ms = await _probe(engine, todo[0], config, options, limiter)
                engine_info = await _engine_info(engine, config, items[0])
                _write_atomic(
                    meta_path, _json(_meta(config, options, "running", engine_info, {}, [], counts))
                )
                done(todo[0], hits, dropped, ms)
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
    if not out.is_file() or out.read_bytes() != ordered:
        _write_atomic(out, ordered)
    counts = {**counts, "dropped": _dropped_total(records)}
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
