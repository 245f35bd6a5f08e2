"""``judge`` warns at run time when ``--examples`` is used where the docs measured it to hurt
: docs/agreement.md measured the embedded judge on English (TREC DL
2019) with worked examples below its zero-shot agreement (κ 0.35 -> 0.20 / 0.23 / 0.17 with
2 / 4 / 8) and ordering nine configurations worse (τ 0.72 -> -0.22); on Chinese (RGB)
agreement held but a comparison's order fell (τ 0.78 -> 0.67). The warning goes to stderr
and into the summary (``examples.warning``: the CLI's summary file and a service job's), and
a comparison's report lists it; another backend, or a Chinese ``judge score`` run, gets none.

The judge here is a fake that answers under the embedded judge's backend name (the warning
keys on the backend that was measured, never on a model being loaded)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from judge.backends import EMBEDDED_BACKEND, ResilientBackend, RuleBackend
from judge.cli import main
from judge.judging import EXAMPLES_MEASURED, ExampleSpec, JudgeConfig, bank_of, examples_caution

EN = {"q1": "what is the boiling point of water", "q2": "who wrote hamlet"}
ZH = {"z1": "小狗贫血的表现", "z2": "高铁二等座票价怎么算"}


def _bank(queries: dict[str, str], *, n: int = 4, pooled: bool = False) -> Any:
    labelled = {q: {"d0": 1, "d1": 0} for q in queries}
    texts = {q: {"d0": f"{t} 答案 answer", "d1": "other"} for q, t in queries.items()}
    bank = bank_of(ExampleSpec(n=n), labelled, queries, texts)
    bank.pooled = pooled
    return bank


def test_the_caution_names_the_measurement_where_it_hurt() -> None:
    config = JudgeConfig()  # language auto: each query's own
    got = examples_caution(_bank({**EN, **ZH}), config, EMBEDDED_BACKEND)
    assert got is not None
    assert got.startswith("2 of this run's 4 queries are English: on English with the embedded judge")
    assert "docs/agreement.md" in got and "kappa 0.35 zero-shot, 0.20 / 0.23 / 0.17" in got
    assert "tau 0.72 -> -0.22" in got and "RGB" not in got  # a score run: Chinese held
    assert "judge agree" in got and "Worked examples" in EXAMPLES_MEASURED
    # a comparison: the order fell on Chinese too
    pooled = examples_caution(_bank({**EN, **ZH}, pooled=True), config, EMBEDDED_BACKEND)
    assert pooled is not None and "2 of this run's 4 queries are Chinese" in pooled
    assert "tau 0.78 -> 0.67" in pooled
    only_zh = examples_caution(_bank(ZH, pooled=True), config, EMBEDDED_BACKEND)
    assert only_zh is not None and "English" not in only_zh


def test_no_caution_where_nothing_was_measured_against_it() -> None:
    config = JudgeConfig()
    assert examples_caution(_bank(ZH), config, EMBEDDED_BACKEND) is None  # Chinese score: held
    assert examples_caution(_bank(EN), config, "qwen:qwen-plus") is None  # another judge
    assert examples_caution(_bank(EN), config, "local:/models/other.gguf") is None
    assert examples_caution(_bank(EN, n=0), config, EMBEDDED_BACKEND) is None  # no examples
    assert examples_caution(None, config, EMBEDDED_BACKEND) is None
    # the run's language decides, not the text: English text judged with the Chinese template
    assert examples_caution(_bank(EN), JudgeConfig(language="zh"), EMBEDDED_BACKEND) is None
    assert examples_caution(_bank(EN), JudgeConfig(template="binary.zh.v2"), EMBEDDED_BACKEND) is None
    assert examples_caution(_bank(ZH), JudgeConfig(language="en"), EMBEDDED_BACKEND) is not None


# ------------------------------------------------------------------ end to end
def _rule(_request: Any) -> str:
    return '{"verdict": "no", "reason": "x"}'


def _embedded_named() -> RuleBackend:
    return RuleBackend(_rule, name=EMBEDDED_BACKEND, supports_probabilities=False)


@pytest.fixture()
def embedded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], None]:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))

    def use(name: str) -> None:
        backend = RuleBackend(_rule, name=name, supports_probabilities=False)
        monkeypatch.setattr(
            "judge.backends.make_backend",
            lambda *_a, **kw: ResilientBackend(backend, policy=kw.get("policy")),
        )

    use(EMBEDDED_BACKEND)
    return use


def _data(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "data.jsonl"
    lines = []
    for qid, query in EN.items():
        ctx = [{"id": f"d{i}", "text": f"passage {i} about {query}"} for i in range(4)]
        lines.append(json.dumps({"id": qid, "query": query, "retrieval_context": ctx}))
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    qrels = tmp_path / "l.qrels"
    qrels.write_text("".join(f"{q} 0 d0 1\n{q} 0 d1 0\n" for q in EN), encoding="utf-8")
    return data, qrels


def test_score_warns_on_stderr_and_in_the_summary(
    embedded: Callable[[str], None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, qrels = _data(tmp_path)
    out = tmp_path / "o.jsonl"
    args = ["score", str(data), "-o", str(out), "--labels", str(qrels), "--backend", "local", "--quiet"]
    assert main([*args, "--examples", "2", "--no-cache"]) == 0
    err = capsys.readouterr().err
    assert "judge score: warning: --examples: 2 of this run's 2 queries are English" in err
    assert "docs/agreement.md" in err
    summary = json.loads((tmp_path / "o.summary.json").read_text(encoding="utf-8"))
    assert summary["examples"]["warning"].startswith("2 of this run's 2 queries are English")
    # without --examples, or with another judge: no warning
    assert main([*args[:3], str(tmp_path / "z.jsonl"), *args[4:], "--no-cache"]) == 0
    assert "warning: --examples" not in capsys.readouterr().err
    embedded("qwen:qwen-plus")
    assert main([*args[:3], str(tmp_path / "q.jsonl"), *args[4:], "--examples", "2", "--no-cache"]) == 0
    assert "warning: --examples" not in capsys.readouterr().err
    other = json.loads((tmp_path / "q.summary.json").read_text(encoding="utf-8"))
    assert "warning" not in other["examples"]


def test_compare_systems_lists_the_warning(
    embedded: Callable[[str], None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, qrels = _data(tmp_path)
    rep = tmp_path / "rep"
    args = ["compare-systems", f"a={data}", f"b={data}", "-o", str(rep), "--backend", "local"]
    assert main([*args, "--qrels", str(qrels), "--examples", "2", "--quiet", "--json"]) == 0
    captured = capsys.readouterr()
    assert "judge compare-systems: warning: --examples: 2 of this run's 2 queries are English" in captured.err
    report = json.loads((rep / "report.json").read_text(encoding="utf-8"))
    assert any(w.startswith("--examples: 2 of this run's 2") for w in report["warnings"])


def test_a_service_job_carries_the_warning(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from _server import app_for, wait_job
    from fastapi.testclient import TestClient

    from judge.store import Label, LabelStore

    data, _ = _data(tmp_path)
    with LabelStore(tmp_path / "labels.sqlite") as store:
        for q in EN:
            store.put(Label(qid=q, docno="d0", label=1, reviewer="alice"))
            store.put(Label(qid=q, docno="d1", label=0, reviewer="alice"))
    records = [json.loads(x) for x in data.read_text(encoding="utf-8").splitlines()]
    with TestClient(app_for(tmp_path, backend=_embedded_named())) as c:
        r = c.post(
            "/v1/jobs", json={"records": records, "options": {"examples": 2, "k": [3], "language": "auto"}}
        )
        assert r.status_code == 202, r.text
        job = r.json()["id"]
        assert wait_job(c, job)["status"] == "done"
        page = c.get(f"/v1/jobs/{job}").json()
    assert page["summary"]["examples"]["warning"].startswith("2 of this run's 2 queries are English")
