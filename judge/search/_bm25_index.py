"""The embedded engine's on-disk index: documents, their tokens, and BM25 scores per
(variant, k1, b, delta).

``build_index(DOCS.jsonl, INDEX)`` tokenises every document once (title and text) and
writes, in the folder ``INDEX``:

* ``index.json``: format, language, counts, the source file's SHA-256, tool versions;
* ``docids.json``; ``text.bin`` + ``text_offsets.npy`` (the texts, read memory-mapped);
* ``tokens.npy`` + ``token_offsets.npy`` + ``vocab.json`` (the tokenised corpus);
* ``bm25/<variant>-k1=<k1>-b=<b>-d=<delta>/``: bm25s's score matrix for the default knobs.

BM25 fixes k1, b and the variant when the score matrix is built, so a search with other
knobs builds that matrix from the stored tokens (never tokenising again), keeps it in
memory for the process, and saves it beside the others when the folder is writable; every
matrix loads memory-mapped (bm25s ``load(mmap=True)``).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from judge.io import WriterLock, id_problem, lock_output, open_binary
from judge.search._search_config import EMBEDDED_PARAMS
from judge.search._search_errors import SearchError
from judge.search._tokenize import LANGUAGES, detect_language, tokenizer

FORMAT = 1
_SAMPLE = 2000


@dataclass(frozen=True)
class IndexInfo:
    """What an index holds: its folder, language, documents, distinct tokens, tokens per
    document on average, and the SHA-256 of the file it was built from."""

    path: Path
    language: str
    documents: int
    vocabulary: int
    avg_doc_tokens: float
    source_sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "language": self.language,
            "documents": self.documents,
            "vocabulary": self.vocabulary,
            "avg_doc_tokens": self.avg_doc_tokens,
            "source_sha256": self.source_sha256,
        }


def _doc(raw: bytes, where: str, line: int) -> tuple[str, str]:
    try:
        obj: Any = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SearchError(f"invalid UTF-8 at byte {exc.start}", path=where, line=line) from None
    except (json.JSONDecodeError, RecursionError):
        raise SearchError("not valid JSON", path=where, line=line) from None
    if not isinstance(obj, dict):
        raise SearchError(f"expected a JSON object, got {type(obj).__name__}", path=where, line=line)
    did = obj.get("id")
    if isinstance(did, bool) or not isinstance(did, str | int) or not str(did).strip():
        raise SearchError("must be a non-empty string or an integer", path=where, line=line, field="id")
    problem = id_problem(str(did))
    if problem is not None:  # what judge score would refuse in a run
        raise SearchError(problem, path=where, line=line, field="id")
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        raise SearchError("must be a non-empty string", path=where, line=line, field="text")
    title = obj.get("title")
    if title is not None and not isinstance(title, str):
        raise SearchError("must be a string", path=where, line=line, field="title")
    try:
        text.encode("utf-8")
        (title or "").encode("utf-8")
    except UnicodeEncodeError:
        raise SearchError("invalid Unicode (a lone surrogate)", path=where, line=line, field="text") from None
    return str(did), (f"{title}\n{text}" if title else text)


def read_documents(path: Path) -> tuple[list[str], list[str], str]:
    """Ids, texts (title prepended) and the file's SHA-256; the first bad line raises."""
    where = str(path)
    ids: list[str] = []
    texts: list[str] = []
    seen: dict[str, int] = {}
    digest = hashlib.sha256()
    try:
        fh = open_binary(path)
    except OSError as exc:
        raise SearchError(f"cannot read: {exc.strerror}", path=where) from exc
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            digest.update(raw)
            if not raw.strip():
                continue
            did, text = _doc(raw.rstrip(b"\r\n"), where, lineno)
            if did in seen:
                raise SearchError(
                    f"duplicate id {did!r} (first on line {seen[did]})", path=where, line=lineno, field="id"
                )
            seen[did] = lineno
            ids.append(did)
            texts.append(text)
    if not ids:
        raise SearchError("no documents", path=where)
    return ids, texts, digest.hexdigest()


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for name in ("bm25s", "jieba", "PyStemmer"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "unknown"
    return out


def build_index(docs: str | Path, out: str | Path, *, language: str = "auto") -> IndexInfo:
    """Build the embedded engine's index of ``docs`` (JSONL ``{"id", "text"}``, optional
    ``title``; gzip ok) in the folder ``out`` (replaced when it exists, only once the new
    index is complete). ``language``: ``auto``, ``zh`` or ``en``."""
    if language not in LANGUAGES:
        raise SearchError(f"must be one of {', '.join(LANGUAGES)}, got {language!r}", field="language")
    docs, out = Path(docs), Path(out)
    if out.exists() and not (out / "index.json").is_file():
        raise _not_an_index(out)
    ids, texts, sha = read_documents(docs)
    bound = detect_language(texts[:_SAMPLE]) if language == "auto" else language
    tokenize = tokenizer(bound)
    vocab: dict[str, int] = {}
    flat: list[int] = []
    offsets = [0]
    for text in texts:
        for token in tokenize(text):
            flat.append(vocab.setdefault(token, len(vocab)))
        offsets.append(len(flat))
    lock = lock_index(out)  # creates the parent folder; one that cannot be written: exit 2 naming -o
    try:
        return _write_index(out, docs, ids, texts, sha, bound, vocab, flat, offsets)
    finally:
        lock.release()


def lock_index(out: Path) -> WriterLock:
    """One build of an index folder at a time, BM25 and dense alike: the lock beside the
    folder it resolves to, held for the build; another build of it, under this name or
    another (a symlink), is refused naming its holder (exit 2 naming ``-o``)."""
    return lock_output(out, command="judge index build", field="-o")


def _write_index(
    out: Path,
    docs: Path,
    ids: list[str],
    texts: list[str],
    sha: str,
    bound: str,
    vocab: dict[str, int],
    flat: list[int],
    offsets: list[int],
) -> IndexInfo:
    """The index's files written into a temporary folder beside ``out``, then swapped in."""
    if out.exists() and not (out / "index.json").is_file():  # again, under the lock
        raise _not_an_index(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temp_dir(out)
    except OSError as exc:
        raise SearchError(f"cannot write here: {exc.strerror}", path=str(out), field="-o") from None
    try:
        encoded = [t.encode("utf-8") for t in texts]
        text_offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=text_offsets[1:])
        (tmp / "text.bin").write_bytes(b"".join(encoded))
        np.save(tmp / "text_offsets.npy", text_offsets)
        np.save(tmp / "tokens.npy", np.asarray(flat, dtype=np.int32))
        np.save(tmp / "token_offsets.npy", np.asarray(offsets, dtype=np.int64))
        (tmp / "docids.json").write_text(json.dumps(ids, ensure_ascii=False), encoding="utf-8")
        (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        info = IndexInfo(out, bound, len(ids), len(vocab), round(len(flat) / len(ids), 3), sha)
        meta = {"format": FORMAT, **info.as_dict(), "source": docs.name, "tools": _versions()}
        meta.pop("path")
        (tmp / "index.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
        index = BM25Index(tmp)
        index.scorer(
            str(EMBEDDED_PARAMS["method"]),
            float(EMBEDDED_PARAMS["k1"]),
            float(EMBEDDED_PARAMS["b"]),
            float(EMBEDDED_PARAMS["delta"]),
        )
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def _replace_dir(new: Path, out: Path) -> None:
    if out.exists():
        if not (out / "index.json").is_file():
            raise _not_an_index(out)
        old = out.with_name(f".{out.name}.tmp-{os.getpid()}-old")
        out.rename(old)
        new.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        new.rename(out)


OLD_TEMP_AGE_S = 24 * 3600.0
"""How long a temporary folder of an older judge (its name carries no pid) must have been
left untouched before a build removes it."""

_MKDTEMP_SUFFIX = re.compile(r"[a-z0-9_]{8}")  # tempfile.mkdtemp's random part


def _temp_dir(target: Path) -> Path:
    """A new temporary folder beside ``target`` (``.NAME.tmp-PID-XXXX``), after removing
    what killed builds left there (:func:`_sweep`)."""
    _sweep(target.parent, target.name)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))


def _sweep(folder: Path, name: str) -> None:
    """Remove the temporary folders of builds of ``name`` in ``folder`` that no process is
    writing: ``.NAME.tmp-PID-*`` (this judge's) and ``.NAME.old-PID`` (an older judge's
    swap) whose process no longer runs; and ``.NAME.XXXXXXXX``, an older judge's
    ``mkdtemp`` folder whose name carries no pid, when it is a real folder with mkdtemp's
    mode 0700 and nothing in it changed for :data:`OLD_TEMP_AGE_S` (no judge names a folder
    so any more, and a running build of that judge wrote into its folder far more often)."""
    prefix = f".{name}."
    for stale in folder.glob(f"{glob.escape(prefix)}*"):
        rest = stale.name[len(prefix) :]
        if rest.startswith(("tmp-", "old-")):
            pid = rest[4:].partition("-")[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)
        elif _MKDTEMP_SUFFIX.fullmatch(rest) and _abandoned(stale):
            shutil.rmtree(stale, ignore_errors=True)


def _abandoned(path: Path) -> bool:
    """``path`` is a real folder of mode 0700 (as mkdtemp makes it) in which nothing was
    written for :data:`OLD_TEMP_AGE_S`."""
    try:
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o700:
            return False
        newest = st.st_mtime
        for root, dirs, files in os.walk(path):
            for entry in (*dirs, *files):
                newest = max(newest, os.lstat(os.path.join(root, entry)).st_mtime)
    except OSError:
        return False
    return time.time() - newest > OLD_TEMP_AGE_S


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _not_an_index(out: Path) -> SearchError:
    return SearchError("exists and is not an index: refusing to replace it", path=str(out), field="-o")


def _broken(path: Path, exc: Exception) -> SearchError:
    return SearchError(
        f"a broken index ({type(exc).__name__}: {exc}): build it again with 'judge index build'",
        path=str(path),
        field="index",
    )


def _key(method: str, k1: float, b: float, delta: float) -> str:
    d = f"-d={delta:g}" if method in ("bm25l", "bm25+") else ""
    return f"{method}-k1={k1:g}-b={b:g}{d}".replace("+", "plus")


class BM25Index:
    """An index folder opened for search: texts and tokens memory-mapped, one bm25s score
    matrix per knob setting, built on first use from the stored tokens."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        meta_path = self.path / "index.json"
        try:
            self.meta: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SearchError(
                f"not an index built by 'judge index build' ({exc})", path=str(self.path), field="index"
            ) from None
        if self.meta.get("format") != FORMAT:
            raise SearchError(
                f"index format {self.meta.get('format')!r}; this judge reads {FORMAT}",
                path=str(self.path),
                field="index",
            )
        try:
            self.language = str(self.meta["language"])
            self.tokenize = tokenizer(self.language)
            self.ids: list[str] = json.loads((self.path / "docids.json").read_text(encoding="utf-8"))
            self.vocab: dict[str, int] = json.loads((self.path / "vocab.json").read_text(encoding="utf-8"))
            self._text = (
                np.memmap(self.path / "text.bin", dtype=np.uint8, mode="r")
                if (self.path / "text.bin").stat().st_size
                else np.zeros(0, np.uint8)
            )
            self._text_offsets: npt.NDArray[np.int64] = np.load(self.path / "text_offsets.npy", mmap_mode="r")
        except (OSError, ValueError, KeyError) as exc:
            raise _broken(self.path, exc) from None
        self._scorers: dict[str, Any] = {}
        self._lock = threading.Lock()

    def text(self, i: int) -> str:
        start, end = int(self._text_offsets[i]), int(self._text_offsets[i + 1])
        return bytes(self._text[start:end]).decode("utf-8")

    def _corpus_ids(self) -> list[list[int]]:
        try:
            tokens: npt.NDArray[np.int32] = np.load(self.path / "tokens.npy", mmap_mode="r")
            offsets: npt.NDArray[np.int64] = np.load(self.path / "token_offsets.npy", mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise _broken(self.path, exc) from None
        flat = np.asarray(tokens).tolist()
        bounds = np.asarray(offsets).tolist()
        return [flat[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]

    def scorer(self, method: str, k1: float, b: float, delta: float) -> Any:
        """bm25s's model for these knobs: from memory, else from disk (memory-mapped), else
        built from the stored tokens (and saved when the folder is writable)."""
        import bm25s

        key = _key(method, k1, b, delta)
        with self._lock:
            model = self._scorers.get(key)
            if model is not None:
                return model
            folder = self.path / "bm25" / key
            if (folder / "params.index.json").is_file():
                model = bm25s.BM25.load(str(folder), mmap=True, show_progress=False, verbosity=0)
            else:
                model = bm25s.BM25(k1=k1, b=b, delta=delta, method=method)
                model.index(
                    (self._corpus_ids(), dict(self.vocab)), create_empty_token=False, show_progress=False
                )
                try:
                    folder.parent.mkdir(exist_ok=True)
                    _sweep(self.path, key)  # an older judge built the matrix beside bm25/
                    tmp = _temp_dir(folder)
                    model.save(str(tmp), show_progress=False)
                    tmp.rename(folder)
                    model = bm25s.BM25.load(str(folder), mmap=True, show_progress=False, verbosity=0)
                except OSError:
                    pass
            self._scorers[key] = model
            return model

    def search(
        self, query: str, depth: int, method: str, k1: float, b: float, delta: float
    ) -> list[tuple[int, float]]:
        """The ``depth`` best documents for ``query`` as (document number, score): documents
        holding at least one query token, by score descending, then document order."""
        token_ids = sorted({self.vocab[t] for t in self.tokenize(query) if t in self.vocab})
        if not token_ids:
            return []
        model = self.scorer(method, k1, b, delta)
        scores = model.get_scores_from_ids(token_ids)
        indptr = model.scores["indptr"]
        indices = model.scores["indices"]
        parts = [np.asarray(indices[int(indptr[t]) : int(indptr[t + 1])]) for t in token_ids]
        candidates = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        if candidates.size == 0:
            return []
        cand_scores = np.asarray(scores)[candidates]
        order = np.lexsort((candidates, -cand_scores))[:depth]
        return [(int(candidates[i]), float(cand_scores[i])) for i in order]

    def stats(self) -> dict[str, Any]:
        keys = ("language", "documents", "vocabulary", "avg_doc_tokens", "source", "source_sha256", "tools")
        return {k: self.meta[k] for k in keys if k in self.meta}
