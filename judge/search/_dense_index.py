"""Dense vectors beside an embedded index's BM25 data, and exact or approximate search.

``build_dense(INDEX)`` encodes every document of an index built by ``judge index build``
(its stored text: the title and the text) with an encoder (:mod:`judge.search._encoder`)
and writes, in ``INDEX``:

* ``dense/vectors.npy``: one row per document, float16 (or float32; or int8 with
  ``dense/scales.npy``, one float32 scale per row), read memory-mapped;
* ``dense/encoder.json``: the encoder's identity with its probe embedding;
* ``dense/faiss.index``: an HNSW graph (faiss-cpu) when asked for, for corpora too large for
  an exact scan;
* ``index.json``'s ``dense`` entry: the encoder's name, version, dimension, the SHA-256 of its
  probe embedding, the dtype and the number of documents.

Encoding is by chunks of ``chunk`` documents, each committed to ``dense.partial/`` as it
finishes (written to a temporary name, then renamed), so a killed build loses at most the
chunk in progress: run it again and it encodes only the chunks missing. A build resumes only
what it can prove: ``dense.partial/partial.json`` (the plan: encoder identity, documents,
chunk size, corpus SHA-256) that is missing, unreadable or another plan discards every chunk;
each chunk file (``NNNNNN.npz``) carries the identity of the encoder that made it and its
rows, and is re-encoded when that identity differs from the plan's, its shape is not the
chunk's, or a value in it is not finite. What a killed build left (temporary files of a
process no longer running, a half-written ``dense/`` swap) is removed by the next build. The
finished vectors replace ``dense/`` whole.

Exact search scores every row by a matrix product: over the whole matrix converted to float32
once and kept in memory when that takes at most 256 MiB (about 170,000 passages of 384
dimensions), else a block of rows at a time from the memory-mapped file (memory stays bounded
whatever the corpus' size); ties are broken by document order.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from judge.search._bm25_index import BM25Index, _alive, lock_index, read_documents
from judge.search._encoder import DEFAULT_ENCODER, Encoder, as_matrix, check_identity, get_encoder, identity
from judge.search._search_errors import SearchError

DTYPES = ("float16", "float32", "int8")
DEFAULT_CHUNK = 64
BLOCK_ROWS = 16384
IN_MEMORY_BYTES = 256 * 2**20  # vectors up to this size as float32 are kept in memory
HNSW_M = 32
PARTIAL = "dense.partial"
DENSE = "dense"
#: The layout of ``dense.partial/`` (a plan of another layout is discarded whole).
PARTIAL_FORMAT = 2

Progress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class DenseInfo:
    """A finished build: documents, dimension, dtype, the encoder's name and version,
    documents encoded now (the rest came from committed chunks), seconds spent encoding
    them, and the vectors' bytes on disk (with the faiss graph when built)."""

    documents: int
    dim: int
    dtype: str
    encoder: str
    version: str
    encoded: int
    seconds: float
    bytes_on_disk: int
    faiss: bool


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise SearchError(
            "the approximate index needs faiss-cpu: pip install 'judge[dense]'", field="faiss"
        ) from None
    return faiss


def _chunks(path: Path, plan: dict[str, Any], progress_note: Callable[[str], None]) -> Path:
    """The partial folder for ``plan``: kept when its plan is readable and the same, else
    emptied whole (a missing or unreadable plan proves nothing about the chunks beside it)."""
    partial = path / PARTIAL
    if partial.exists():
        recorded = _read_json(partial / "partial.json")
        if recorded != plan:
            why = "another plan or encoder" if isinstance(recorded, dict) else "no readable plan"
            progress_note(f"discarding {PARTIAL}/: its chunks were encoded for {why}")
            shutil.rmtree(partial, ignore_errors=True)
    if not (partial / "partial.json").is_file():
        partial.mkdir(exist_ok=True)
        _write_json(partial / "partial.json", plan)
    return partial


def _chunk_stamp(plan: dict[str, Any], c: int, rows: int) -> npt.NDArray[np.uint8]:
    """What a chunk carries: the encoder identity of the plan, its number and its rows."""
    text = json.dumps({"encoder": plan["encoder"], "chunk": c, "rows": rows}, sort_keys=True)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def _chunk_file(partial: Path, c: int) -> Path:
    return partial / f"{c:06d}.npz"


def _save_chunk(path: Path, vectors: npt.NDArray[np.float32], stamp: npt.NDArray[np.uint8]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as fh:
        np.savez(fh, vectors=vectors, encoder=stamp)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _load_chunk(
    file: Path, stamp: npt.NDArray[np.uint8], rows: int, dim: int
) -> npt.NDArray[np.float32] | None:
    """The chunk's vectors when it proves itself: made by the plan's encoder (its stamp),
    ``rows`` x ``dim`` float32, every value finite; else None (it is encoded again)."""
    try:
        with np.load(file, allow_pickle=False) as held:
            made_by = held["encoder"]
            chunk = held["vectors"]
    except (OSError, ValueError, KeyError, EOFError):
        return None
    if not np.array_equal(made_by, stamp) or chunk.shape != (rows, dim) or chunk.dtype != np.float32:
        return None
    return chunk if np.isfinite(chunk).all() else None


def _sweep_leftovers(path: Path) -> None:
    """Remove what a killed build of vectors left in the index ``path``: the temporary files
    (``.NAME.PID.tmp``) and the ``dense/`` being built or swapped (``.dense.PID.tmp``,
    ``.dense.PID.old``) of a process that no longer runs."""
    for folder in (path, path / PARTIAL):
        if not folder.is_dir():
            continue
        for stale in folder.iterdir():
            parts = stale.name.split(".")
            if len(parts) < 4 or parts[0] != "" or parts[-1] not in ("tmp", "old"):
                continue
            pid = parts[-2]
            if pid.isdigit() and not _alive(int(pid)):
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale, ignore_errors=True)
                else:
                    stale.unlink(missing_ok=True)


def build_dense(
    index_path: str | Path,
    *,
    encoder: str = DEFAULT_ENCODER,
    dtype: str = "float16",
    chunk: int = DEFAULT_CHUNK,
    faiss: bool = False,
    progress: Progress | None = None,
    note: Callable[[str], None] | None = None,
) -> DenseInfo:
    """Add dense vectors to the index at ``index_path`` (see the module docstring).
    ``progress(done, total, passages_per_s)`` is called after each chunk."""
    if dtype not in DTYPES:
        raise SearchError(f"must be one of {', '.join(DTYPES)}, got {dtype!r}", field="--dense-dtype")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk <= 100_000:
        raise SearchError(f"must be an integer from 1 to 100000, got {chunk!r}", field="chunk")
    path = Path(index_path)
    BM25Index(path)  # an index, checked before its lock is taken beside it
    lock = lock_index(path)  # one build of this index at a time, BM25 or dense
    try:
        return _build_dense(path, encoder, dtype, chunk, faiss, progress, note)
    finally:
        lock.release()


def _build_dense(
    path: Path,
    encoder: str,
    dtype: str,
    chunk: int,
    faiss: bool,
    progress: Progress | None,
    note: Callable[[str], None] | None,
) -> DenseInfo:
    """:func:`build_dense` under the index's lock (the index read again: a build that held
    the lock before may have replaced it)."""
    index = BM25Index(path)
    say = note or (lambda text: print(f"judge index build: {text}", file=sys.stderr))
    _sweep_leftovers(path)
    model = get_encoder(encoder, user_named=True)
    ident = identity(model, encoder)
    n = len(index.ids)
    existing = index.meta.get(DENSE)
    if (
        isinstance(existing, dict)
        and existing.get("probe_sha256") == ident["probe_sha256"]
        and existing.get("name") == ident["name"]
        and existing.get("dtype") == dtype
        and existing.get("documents") == n
        and (path / DENSE / "vectors.npy").is_file()
    ):
        if faiss and not (path / DENSE / "faiss.index").is_file():
            _build_faiss(path / DENSE, int(existing["dim"]))
            existing = {**existing, "faiss": True}
            _write_json(path / "index.json", {**index.meta, DENSE: existing})
        return _info(path, existing, 0, 0.0)
    plan = {
        "format": PARTIAL_FORMAT,
        "encoder": {k: v for k, v in ident.items() if k != "probe"},
        "documents": n,
        "chunk": chunk,
        "source_sha256": index.meta.get("source_sha256"),
    }
    partial = _chunks(path, plan, say)
    encoded, seconds = _encode_missing(index, model, partial, plan, progress)
    dense_meta = {k: v for k, v in ident.items() if k != "probe"}
    dense_meta.update(dtype=dtype, documents=n, faiss=faiss)
    _assemble(path, partial, plan, model.dim, dtype, faiss, ident)
    meta = dict(index.meta)
    meta[DENSE] = dense_meta
    _write_json(path / "index.json", meta)
    shutil.rmtree(partial, ignore_errors=True)
    return _info(path, dense_meta, encoded, seconds)


def _encode_missing(
    index: BM25Index, model: Encoder, partial: Path, plan: dict[str, Any], progress: Progress | None
) -> tuple[int, float]:
    n, chunk = len(index.ids), int(plan["chunk"])
    total_chunks = math.ceil(n / chunk)

    def rows(c: int) -> int:
        return min(chunk, n - c * chunk)

    todo = [
        c
        for c in range(total_chunks)
        if _load_chunk(_chunk_file(partial, c), _chunk_stamp(plan, c, rows(c)), rows(c), model.dim) is None
    ]
    done = n - sum(rows(c) for c in todo)
    encoded = 0
    started = time.perf_counter()
    for c in todo:
        lo, hi = c * chunk, c * chunk + rows(c)
        texts = [index.text(i) for i in range(lo, hi)]
        vectors = as_matrix(model.passages(texts), hi - lo, model.dim, "passages")
        _save_chunk(_chunk_file(partial, c), vectors, _chunk_stamp(plan, c, hi - lo))
        encoded += hi - lo
        done += hi - lo
        if progress is not None:
            progress(done, n, encoded / max(time.perf_counter() - started, 1e-9))
    return encoded, time.perf_counter() - started


def _assemble(
    path: Path, partial: Path, plan: dict[str, Any], dim: int, dtype: str, faiss: bool, ident: dict[str, Any]
) -> None:
    """The committed chunks as ``dense/`` (built aside, then swapped in whole); every chunk
    is checked again as it is read (its encoder, shape and finite values)."""
    n, chunk = int(plan["documents"]), int(plan["chunk"])
    tmp = path / f".{DENSE}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        store = {"float16": np.float16, "float32": np.float32, "int8": np.int8}[dtype]
        vectors = np.lib.format.open_memmap(tmp / "vectors.npy", mode="w+", dtype=store, shape=(n, dim))
        scales = np.ones(n, dtype=np.float32)
        for c in range(math.ceil(n / chunk)):
            lo, hi = c * chunk, min(n, (c + 1) * chunk)
            block = _load_chunk(_chunk_file(partial, c), _chunk_stamp(plan, c, hi - lo), hi - lo, dim)
            if block is None:
                raise SearchError(
                    f"{PARTIAL}/{c:06d}.npz changed while the vectors were assembled: run the build again",
                    path=str(path),
                    field="index",
                )
            if dtype != "int8":
                vectors[lo:hi] = block.astype(store)
            else:
                peak = np.abs(block).max(axis=1)
                scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
                vectors[lo:hi] = np.clip(np.rint(block / scale[:, None]), -127, 127).astype(np.int8)
                scales[lo:hi] = scale
        vectors.flush()
        del vectors
        if dtype == "int8":
            np.save(tmp / "scales.npy", scales)
        (tmp / "encoder.json").write_text(json.dumps(ident, indent=2, ensure_ascii=False), encoding="utf-8")
        if faiss:
            _build_faiss(tmp, dim)
        old = path / f".{DENSE}.{os.getpid()}.old"
        if (path / DENSE).exists():
            (path / DENSE).rename(old)
        tmp.rename(path / DENSE)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _build_faiss(folder: Path, dim: int) -> None:
    faiss = _faiss()
    vectors = DenseVectors(folder, dim)
    graph = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
    for lo in range(0, vectors.rows, BLOCK_ROWS):
        graph.add(vectors.block(lo, min(vectors.rows, lo + BLOCK_ROWS)))
    faiss.write_index(graph, str(folder / "faiss.index"))


def _info(path: Path, meta: dict[str, Any], encoded: int, seconds: float) -> DenseInfo:
    folder = path / DENSE
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) if folder.is_dir() else 0
    return DenseInfo(
        documents=int(meta["documents"]),
        dim=int(meta["dim"]),
        dtype=str(meta["dtype"]),
        encoder=str(meta["name"]),
        version=str(meta["version"]),
        encoded=encoded,
        seconds=round(seconds, 3),
        bytes_on_disk=size,
        faiss=bool(meta.get("faiss", False)),
    )


class DenseVectors:
    """An index's vectors, memory-mapped: exact top-k by a blockwise matrix product, or
    faiss's HNSW graph when built."""

    def __init__(self, folder: Path, dim: int) -> None:
        self.folder = folder
        self.vectors: npt.NDArray[Any] = np.load(folder / "vectors.npy", mmap_mode="r")
        self.scales: npt.NDArray[np.float32] | None = (
            np.load(folder / "scales.npy") if (folder / "scales.npy").is_file() else None
        )
        self.rows = int(self.vectors.shape[0])
        self.dim = dim
        self._graph: Any = None
        self._whole: npt.NDArray[np.float32] | None = None

    def block(self, lo: int, hi: int) -> npt.NDArray[np.float32]:
        rows = np.asarray(self.vectors[lo:hi], dtype=np.float32)
        if self.scales is not None:
            rows *= self.scales[lo:hi, None]
        return rows

    def search(self, query: npt.NDArray[np.float32], depth: int) -> list[tuple[int, float]]:
        """The ``depth`` rows of highest inner product with ``query``: (row, score), by score
        descending, then row order."""
        if self.rows == 0 or depth < 1:
            return []
        if self.rows * self.dim * 4 <= IN_MEMORY_BYTES:  # small: float32 once, one product
            if self._whole is None:
                self._whole = self.block(0, self.rows)
            scores = self._whole @ query
            keep = _top_candidates(scores, depth)
            order = np.lexsort((keep, -scores[keep]))[:depth]
            return [(int(keep[i]), float(scores[keep[i]])) for i in order]
        idx_parts: list[npt.NDArray[np.int64]] = []
        score_parts: list[npt.NDArray[np.float32]] = []
        for lo in range(0, self.rows, BLOCK_ROWS):
            hi = min(self.rows, lo + BLOCK_ROWS)
            scores = self.block(lo, hi) @ query
            keep = _top_candidates(scores, depth)
            idx_parts.append(keep + lo)
            score_parts.append(scores[keep])
            if sum(len(p) for p in idx_parts) > 4 * depth + BLOCK_ROWS:
                idx_parts, score_parts = _merge(idx_parts, score_parts, depth)
        idx = np.concatenate(idx_parts)
        found = np.concatenate(score_parts)
        order = np.lexsort((idx, -found))[:depth]
        return [(int(idx[i]), float(found[i])) for i in order]

    def search_ann(self, query: npt.NDArray[np.float32], depth: int) -> list[tuple[int, float]]:
        """faiss's HNSW search (approximate): (row, score) by score, then row order."""
        if self._graph is None:
            file = self.folder / "faiss.index"
            if not file.is_file():
                raise SearchError(
                    "the index has no faiss graph: build it with 'judge index build --dense --faiss'",
                    path=str(self.folder.parent),
                    field="params.ann",
                )
            self._graph = _faiss().read_index(str(file))
        self._graph.hnsw.efSearch = max(64, 2 * depth)
        scores, rows = self._graph.search(query.reshape(1, -1).astype(np.float32), depth)
        pairs = [(int(r), float(s)) for r, s in zip(rows[0], scores[0], strict=True) if r >= 0]
        return sorted(pairs, key=lambda p: (-p[1], p[0]))


def _top_candidates(scores: npt.NDArray[np.float32], depth: int) -> npt.NDArray[np.int64]:
    """Indices of every score at least the ``depth``-th largest (ties at the edge kept)."""
    if scores.size <= depth:
        return np.arange(scores.size, dtype=np.int64)
    kth = np.partition(scores, scores.size - depth)[scores.size - depth]
    return np.nonzero(scores >= kth)[0].astype(np.int64)


def _merge(
    idx_parts: list[npt.NDArray[np.int64]], score_parts: list[npt.NDArray[np.float32]], depth: int
) -> tuple[list[npt.NDArray[np.int64]], list[npt.NDArray[np.float32]]]:
    idx = np.concatenate(idx_parts)
    scores = np.concatenate(score_parts)
    keep = _top_candidates(scores, depth)
    return [idx[keep]], [scores[keep]]


_QUERY_CACHE: dict[tuple[int, str], tuple[Encoder, npt.NDArray[np.float32]]] = {}
QUERY_CACHE_SIZE = 4096


def query_vector(encoder: Encoder, text: str) -> npt.NDArray[np.float32]:
    """``text`` encoded as a query, remembered for the process (the configurations of a grid
    share a query set: each query is encoded once; the oldest entries go past 4,096)."""
    key = (id(encoder), text)
    held = _QUERY_CACHE.get(key)
    if held is not None and held[0] is encoder:  # the encoder is held: its id is not reused
        return held[1]
    vector: npt.NDArray[np.float32] = as_matrix(encoder.queries([text]), 1, encoder.dim, "the query")[0]
    if len(_QUERY_CACHE) >= QUERY_CACHE_SIZE:
        del _QUERY_CACHE[next(iter(_QUERY_CACHE))]
    _QUERY_CACHE[key] = (encoder, vector)
    return vector


def clear_query_cache() -> None:
    _QUERY_CACHE.clear()


def open_dense(
    index: BM25Index, *, field: str = "params.retriever", encoder: str | None = None
) -> tuple[DenseVectors, Encoder]:
    """The vectors of an opened index and the encoder that built them (checked: another
    encoder is refused). ``encoder`` is the spec the user named (``--encoder`` or the
    configuration's ``encoder``), which may be ``module:attribute``; without it the index's
    recorded spec is used only when it is a registered name: a spec read from the index
    imports nothing. An index without vectors is a :class:`SearchError` naming ``field``."""
    where = str(index.path)
    meta = index.meta.get(DENSE)
    if not isinstance(meta, dict) or not (index.path / DENSE / "vectors.npy").is_file():
        raise SearchError(
            "the index has no dense vectors: build them with 'judge index build DOCS -o INDEX --dense'",
            path=where,
            field=field,
        )
    recorded = _read_json(index.path / DENSE / "encoder.json")
    if not isinstance(recorded, dict) or any(
        recorded.get(key) != meta.get(key) for key in ("spec", "name", "dim", "probe_sha256")
    ):
        raise SearchError(
            f"index.json and {DENSE}/encoder.json do not record the same encoder: rebuild with --dense",
            path=where,
            field="index",
        )
    if encoder is not None:
        model = get_encoder(encoder, field="encoder", user_named=True)
    else:
        spec = meta.get("spec", DEFAULT_ENCODER)
        if not isinstance(spec, str):
            raise SearchError(
                f"the recorded encoder spec is not a string: {spec!r}", path=where, field="index"
            )
        try:
            model = get_encoder(spec, field="index")
        except SearchError as exc:
            raise SearchError(exc.message, path=where, field="index") from None
    check_identity(recorded, model, where=where, field="index")
    vectors = DenseVectors(index.path / DENSE, int(meta["dim"]))
    if vectors.rows != len(index.ids):
        raise SearchError(
            f"{vectors.rows} vectors for {len(index.ids)} documents: rebuild with --dense",
            path=where,
            field="index",
        )
    return vectors, model


def current_index(docs: str | Path, out: str | Path, language: str) -> bool:
    """Whether ``out`` is already an index of ``docs`` (the same file's SHA-256, the same
    language unless ``auto``): then ``--dense`` adds vectors to it without tokenising again."""
    meta = _read_json(Path(out) / "index.json")
    if not isinstance(meta, dict):
        return False
    _, _, sha = read_documents(Path(docs))
    return meta.get("source_sha256") == sha and language in ("auto", meta.get("language"))
