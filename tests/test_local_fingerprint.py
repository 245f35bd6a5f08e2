"""Backend fingerprints and the determinism fields of a batch run (borderline count,
expected metrics, fingerprint) with a scripted probability-mode judge: no model needed."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from judge.backends import ensure_resilient
from judge.backends._base import ChatRequest
from judge.backends._fake import ScriptedBackend
from judge.backends._fingerprint import backend_fingerprint
from judge.batch import BatchOptions, score_dataset
from judge.judging import JudgeConfig
from judge.stability._nightly import fingerprint_change

# P(yes) of each passage, by passage id: several near 0.55 / 0.60 (and 0.575 +- 0.02).
P_YES = {"a1": 0.93, "a2": 0.58, "a3": 0.21, "a4": 0.57, "b1": 0.12, "b2": 0.59, "b3": 0.88, "b4": 0.45}


def _dataset(tmp_path: Path) -> Path:
    rows = [
        {
            "id": "a",
            "query": "q a",
            "retrieval_context": [{"id": p, "text": f"passage {p}"} for p in ("a1", "a2", "a3", "a4")],
        },
        {
            "id": "b",
            "query": "q b",
            "retrieval_context": [{"id": p, "text": f"passage {p}"} for p in ("b1", "b2", "b3", "b4")],
        },
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _judge() -> ScriptedBackend:
    def reply(request: ChatRequest, _index: int) -> dict[str, float]:
        text = request.messages[-1].content
        pid = re.search(r"<passage>\npassage (\w+)", text)  # the passage's text, not a rule's words
        assert pid is not None
        p = P_YES[pid.group(1)]
        return {"yes": p, "no": 1.0 - p}

    return ScriptedBackend(reply, name="fake:probs", model="probs-1")


def _score(tmp_path: Path, threshold: float, name: str) -> dict[str, object]:
    config = JudgeConfig(probability=True, p_yes_threshold=threshold)
    options = BatchOptions(progress="quiet", fsync=False)
    out = tmp_path / f"{name}.jsonl"
    backend = ensure_resilient(_judge())
    outcome = asyncio.run(score_dataset(_dataset(tmp_path), out, backend, config, options=options))
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert all(r["backend_fingerprint"] == "fake:probs|model=probs-1" for r in records)
    assert all(set(r["expected"]) == {"map", "ndcg", "ndcg_stderr", "ndcg_method"} for r in records)
    return outcome.summary


def test_summary_expected_metrics_ignore_the_threshold_and_count_borderline(tmp_path: Path) -> None:
    low, high = _score(tmp_path, 0.55, "low"), _score(tmp_path, 0.60, "high")
    assert low["judge"]["map"] != high["judge"]["map"]  # type: ignore[index]
    assert low["judge"]["expected"] == high["judge"]["expected"]  # type: ignore[index]
    assert set(low["judge"]["expected"]["ndcg"]) == {"5", "10"}  # type: ignore[index]
    assert low["backend_fingerprint"] == "fake:probs|model=probs-1"
    # within 0.02 of 0.55: 0.57 (a4); of 0.60: 0.58 (a2), 0.59 (b2)
    assert low["borderline"] == 1 and high["borderline"] == 2
    assert low["borderline_margin"] == 0.02


def test_fingerprints_of_remote_and_wrapped_backends() -> None:
    from judge.backends._openai import OpenAIBackend

    remote = OpenAIBackend("gpt-4o-mini", base_url="http://user:secret@127.0.0.1:8000/v1/", api_key="sk-test")
    fingerprint = backend_fingerprint(remote)
    assert fingerprint == "openai:gpt-4o-mini|model=gpt-4o-mini|host=127.0.0.1:8000"
    assert "secret" not in fingerprint
    assert backend_fingerprint(ensure_resilient(remote)) == fingerprint
    assert ensure_resilient(remote).fingerprint == fingerprint


def test_local_fingerprint_names_model_build_and_cpu_features() -> None:
    pytest.importorskip("llama_cpp")
    from judge.backends._local import LocalBackend, kernel_features
    from judge.backends._model_file import DEFAULT_MODEL

    backend = LocalBackend()  # not loaded: the fingerprint needs no model
    fingerprint = backend.fingerprint
    assert fingerprint.startswith(f"local:qwen2.5-coder-1.5b-q4km|model=sha256:{DEFAULT_MODEL.sha256}|")
    assert re.search(r"\|llama-cpp-python=\d+\.\d+\.\d+\|cpu=", fingerprint)
    features = kernel_features()
    assert fingerprint.endswith(f"cpu={features}")
    assert "SSE3" in features.split(",")  # every x86-64 build has it
    assert backend_fingerprint(ensure_resilient(backend)) == fingerprint


def test_nightly_says_when_the_fingerprint_changed() -> None:
    history = [
        {"name": "night", "backend_fingerprint": "local:x|cpu=AVX2"},
        {"name": "other", "backend_fingerprint": "local:x|cpu=AVX512"},
    ]
    same = fingerprint_change(history, "night", "local:x|cpu=AVX2")
    assert same == {
        "backend_fingerprint": "local:x|cpu=AVX2",
        "previous_fingerprint": "local:x|cpu=AVX2",
        "fingerprint_changed": False,
    }
    assert fingerprint_change(history, "night", "local:x|cpu=AVX512")["fingerprint_changed"] is True
    assert fingerprint_change([], "night", "local:x")["fingerprint_changed"] is False
