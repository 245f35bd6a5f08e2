"""``--examples-from`` without ``--examples``: it used to be ignored
without a word (a run with no examples at all). Now it is refused before any call, naming
the flag: exit 2 on the command line (``judge score``, ``compare-systems``, a search nightly's
``search.examples_from``), :class:`ConfigError` with ``field="examples_from"`` in the Python
API, 422 in the service (whose bodies refused it already)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge.backends import ConfigError, ResilientBackend, RuleBackend
from judge.batch import run_spec, run_spec_from_kwargs
from judge.cli import main


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    asked: list[str] = []

    def rule(request: Any) -> str:
        asked.append("call")
        return '{"verdict": "no", "reason": "x"}'

    backend = RuleBackend(rule, name="fake:count", supports_probabilities=False)
    monkeypatch.setattr(
        "judge.backends.make_backend", lambda *_a, **kw: ResilientBackend(backend, policy=kw.get("policy"))
    )
    return asked


def _data(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "data.jsonl"
    ctx = [{"id": "d0", "text": "water boils at 100 C"}, {"id": "d1", "text": "ice"}]
    data.write_text(json.dumps({"id": "q", "query": "boiling", "retrieval_context": ctx}) + "\n")
    qrels = tmp_path / "l.qrels"
    qrels.write_text("q 0 d0 1\nq 0 d1 0\n", encoding="utf-8")
    return data, qrels


@pytest.mark.parametrize("extra", [[], ["--examples", "0"]])
def test_score_refuses_examples_from_alone(
    calls: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    data, qrels = _data(tmp_path)
    out = tmp_path / "o.jsonl"
    args = ["score", str(data), "-o", str(out), "--labels", str(qrels), "--backend", "fake", "--quiet"]
    assert main([*args, "--examples-from", "nearest", *extra]) == 2
    err = capsys.readouterr().err
    assert "--examples-from" in err and "only used with examples" in err
    assert calls == [] and not out.exists()
    # with --examples it runs (the labelled passages take their labels: no call at all here)
    assert main([*args, "--examples-from", "nearest", "--examples", "2"]) == 0


def test_compare_systems_refuses_examples_from_alone(
    calls: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, qrels = _data(tmp_path)
    code = main(
        [
            "compare-systems",
            f"a={data}",
            f"b={data}",
            "-o",
            str(tmp_path / "rep"),
            "--backend",
            "fake",
            "--qrels",
            str(qrels),
            "--examples-from",
            "same",
        ]
    )
    assert code == 2 and "--examples-from" in capsys.readouterr().err
    assert calls == []


def test_a_search_nightly_config_refuses_examples_from_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "n.toml"
    cfg.write_text(
        '[search]\nqueries = "q.jsonl"\nconfig = "c.toml"\nqrels = "l.qrels"\nexamples_from = "nearest"\n'
    )
    assert main(["nightly", str(cfg)]) == 2
    assert "search.examples_from" in capsys.readouterr().err


def test_the_python_api_refuses_examples_from_alone(calls: list[str], tmp_path: Path) -> None:
    import judge

    for build in (
        lambda: run_spec(None, examples_from="nearest"),
        lambda: run_spec_from_kwargs(examples_from="same", examples=0),
    ):
        with pytest.raises(ConfigError) as err:
            build()
        assert err.value.field == "examples_from"
    data, qrels = _data(tmp_path)
    with pytest.raises(ConfigError) as err:
        judge.compare_systems(
            {"a": data, "b": data}, tmp_path / "r", backend="fake", qrels=qrels, examples_from="nearest"
        )
    assert err.value.field == "examples_from" and calls == []
    # given together, or laid over a base that shows examples, it is taken
    assert run_spec(None, examples=2, examples_from="nearest").examples.source == "nearest"
    assert run_spec(run_spec(None, examples=2), examples_from="nearest").examples.n == 2


def test_the_service_refuses_examples_from_alone() -> None:
    pytest.importorskip("fastapi")
    from pydantic import ValidationError

    from judge.server._schemas import CompareOptions, JobOptions

    for model in (JobOptions, CompareOptions):
        with pytest.raises(ValidationError, match="examples_from is only used with examples"):
            model(examples_from="nearest")
