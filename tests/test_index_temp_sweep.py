"""Temporary folders that builds of an older judge left beside an index (``.NAME.XXXXXXXX``
from ``mkdtemp``, no pid in the name; ``.NAME.old-PID`` from its swap) are removed by the
next build when nothing writes them, and only then."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from judge.search import BM25Index, build_index

OLD_TEMP_AGE_S = 24 * 3600  # the stated age (judge.search._bm25_index.OLD_TEMP_AGE_S)


def _docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "d1", "text": "pale gums in dogs"}\n{"id": "d2", "text": "green tea"}\n')
    return docs


def _age(path: Path, seconds: float) -> None:
    """Every mtime under ``path`` (and its own) set ``seconds`` into the past."""
    when = time.time() - seconds
    for root, dirs, files in os.walk(path):
        for entry in (*dirs, *files):
            os.utime(os.path.join(root, entry), (when, when))
    os.utime(path, (when, when))


def _old_build_folder(parent: Path, name: str) -> Path:
    """What an older judge's build killed part way left: its mkdtemp folder, some files."""
    folder = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=parent))
    (folder / "vocab.json").write_text("{}", encoding="utf-8")
    (folder / "text.bin").write_bytes(b"pale gums")
    return folder


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    return proc.pid


def test_old_temp_folders_untouched_for_a_day_are_removed(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    abandoned = _old_build_folder(tmp_path, "idx")
    _age(abandoned, OLD_TEMP_AGE_S + 60)
    recent = _old_build_folder(tmp_path, "idx")  # maybe a build of the older judge still running
    _age(recent, OLD_TEMP_AGE_S - 600)
    touched = _old_build_folder(tmp_path, "idx")  # an old folder with one file written just now
    _age(touched, OLD_TEMP_AGE_S + 60)
    (touched / "tokens.npy").write_bytes(b"new")
    own = tmp_path / ".idx.settings"  # not made by mkdtemp (mode 0755): never ours to remove
    own.mkdir(mode=0o755)
    os.chmod(own, 0o755)
    _age(own, OLD_TEMP_AGE_S * 10)
    other = _old_build_folder(tmp_path, "idx2")  # another index's: left to that index's builds
    _age(other, OLD_TEMP_AGE_S + 60)
    swapped = tmp_path / f".idx.old-{_dead_pid()}"  # an older judge's swap, its process gone
    swapped.mkdir()
    (swapped / "index.json").write_text("{}", encoding="utf-8")
    live_swap = tmp_path / f".idx.old-{os.getpid()}"  # this process: alive, kept
    live_swap.mkdir()

    info = build_index(docs, tmp_path / "idx", language="en")

    assert info.documents == 2
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".idx"))
    # and the lock file every build takes beside the index
    assert left == sorted([recent.name, touched.name, own.name, other.name, live_swap.name, ".idx.lock"])


def test_an_old_score_matrix_temp_in_the_index_folder_is_removed(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    build_index(_docs(tmp_path), index, language="en")
    # An older judge built a score matrix in a mkdtemp folder of the index folder itself.
    abandoned = _old_build_folder(index, "lucene-k1=0.9-b=0.4")
    _age(abandoned, OLD_TEMP_AGE_S + 60)
    recent = _old_build_folder(index, "lucene-k1=0.9-b=0.4")
    opened = BM25Index(index)
    assert opened.search("pale gums", 10, "lucene", 0.9, 0.4, 0.5)[0][0] == 0
    assert (index / "bm25" / "lucene-k1=0.9-b=0.4" / "params.index.json").is_file()
    assert sorted(p.name for p in index.iterdir() if p.name.startswith(".")) == [recent.name]
