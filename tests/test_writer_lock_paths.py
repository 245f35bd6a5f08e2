"""One writer per output, whatever name reaches it: a ``judge score``, ``judge search`` or
``judge index build`` that holds its output refuses a second writer that names the same
file through a symlink, ``./x`` or ``d/../x``, or a hard link (exit 2 naming ``-o`` and
the holder, before any call or search), and the index build's lock covers the BM25 build
and the dense vectors alike.

The holder is a real run held in the middle (its judge, engine or encoder waits on an event
the test sets once the second writer was refused): ordered, not timed."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _fake_encoder import FakeEncoder

from judge.backends import ChatRequest, RuleBackend
from judge.batch import BatchOptions, score_dataset
from judge.cli import main
from judge.io import OutputBusy
from judge.judging import JudgeConfig
from judge.search import build_dense, build_index, register_encoder
from judge.store import recover_output

QUIET = BatchOptions(progress="quiet", fsync=False)
ROWS = [
    {"id": "q1", "query": "感冒", "retrieval_context": ["RELEVANT a", "b"]},
    {"id": "q2", "query": "高铁", "retrieval_context": ["c", "RELEVANT d"]},
]
DOCS = [("d1", "the cat sat on the mat"), ("d2", "dogs chase cats"), ("d3", "apple pie")]


def _dataset(path: Path) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS), encoding="utf-8")
    return path


def _docs(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in DOCS), encoding="utf-8")
    return path


def _passage_of(request: ChatRequest) -> str:
    return "\n".join(m.content for m in request.messages if m.role == "user")


class HeldJudge:
    """A judge whose calls wait until :attr:`release` is set; :attr:`started` is set by the
    first call (its run holds its output's lock by then)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

        async def sleep(_: float) -> None:
            self.started.set()
            await self.release.wait()

        keyword = RuleBackend.keyword("RELEVANT", text_of=_passage_of)
        self.backend = RuleBackend(keyword.rule, name="fake:held", latency_s=0.001, sleep=sleep)


def _aliases(tmp_path: Path, real: Path) -> dict[str, Callable[[], Path]]:
    """Other names of ``real`` (made when asked: a hard link needs the file to exist)."""

    def symlink() -> Path:
        link = tmp_path / "link.jsonl"
        link.symlink_to(real)
        return link

    def hard_link() -> Path:
        real.touch()
        other = tmp_path / "other" / "hard.jsonl"
        other.parent.mkdir(exist_ok=True)
        os.link(real, other)
        return other

    def dot_dot() -> Path:
        (tmp_path / "sub").mkdir(exist_ok=True)
        return Path(os.path.relpath(tmp_path, Path.cwd())) / "sub" / ".." / "." / real.name

    return {"symlink": symlink, "hard link": hard_link, "./ and ..": dot_dot}


@pytest.mark.parametrize("alias", ["symlink", "hard link", "./ and .."])
async def test_a_second_judge_score_through_another_name_is_refused(tmp_path: Path, alias: str) -> None:
    """Two ``judge score`` into one file under two names would write every record twice
    (4 records for 2 queries): the second is refused before any call, and the first ends
    with each query once."""
    inp = _dataset(tmp_path / "d.jsonl")
    real = tmp_path / "o.jsonl"
    other = _aliases(tmp_path, real)[alias]()
    held = HeldJudge()
    first = asyncio.create_task(score_dataset(inp, real, held.backend, JudgeConfig(), options=QUIET))
    try:
        await held.started.wait()
        second = RuleBackend.keyword("RELEVANT", text_of=_passage_of)
        with pytest.raises(OutputBusy) as busy:
            await score_dataset(inp, other, second, JudgeConfig(), options=QUIET)
        assert second.requests == []
        assert busy.value.field == "-o" and "another judge score" in str(busy.value)
        if alias != "hard link":  # the holder's record is read from the one lock file
            assert f"pid {os.getpid()}" in str(busy.value)
    finally:
        held.release.set()
        await first
    assert sorted(r["id"] for r in recover_output(real)) == ["q1", "q2"]


def test_a_second_judge_score_through_a_symlink_is_exit_2_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command line's refusal: exit 2 naming ``-o`` and the holder, nothing written."""
    inp = _dataset(tmp_path / "d.jsonl")
    real = tmp_path / "o.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    qrels = tmp_path / "labels.qrels"
    qrels.write_text("q1 0 d1 1\n", encoding="utf-8")
    held = HeldJudge()
    outcome: list[int] = []

    async def hold_and_try() -> None:
        first = asyncio.create_task(score_dataset(inp, real, held.backend, JudgeConfig(), options=QUIET))
        await held.started.wait()
        args = ["score", str(inp), "-o", str(link), "--backend", f"qrels:{qrels}"]
        outcome.append(await asyncio.to_thread(main, args))
        held.release.set()
        await first

    asyncio.run(hold_and_try())
    err = capsys.readouterr().err
    assert outcome == [2] and "field '-o'" in err and "another judge score" in err
    assert sorted(r["id"] for r in recover_output(real)) == ["q1", "q2"]


def test_a_second_judge_search_through_a_symlink_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``judge search`` held in its first request (the loopback engine waits) refuses a
    second run writing the same file through a symlink; the engine sees one request."""
    from _search_stub import SearchStub, serve

    release = threading.Event()

    def answer(_: Any) -> tuple[int, Any]:
        release.wait(240)  # a bound on a hung test, not a timing assumption
        return 200, {"hits": {"hits": [{"_id": "d1", "_source": {"text": "x"}}]}}

    stub = SearchStub({"/idx/_search": answer})
    with serve(stub):
        config = tmp_path / "c.toml"
        config.write_text(
            f'engine = "http"\nurl = "{stub.url}/idx/_search"\nmethod = "POST"\n'
            'body = \'{"size": {{depth}}, "q": {{query|json}}}\'\n'
            '[response]\nids = "hits.hits[*]._id"\ntext = "hits.hits[*]._source.text"\n',
            encoding="utf-8",
        )
        queries = tmp_path / "q.jsonl"
        queries.write_text('{"id": "q1", "query": "x"}\n', encoding="utf-8")
        real = tmp_path / "run.jsonl"
        link = tmp_path / "link.jsonl"
        link.symlink_to(real)
        codes: list[int] = []
        args = ["search", str(queries), "--config", str(config)]
        first = threading.Thread(target=lambda: codes.append(main([*args, "-o", str(real)])))
        first.start()
        try:
            while not searched(stub):  # the first run is searching: it holds its output
                assert first.is_alive(), capsys.readouterr().err
                release.wait(0.01)
            second = main([*args, "-o", str(link)])
            err = capsys.readouterr().err
            assert second == 2 and "field '-o'" in err and "another judge search" in err
            assert searched(stub) == 1  # the first run's one query; the second asked nothing
        finally:
            release.set()
            first.join(60)
    assert codes == [0]


def searched(stub: Any) -> int:
    return sum(1 for seen in stub.seen if seen.path == "/idx/_search")


@pytest.fixture
def held_encoder() -> Iterator[tuple[threading.Event, threading.Event]]:
    """The ``fake`` encoder, whose first batch waits: (started, release)."""
    started, release = threading.Event(), threading.Event()

    class Held(FakeEncoder):
        def passages(self, texts: Any) -> Any:
            started.set()
            release.wait(120)
            return super().passages(texts)

    register_encoder("held", Held)
    register_encoder("fake", FakeEncoder)
    yield started, release
    release.set()


def test_an_index_build_refuses_a_second_build_of_the_same_folder_bm25_or_dense(
    tmp_path: Path, held_encoder: tuple[threading.Event, threading.Event], capsys: pytest.CaptureFixture[str]
) -> None:
    """A dense build in progress holds its index folder: a BM25 rebuild and a dense build of
    it through a symlink are refused (exit 2 naming ``-o`` and the holder) and leave the
    index as it was; once the holder is done, both go ahead."""
    started, release = held_encoder
    docs = _docs(tmp_path / "docs.jsonl")
    index = tmp_path / "idx"
    build_index(docs, index)
    link = tmp_path / "link"
    link.symlink_to(index)
    before = sorted(p.name for p in index.iterdir())
    errors: list[BaseException] = []

    def hold() -> None:
        try:
            build_dense(index, encoder="held")
        except BaseException as exc:  # shown by the assertion below
            errors.append(exc)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert started.wait(60), errors
        with pytest.raises(OutputBusy) as dense_busy:
            build_dense(link, encoder="fake")
        with pytest.raises(OutputBusy) as bm25_busy:
            build_index(docs, link)
        code = main(["index", "build", str(docs), "-o", str(tmp_path / "." / "idx")])
        err = capsys.readouterr().err
    finally:
        release.set()
        holder.join(60)
    assert errors == []
    for busy in (dense_busy.value, bm25_busy.value):
        assert busy.field == "-o" and "another judge index build" in str(busy)
        assert f"pid {os.getpid()}" in str(busy)
    assert code == 2 and "field '-o'" in err and "another judge index build" in err
    assert "dense" not in before and (index / "dense" / "vectors.npy").is_file()  # the holder's
    assert build_dense(link, encoder="fake").documents == 3  # the holder gone: it goes ahead
    assert build_index(docs, index).documents == 3
