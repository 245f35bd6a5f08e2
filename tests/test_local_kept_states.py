"""Batched reasons keep each probability pass's KV state until its reason is decoded or its
caller is gone, whatever runs in between (a fake llama.cpp, interleavings fixed by events);
every llama.cpp call takes the machine's turn; threads follow the CPUs the process may use."""

from __future__ import annotations

import asyncio
import fcntl
import os
from dataclasses import replace
from pathlib import Path

import pytest
from _fake_llama import REASON_WORDS, install, settle

from judge.backends import ChatRequest, Message, ensure_resilient
from judge.backends._local import LocalBackend, default_threads
from judge.backends._model_turns import MachineTurns
from judge.batch import LocalExecutor, PassageJob
from judge.judging import JudgeConfig, Passage, judge_passage

PREFIX = '{"verdict": "'
REASON_PREFIX = '{"verdict": "yes", "reason": "'


def _messages(name: str, length: int) -> tuple[Message, ...]:
    return (Message("system", "judge"), Message("user", f"q? {name * length}"))


def _probability(name: str, length: int = 200) -> ChatRequest:
    return ChatRequest(
        messages=_messages(name, length), max_tokens=1, answer_prefix=PREFIX, candidates=("yes", "no")
    )


def _reason(name: str, length: int = 200) -> ChatRequest:
    return ChatRequest(messages=_messages(name, length), max_tokens=50, answer_prefix=REASON_PREFIX)


async def test_a_batch_waiting_for_the_model_keeps_its_prompts_while_probability_passes_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # n_ctx 700 holds two 315-token reasons: the four waiting reasons split into two batches.
    backend = LocalBackend(n_ctx=700, reason_batch=4)
    llm, gates = install(backend, monkeypatch)
    names = "ABCDEFGHI"
    probed = {n: asyncio.Event() for n in names}
    go = {n: asyncio.Event() for n in names}
    requests = {n: _probability(n) for n in names}

    async def passage(name: str) -> str:
        await backend.complete(requests[name])
        probed[name].set()
        await go[name].wait()
        return (await backend.complete(_reason(name))).text

    first = [asyncio.ensure_future(passage(n)) for n in "ABCD"]
    for n in "ABCD":
        await probed[n].wait()
    gates.close(requests["E"])  # E's probability pass holds the model ...
    later = [asyncio.ensure_future(passage("E"))]
    await settle()
    later += [asyncio.ensure_future(passage(n)) for n in "FGHI"]  # ... F-I queue behind it
    await settle()
    for n in "ABCD":  # four reasons wait: the first batch (A, B) is taken and queues last
        go[n].set()
    await settle()
    assert len(backend._pending) == 2  # C and D wait for the next batch
    gates.open(requests["E"])  # five probability passes run before the batch gets the model
    for n in "EFGHI":
        go[n].set()
    texts = await asyncio.gather(*first, *later)
    assert texts == [REASON_PREFIX + "w" * REASON_WORDS] * len(names)
    assert not backend._kept  # every state went with its reason
    assert llm.evaluated == sum(len(backend._prompt_tokens(llm, r)) for r in requests.values())


async def test_a_state_lives_until_its_caller_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = LocalBackend(reason_batch=4)
    install(backend, monkeypatch)
    go = asyncio.Event()

    async def twice() -> None:
        await backend.complete(_probability("A", 40))
        assert len(backend._kept) == 1
        await backend.complete(_probability("B", 40))  # the caller moved on: A's state goes
        assert len(backend._kept) == 1
        await go.wait()

    task = asyncio.ensure_future(twice())
    await settle()
    assert len(backend._kept) == 1
    go.set()
    await task
    await settle()
    assert not backend._kept  # the caller is gone: so is its state


async def test_a_reason_without_a_kept_state_is_written_the_sequential_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = LocalBackend(reason_batch=4)
    llm, _ = install(backend, monkeypatch)
    await backend.complete(_probability("A", 40))
    backend.reset_cache()  # the state is gone: the reason evaluates its prompt again
    reason = await backend.complete(_reason("A", 40))
    assert reason.text == REASON_PREFIX + "w" * REASON_WORDS
    assert reason.finish_reason == "stop"
    both = [backend._prompt_tokens(llm, r) for r in (_probability("A", 40), _reason("A", 40))]
    assert llm.evaluated == sum(map(len, both))  # the whole reason prompt was evaluated


async def test_judging_with_reasons_over_a_window_wider_than_a_batch_leaves_no_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The judge's English template: ~880 tokens a prompt here, 256 for the reason: 2 a batch.
    backend = LocalBackend(n_ctx=2400, reason_batch=4)
    _, gates = install(backend, monkeypatch)
    gates.rounds = 30  # the loop runs on while the model works, as with a real thread
    executor = LocalExecutor(ensure_resilient(backend), window=12)
    jobs = [PassageJob(i, Passage(text=chr(ord("A") + i) * 200)) for i in range(16)]
    config = JudgeConfig(probability=True, explain=True, language="en")
    verdicts = await executor.judge("q?", jobs, config)
    assert [v.verdict for v in verdicts] == ["yes"] * len(jobs)
    assert all(v.reason == "w" * REASON_WORDS for v in verdicts), [v.error for v in verdicts]
    assert not backend._kept


def _held_elsewhere(path: Path) -> bool:
    """Whether another open file (another process's, as flock sees it) holds ``path``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_turn_excludes_every_other_judge_of_the_machine(tmp_path: Path) -> None:
    turns = MachineTurns(tmp_path / "home" / "embedded-model.lock")
    assert not (tmp_path / "home").exists()  # nothing made before the first turn
    with turns.turn():
        assert _held_elsewhere(turns.path)
    assert not _held_elsewhere(turns.path)
    turns.close()


async def test_every_llama_call_runs_in_the_machines_turn(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    backend = LocalBackend(reason_batch=1)
    llm, _ = install(backend, monkeypatch)
    backend._turns = MachineTurns(tmp_path / "embedded-model.lock")
    seen: list[bool] = []
    llm.on_eval = lambda: seen.append(_held_elsewhere(tmp_path / "embedded-model.lock"))
    await backend.complete(_probability("A", 40))
    await backend.complete(_reason("A", 40))
    assert seen and all(seen)
    assert not _held_elsewhere(tmp_path / "embedded-model.lock")


def test_threads_follow_the_cpus_the_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert default_threads() == 1
    assert LocalBackend().n_threads == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert LocalBackend().n_threads == 3


async def test_no_state_is_kept_when_no_reason_follows(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = LocalBackend(reason_batch=4)
    install(backend, monkeypatch)
    verdicts_only = JudgeConfig(probability=True, explain=False, language="en")
    verdict = await judge_passage(backend, "q?", Passage(text="A" * 40), 0, verdicts_only)
    assert verdict.verdict == "yes" and not backend._kept  # this task holds nothing
    explained = await judge_passage(
        backend, "q?", Passage(text="A" * 40), 0, replace(verdicts_only, explain=True)
    )
    assert explained.p_yes == verdict.p_yes and explained.reason == "w" * REASON_WORDS
