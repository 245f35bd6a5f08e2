"""A pair the backend cannot judge never stops a run: it becomes unjudged with its error
(score, compare-systems, experiment), ``--retry-unjudged`` asks again; only an error that
dooms every request stops the run (exit 3, and the message says how to resume)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _experiment_fixtures import bundled

import judge.backends._resolve
from judge.backends import (
    PermanentError,
    RequestError,
    RuleBackend,
    ScriptedBackend,
    TransientError,
    error_for_status,
)
from judge.cli import main
from judge.judging import JudgeConfig, Passage, judge_passage

TOO_LONG = "the prompt has 5000 tokens and needs room for 1 more, but the model's context is 4096 tokens"


class OnePairFails:
    """A keyword judge whose first pair asked about fails with ``error`` (a
    :class:`RequestError` by default) on every ask while ``failing`` is set."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error or RequestError(TOO_LONG)
        self.failing = True
        self.bad: str | None = None
        self.asked: list[str] = []
        judge_like = RuleBackend.keyword("RELEVANT", grades={"<rel=3>": 3, "<rel=0>": 0})

        def rule(request: Any) -> Any:
            text = "\n".join(m.content for m in request.messages)  # the pair: query and passage
            self.asked.append(text)
            if self.bad is None:
                self.bad = text
            if self.failing and text == self.bad:
                return self.error
            return judge_like.rule(request)

        self.backend = RuleBackend(rule)


@pytest.fixture
def judge_with_one_bad_pair(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> OnePairFails:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    holder = OnePairFails()
    monkeypatch.setattr(judge.backends._resolve, "resolve_backend", lambda spec=None, **kw: holder.backend)
    return holder


def _unjudged(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [v for r in records for v in r["verdicts"] if v["verdict"] == "unjudged"]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _dataset(path: Path) -> Path:
    rows = [
        {
            "id": f"q{i}",
            "query": f"问题 {i}",
            "retrieval_context": [f"段落 {i}-{j} <rel={3 * (j % 2)}>" for j in range(3)],
        }
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_score_keeps_going_past_a_pair_it_cannot_judge_and_retry_asks_it_again(
    judge_with_one_bad_pair: OnePairFails, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = judge_with_one_bad_pair
    out = tmp_path / "out.jsonl"
    data = _dataset(tmp_path / "d.jsonl")
    assert (
        main(["score", str(data), "-o", str(out), "--backend", "x:y", "--quiet", "--concurrency", "1"]) == 0
    )
    bad = _unjudged(_lines(out))
    assert len(bad) == 1 and "RequestError" in bad[0]["error"] and "4096 tokens" in bad[0]["error"]
    assert sum(len(r["verdicts"]) for r in _lines(out)) == 9  # every other pair judged
    fake.failing, fake.asked = False, []
    assert main(["score", "--retry-unjudged", str(out), "--backend", "x:y", "--quiet"]) == 0
    assert _unjudged(_lines(out)) == [] and fake.asked == [fake.bad]  # only that pair asked


def test_compare_systems_keeps_going_past_a_pair_it_cannot_judge(
    judge_with_one_bad_pair: OnePairFails, tmp_path: Path
) -> None:
    fake = judge_with_one_bad_pair
    a, b = _dataset(tmp_path / "a.jsonl"), tmp_path / "b.jsonl"
    rows = _lines(a)
    b.write_text(
        "".join(json.dumps({**r, "retrieval_context": r["retrieval_context"][::-1]}) + "\n" for r in rows)
    )
    out = tmp_path / "cmp"
    argv = ["compare-systems", f"a={a}", f"b={b}", "-o", str(out), "--backend", "x:y", "--quiet", "--json"]
    assert main(argv) == 0
    bad = _unjudged(_lines(out / "pool.judged.jsonl"))
    assert len(bad) == 1 and "RequestError" in bad[0]["error"]
    fake.failing, fake.asked = False, []
    assert main([*argv, "--retry-unjudged"]) == 0
    assert _unjudged(_lines(out / "pool.judged.jsonl")) == [] and fake.asked == [fake.bad]


def test_experiment_keeps_going_past_a_pair_it_cannot_judge(
    judge_with_one_bad_pair: OnePairFails, tmp_path: Path
) -> None:
    fake = judge_with_one_bad_pair
    data = bundled(tmp_path / "bundled")
    out = tmp_path / "exp"
    argv = ["experiment", str(data.queries), "--config", str(data.config), "--grid", "k1=0.9,1.2"]
    argv += ["--backend", "x:y", "-o", str(out), "--quiet", "--json", "--resamples", "200"]
    assert main(argv) == 0
    pools = sorted(out.rglob("pool.judged.jsonl"))
    bad = [v for pool in pools for v in _unjudged(_lines(pool))]
    assert len(bad) == 1 and "RequestError" in bad[0]["error"]
    fake.failing, fake.asked = False, []
    assert main([*argv, "--retry-unjudged"]) == 0
    assert [v for pool in pools for v in _unjudged(_lines(pool))] == [] and fake.asked == [fake.bad]


class ClusterLostError(PermanentError):
    """Dooms every request, but running the same command again (the cluster back) resumes."""

    resume_helps = True


def test_an_error_that_dooms_every_request_stops_the_run_and_says_how_to_resume(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    data = _dataset(tmp_path / "d.jsonl")
    for error, hint in (
        (PermanentError("HTTP 401: invalid key"), "fix the cause above, then run the same command again"),
        (ClusterLostError("the workers are gone"), "kept: run the same command again to resume"),
        (TransientError("connection reset"), None),  # one pair's error: unjudged, the run goes on
    ):
        holder = OnePairFails(error)
        monkeypatch.setattr(
            judge.backends._resolve, "resolve_backend", lambda spec=None, h=holder, **kw: h.backend
        )
        out = tmp_path / f"{type(error).__name__}.jsonl"
        code = main(["score", str(data), "-o", str(out), "--backend", "x:y", "--quiet", "--max-retries", "0"])
        err = capsys.readouterr().err
        if hint is None:
            assert code == 0 and len(_unjudged(_lines(out))) == 1
        else:
            assert code == 3 and f"backend error: {error}" in err and hint in err


async def test_one_request_error_is_that_pairs_unjudged_record_with_its_error() -> None:
    backend = ScriptedBackend([RequestError(TOO_LONG)])
    verdict = await judge_passage(backend, "q", Passage("p"), 0, JudgeConfig(probability=False))
    assert verdict.verdict == "unjudged" and verdict.error is not None and "4096 tokens" in verdict.error
    doomed = ScriptedBackend([PermanentError("HTTP 401")])
    with pytest.raises(PermanentError, match="401"):
        await judge_passage(doomed, "q", Passage("p"), 0, JudgeConfig(probability=False))


@pytest.mark.parametrize(
    ("status", "message", "code", "kind"),
    [
        (400, "This model's maximum context length is 8192 tokens", "context_length_exceeded", RequestError),
        (400, "The response was filtered", "content_filter", RequestError),
        (400, "Input data may contain inappropriate content.", "DataInspectionFailed", RequestError),
        (413, "request entity too large", None, RequestError),
        (400, "bad schema", "invalid", PermanentError),
        (401, "wrong key", None, PermanentError),
        (404, "The model `gpt-9` does not exist", "model_not_found", PermanentError),
    ],
)
def test_http_errors_about_one_prompt_are_request_errors(
    status: int, message: str, code: str | None, kind: type[Exception]
) -> None:
    error = error_for_status(status, message, code=code)
    assert type(error) is kind and error.status == status
