"""scripts/eval_judge.py: sampling, resume, threshold tuning and the agreement table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _helpers import load_script

from judge.backends import ChatRequest, RuleBackend
from judge.judging import load_template, resolve_config

ej = load_script("eval_judge")


def _pairs(counts: dict[int, int], dataset: str = "rgb") -> list[object]:
    out = []
    for grade, n in counts.items():
        for i in range(n):
            text = f"RELEVANT passage {grade}-{i}" if grade >= 1 else f"other passage {grade}-{i}"
            out.append(ej.Pair(dataset, f"g{grade}-{i:02d}", f"q{i % 3}", f"query {i % 3}", text, grade))
    return out


def test_balanced_sample_quotas_halves_and_determinism() -> None:
    pairs = _pairs({0: 10, 1: 10, 2: 3})
    sample = ej.balanced_sample(pairs, 7, seed=3)
    # n // k = 2 per grade, the remainder (1) to the lowest grade: 3, 2, 2; halves floor(q/2) to tune.
    by = {(p.grade, split) for p, split in sample}
    counts = {key: sum(1 for p, s in sample if (p.grade, s) == key) for key in by}
    assert counts == {
        (0, "tune"): 1,
        (0, "test"): 2,
        (1, "tune"): 1,
        (1, "test"): 1,
        (2, "tune"): 1,
        (2, "test"): 1,
    }
    # Same seed, shuffled input: same sample. Other seed: another sample.
    assert ej.balanced_sample(list(reversed(pairs)), 7, seed=3) == sample
    assert ej.balanced_sample(pairs, 7, seed=4) != sample
    with pytest.raises(ValueError, match="grade 2 has only 3 pairs"):
        ej.balanced_sample(pairs, 12, seed=3)
    with pytest.raises(ValueError, match="at least 6"):
        ej.balanced_sample(pairs, 5, seed=3)


def test_query_groups() -> None:
    pairs = _pairs({0: 6, 1: 6})  # queries q0, q1, q2 with 4 passages each (2 per grade)
    groups = ej.query_groups(pairs, n_groups=2, size=3, seed=1)
    assert len(groups) == 2
    for g in groups:
        assert len(g) == 3 and len({p.query_id for p in g}) == 1
        assert {p.grade for p in g} == {0, 1}  # round-robin over the grades
    assert ej.query_groups(pairs, n_groups=2, size=3, seed=1) == groups


def test_tune_threshold() -> None:
    rel = np.array([True, True, False, False])
    assert ej.tune_threshold(rel, np.array([0.9, 0.6, 0.5, 0.1])) == pytest.approx(0.55)
    # Every threshold gives kappa 0 (or undefined): the one closest to `prefer` wins.
    t = ej.tune_threshold(np.array([True, False]), np.array([0.7, 0.7]))
    assert t == pytest.approx(0.7 - 1e-9)


def test_read_jsonl_skips_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ', encoding="utf-8")
    assert ej.read_jsonl(path) == [{"a": 1}, {"a": 2}]
    rec = ej.Recorder(path, lambda r: (str(r["a"]),))
    rec.add({"a": 3})
    assert ej.read_jsonl(path) == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert rec.done == {("1",), ("2",), ("3",)}


def _rule(request: ChatRequest) -> dict[str, float]:
    text = request.messages[-1].content
    return {"yes": 0.8, "no": 0.2} if "RELEVANT" in text else {"yes": 0.3, "no": 0.7}


async def test_judge_resume_and_table(tmp_path: Path) -> None:
    sample = ej.balanced_sample(_pairs({0: 8, 1: 8}), 16, seed=0)
    cfg = ej.parse_config("baseline_plain.zh.v1")
    assert (cfg.mode, cfg.probability, cfg.key) == ("binary", True, "binary-prob")
    path = tmp_path / "verdicts.jsonl"
    backend = RuleBackend(_rule)
    await ej.judge_sample(backend, sample, [cfg], ej.Recorder(path, ej.record_key))
    assert backend.calls == 16
    # Resume: nothing left to do.
    again = RuleBackend(_rule)
    await ej.judge_sample(again, sample, [cfg], ej.Recorder(path, ej.record_key))
    assert again.calls == 0
    # An interrupted write: the torn record is judged again, nothing else.
    data = path.read_bytes()
    path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1] + b'{"dataset": "rgb", "pair')
    third = RuleBackend(_rule)
    rec = ej.Recorder(path, ej.record_key)
    await ej.judge_sample(third, sample, [cfg], rec)
    assert third.calls == 1
    assert len(ej.read_jsonl(path)) == 16
    first = ej.read_jsonl(path)[0]
    assert first["mode"] == "binary-prob" and first["template_id"] == "baseline_plain.zh.v1"
    assert first["verdict"]["p_yes"] in (pytest.approx(0.8), pytest.approx(0.3))

    # Every positive has the marker (P(yes) 0.8), no negative does (0.3): perfect agreement.
    (row,) = ej.analyse(rec.records, ["rgb"], [cfg], "test")
    assert row.n == 8 and row.unjudged == 0
    assert row.kappa_native == 1.0 and row.auc == 1.0
    assert row.t_dataset == pytest.approx(0.55) and row.kappa_t_dataset == 1.0
    assert row.t_global == pytest.approx(0.55)
    assert row.qwk is None


async def test_judge_split_and_dataset_restriction(tmp_path: Path) -> None:
    sample = ej.balanced_sample(_pairs({0: 8, 1: 8}), 16, seed=0)
    backend = RuleBackend(_rule)
    only_dl19 = ej.parse_config("baseline_plain.zh.v1@dl19")
    rec = ej.Recorder(tmp_path / "v.jsonl", ej.record_key)
    await ej.judge_sample(backend, sample, [only_dl19], rec)
    assert backend.calls == 0  # the sample is rgb only
    await ej.judge_sample(backend, sample, [ej.parse_config("baseline_plain.zh.v1")], rec, ("tune",))
    assert backend.calls == 8 and {r["split"] for r in rec.records} == {"tune"}


def test_run_order_interleaves_datasets_tune_first() -> None:
    a = [(ej.Pair("rgb", f"r{i}", "q", "q", "t", 0), s) for i, s in enumerate(["tune", "test", "tune"])]
    b = [(ej.Pair("dl19", f"d{i}", "q", "q", "t", 0), s) for i, s in enumerate(["test", "tune"])]
    order = [(p.pair_id, s) for p, s in ej.run_order(a + b)]
    assert order == [("d1", "tune"), ("r0", "tune"), ("r2", "tune"), ("d0", "test"), ("r1", "test")]


def _group_rec(mode: str, verdicts: dict[str, dict[str, object]], **extra: object) -> dict[str, object]:
    return {
        "dataset": "rgb",
        "group_id": "g1",
        "mode": mode,
        "template_hash": "h",
        "verdicts": verdicts,
        **extra,
    }


def test_flip_stats() -> None:
    base = {"a": {"verdict": "yes", "p_yes": 0.9}, "b": {"verdict": "no", "p_yes": 0.4}}
    shuffled = {"a": {"verdict": "yes", "p_yes": 0.9}, "b": {"verdict": "yes", "p_yes": 0.55}}
    records = [
        _group_rec("pointwise-binary-prob:perm0", base),
        _group_rec("pointwise-binary-prob:perm1", shuffled),
    ]
    stats = ej.flip_stats(records, "pointwise-binary-prob", "h")
    assert stats["rgb"]["flips"] == 1 and stats["rgb"]["compared"] == 2
    assert stats["rgb"]["flip_rate"] == 0.5
    assert stats["rgb"]["max_abs_dp_yes"] == pytest.approx(0.15)
    assert ej.flip_stats(records, "listwise", "h") == {}


def test_listwise_stats() -> None:
    human = {"a": 1, "b": 0, "c": 1, "d": 0}
    lw = _group_rec(
        "listwise:perm0",
        {k: {"verdict": v} for k, v in zip("abcd", ["yes", "no", "no", "no"], strict=True)},
        template_hash="L",
        human=human,
        calls=1,
        pointwise=[],
        problems=[],
        prompt_tokens=100,
        completion_tokens=40,
    )
    pw = _group_rec(
        "pointwise-binary-prob:perm0",
        {k: {"verdict": v} for k, v in zip("abcd", ["yes", "no", "yes", "yes"], strict=True)},
        template_hash="P",
        human=human,
        calls=4,
        prompt_tokens=300,
        completion_tokens=4,
    )
    s = ej.listwise_stats([lw, pw], "L", "P", "pointwise-binary-prob")["rgb"]
    assert (s["groups"], s["passages"], s["calls_listwise"], s["calls_pointwise"]) == (1, 4, 1, 4)
    assert s["agree_lw_pw"] == 0.5
    # LW vs human: [y,n,n,n] vs [1,0,1,0]: po 3/4, pe = 1/4*1/2 + 3/4*1/2 = 1/2 -> 0.5.
    assert s["kappa_lw_human"] == pytest.approx(0.5)
    # PW vs human: [y,n,y,y] vs [1,0,1,0]: po 3/4, pe = 3/4*1/2 + 1/4*1/2 = 1/2 -> 0.5.
    assert s["kappa_pw_human"] == pytest.approx(0.5)
    assert (s["tokens_listwise"], s["tokens_pointwise"]) == (140, 304)


def test_datasets_are_read_from_shared_data() -> None:
    if not (ej.DATA / "zh_kuake_qtr" / "KUAKE-QTR_dev.json").is_file():
        pytest.skip("shared data not available")
    kuake = ej.load_dataset("kuake")
    assert len(kuake) == 2913 and {p.grade for p in kuake} == {0, 1, 2, 3}
    dl19 = ej.load_dataset("dl19")
    assert len(dl19) == 9260 and dl19[0].text and dl19[0].query
    rgb = ej.load_dataset("rgb")
    assert {p.grade for p in rgb} == {0, 1}
    assert json.dumps(ej.DATASETS["qbqtc"].grades) == "[0, 1, 2]"


def test_recorded_verdicts_are_greedy_even_for_a_calibrated_template() -> None:
    # binary.zh.v2 ships a calibrated threshold (0.575), but the script's records hold the
    # 0.5 verdict ("κ native"), so records made before and after a calibration agree.
    cfg = ej.parse_config("binary.zh.v2")
    assert resolve_config(cfg.judge_config(), None).decision_threshold == 0.5
    assert load_template("binary.zh.v2").p_yes_threshold == 0.575


async def test_a_table_of_the_test_halves_alone_uses_the_calibrated_threshold(tmp_path: Path) -> None:
    # `--judge-split test` on a shipped template: no tune half to tune on. The table uses the
    # template's calibrated threshold (binary.zh.v2: 0.575), 0.5 for one without (it crashed:
    # IndexError on the empty tune scores).
    sample = ej.balanced_sample(_pairs({0: 8, 1: 8}), 16, seed=0)
    configs = [ej.parse_config("binary.zh.v2"), ej.parse_config("baseline_plain.zh.v1")]
    rec = ej.Recorder(tmp_path / "v.jsonl", ej.record_key)
    await ej.judge_sample(RuleBackend(_rule), sample, configs, rec)
    test_only = [r for r in rec.records if r["split"] == "test"]
    calibrated, plain = ej.analyse(test_only, ["rgb"], configs, "test")
    assert calibrated.t_global == pytest.approx(0.575) and calibrated.t_dataset == pytest.approx(0.575)
    assert calibrated.kappa_t_global == 1.0  # P(yes) 0.8 for every positive, 0.3 for every negative
    assert plain.t_global == pytest.approx(0.5) and plain.kappa_t_global == 1.0
    assert calibrated.n == plain.n == 8
