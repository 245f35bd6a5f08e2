"""Resume state, derived from the output file itself (no separate state file).

Why no state file: a batch run already has two durable records, each written before the
work it records is forgotten: the verdict cache (one committed row per judged passage) and
the output JSONL (one fsynced line per completed query). A third file would be one more
thing that a ``kill -9`` can leave disagreeing with the other two. So:

* a query is *done* iff its line is complete in the output file;
* a passage is *judged* iff its verdict is in the cache;
* on start, :func:`recover_output` drops a torn last line (a write interrupted by the
  kill), and the runner skips the ids already in the file; the queries that were in flight
  are judged again, but every passage verdict they had received comes from the cache.

:class:`OutputWriter` appends one line per query with ``flush`` + ``fsync``;
:func:`atomic_write_lines` rewrites a file (temp file + ``os.replace``) for
``--retry-unjudged``.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from judge.io import InputError


def _dumps(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def iter_output(path: str | Path, *, repair: bool = True) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream the records of an earlier (possibly killed) run as ``(line, record)``.

    A last line without its newline or that does not parse is a torn write: it is skipped
    and, with ``repair``, the file is truncated to just before it once the stream is read
    to the end. A bad line *before* the last one is not something this program writes, so
    it is an :class:`InputError` (raised when the stream reaches the next line; the file
    is left untouched). A missing file yields nothing.
    """
    p = Path(path)
    if not p.exists():
        return
    good_end = 0
    size = 0
    bad: InputError | None = None
    with open(p, "rb") as fh:
        for lineno, chunk in enumerate(fh, 1):
            if bad is not None:
                raise bad
            size += len(chunk)
            parsed: Any = None
            ok = chunk.endswith(b"\n")
            if ok and chunk.strip():
                try:
                    parsed = json.loads(chunk.decode("utf-8"))
                    ok = isinstance(parsed, dict)
                except (UnicodeDecodeError, json.JSONDecodeError):
                    ok = False
            if not ok:
                bad = InputError(
                    "not a record written by 'judge score' (refusing to resume into it)",
                    path=str(p),
                    line=lineno,
                )
                continue
            good_end = size
            if parsed is not None:
                yield lineno, parsed
    if repair and good_end < size:
        with open(p, "r+b") as fh:
            fh.truncate(good_end)
            fh.flush()
            os.fsync(fh.fileno())


def recover_output(path: str | Path) -> list[dict[str, Any]]:
    """Read the records of an earlier (possibly killed) run and repair the file's tail
    (see :func:`iter_output`). Returns the complete records, in file order; ``[]`` if the
    file does not exist."""
    return [record for _, record in iter_output(path)]


@dataclass
class OutputScan:
    """What an output file holds, read in one streaming pass: ids, modes, records."""

    ids: set[str] = field(default_factory=set)
    modes: set[str] = field(default_factory=set)
    records: int = 0


def scan_output(path: str | Path) -> OutputScan:
    """Ids and modes of an output file's records, its torn tail repaired (bounded memory)."""
    scan = OutputScan()
    for _, record in iter_output(path):
        scan.records += 1
        scan.ids.add(str(record.get("id")))
        scan.modes.add(str(record.get("mode")))
    return scan


class OutputWriter:
    """Append-only JSONL writer: every line is flushed and fsynced before ``write`` returns.

    ``awrite`` does the same on the writer's own thread (one thread: lines keep their
    order), so an fsync never stalls the event loop. A line handed to ``awrite`` is
    written even if the awaiting task is cancelled (a sibling query failing with a
    permanent error, Ctrl-C): the query's verdicts are already paid for, and ``close``
    waits for every submitted line.
    """

    def __init__(self, path: str | Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._fsync = fsync
        self._executor: ThreadPoolExecutor | None = None

    async def awrite(self, record: Mapping[str, Any]) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge-output")
        job = self._executor.submit(self.write, record)
        # shield: cancelling the caller must not cancel a line that is queued but not yet
        # started; close() (executor shutdown, wait=True) lets it finish.
        await asyncio.shield(asyncio.wrap_future(job))

    def write(self, record: Mapping[str, Any]) -> None:
        self._fh.write(_dumps(record) + "\n")
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _atomic_replace(path: str | Path, write: Callable[[IO[Any]], object], *, binary: bool = False) -> None:
    """Replace ``path`` with what ``write`` writes: a temp file beside it (UTF-8 text, or
    bytes when ``binary``), fsync, ``os.replace``; the temp file is removed on any failure."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_lines(path: str | Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Replace ``path`` with ``records`` as JSONL: write a temp file beside it, fsync, rename."""

    def write(fh: IO[str]) -> None:
        for rec in records:
            fh.write(_dumps(rec) + "\n")

    _atomic_replace(path, write)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temp file + ``os.replace``)."""
    _atomic_replace(path, lambda fh: fh.write(text))


def atomic_write_bytes(path: str | Path, payload: bytes) -> None:
    """Replace ``path`` with ``payload`` (temp file beside it + ``os.replace``)."""
    _atomic_replace(path, lambda fh: fh.write(payload), binary=True)
