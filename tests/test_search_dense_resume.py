"""A dense build resumes only what it can prove: a missing or unreadable plan in
``dense.partial/`` discards every chunk; a chunk made by another encoder (by the identity it
carries) or holding a value that is not finite is encoded again; what a killed build left is
removed by the next build. The issue's case: a build killed after two chunks, its
``partial.json`` truncated, rebuilt with another encoder of the same dimension."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _fake_encoder import FakeEncoder

from judge.search import build_dense, build_index, register_encoder
from judge.search._encoder import identity

DOCS = [
    (f"d{i}", f"passage {i} about {w}")
    for i, w in enumerate(["cats", "dogs", "apples", "pears", "stocks", "bonds", "tea"])
]


@pytest.fixture
def encoders() -> Iterator[dict[str, FakeEncoder]]:
    made = {"first": FakeEncoder(seed=0), "second": FakeEncoder(seed=3)}  # the same dimension, 16
    for name, enc in made.items():
        register_encoder(name, lambda enc=enc: enc)  # type: ignore[misc]
    yield made


def fresh_index(tmp_path: Path, name: str) -> Path:
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in DOCS), encoding="utf-8")
    index = tmp_path / name
    build_index(docs, index, language="en")
    return index


def killed_after_two_chunks(index: Path, encoder: str) -> None:
    def kill(done: int, total: int, rate: float) -> None:
        if done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_dense(index, encoder=encoder, chunk=2, progress=kill)
    assert len(list((index / "dense.partial").glob("0000*"))) == 2


def vectors(index: Path) -> np.ndarray:  # type: ignore[type-arg]
    return np.asarray(np.load(index / "dense" / "vectors.npy"), dtype=np.float32)


def expected(tmp_path: Path, encoder: str) -> np.ndarray:  # type: ignore[type-arg]
    index = fresh_index(tmp_path, f"fresh-{encoder}")
    build_dense(index, encoder=encoder, chunk=2)
    return vectors(index)


@pytest.mark.parametrize("plan", ["truncated", "missing", "not json"])
def test_an_unreadable_plan_discards_every_chunk(
    tmp_path: Path, encoders: dict[str, FakeEncoder], plan: str
) -> None:
    index = fresh_index(tmp_path, "idx")
    killed_after_two_chunks(index, "first")
    partial = index / "dense.partial" / "partial.json"
    text = partial.read_text(encoding="utf-8")
    if plan == "truncated":
        partial.write_text(text[: len(text) // 2], encoding="utf-8")
    elif plan == "missing":
        partial.unlink()
    else:
        partial.write_bytes(b"\xff\xfe")
    notes: list[str] = []
    encoders["second"].calls = 0
    info = build_dense(index, encoder="second", chunk=2, note=notes.append)
    assert info.encoded == len(DOCS)  # nothing of the first encoder kept
    assert encoders["second"].calls == len(DOCS) + 1  # every passage, and the probe
    assert notes and "no readable plan" in notes[0]
    got = vectors(index)
    assert np.array_equal(got, expected(tmp_path, "second"))
    assert not np.allclose(got[:4], expected(tmp_path, "first")[:4], atol=1e-2)  # the two differ
    meta = json.loads((index / "index.json").read_text(encoding="utf-8"))
    assert meta["dense"]["spec"] == "second"


def test_a_chunk_made_by_another_encoder_is_encoded_again(
    tmp_path: Path, encoders: dict[str, FakeEncoder]
) -> None:
    """The plan rewritten for the second encoder (a copy, a crash between writes): each chunk's
    own stamp still names the first, so neither is mixed in."""
    index = fresh_index(tmp_path, "idx")
    killed_after_two_chunks(index, "first")
    partial = index / "dense.partial" / "partial.json"
    plan = json.loads(partial.read_text(encoding="utf-8"))
    plan["encoder"] = {k: v for k, v in identity(encoders["second"], "second").items() if k != "probe"}
    partial.write_text(json.dumps(plan), encoding="utf-8")
    encoders["second"].calls = 0
    info = build_dense(index, encoder="second", chunk=2)
    assert info.encoded == len(DOCS)
    assert np.array_equal(vectors(index), expected(tmp_path, "second"))


def _poison(file: Path) -> None:
    """A NaN written into the chunk's first vector, whatever the chunk file's layout."""
    if file.suffix == ".npz":
        with np.load(file) as held:
            arrays = {k: held[k] for k in held.files}
        arrays["vectors"][0, 3] = np.nan
        with file.open("wb") as fh:
            np.savez(fh, **arrays)
    else:
        block = np.load(file)
        block[0, 3] = np.nan
        np.save(file, block)


def test_a_chunk_holding_nan_is_encoded_again(tmp_path: Path, encoders: dict[str, FakeEncoder]) -> None:
    index = fresh_index(tmp_path, "idx")
    killed_after_two_chunks(index, "first")
    (first_chunk,) = (index / "dense.partial").glob("000000.*")
    _poison(first_chunk)
    encoders["first"].calls = 0
    info = build_dense(index, encoder="first", chunk=2)
    assert info.encoded == len(DOCS) - 2  # chunk 0 again and the three not yet encoded
    got = vectors(index)
    assert np.isfinite(got).all()
    assert np.array_equal(got, expected(tmp_path, "first"))


def test_a_killed_builds_leftovers_are_removed(tmp_path: Path, encoders: dict[str, FakeEncoder]) -> None:
    index = fresh_index(tmp_path, "idx")
    killed_after_two_chunks(index, "first")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)  # a process that has ended
    leftovers = [
        index / f".dense.{pid}.tmp",
        index / f".dense.{pid}.old",
        index / f".index.json.{pid}.tmp",
        index / "dense.partial" / f".000002.npz.{pid}.tmp",
    ]
    for path in leftovers[:2]:
        path.mkdir()
        (path / "vectors.npy").write_bytes(b"half")
    for path in leftovers[2:]:
        path.write_bytes(b"half")
    alive = index / f".dense.{os.getppid()}.old"  # a running process's: kept
    alive.mkdir()
    build_dense(index, encoder="first", chunk=2)
    assert [p for p in leftovers if p.exists()] == []
    assert alive.is_dir()
