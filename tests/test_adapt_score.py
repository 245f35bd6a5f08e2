"""``judge score --adapt`` end to end with a fake judge whose P(yes) is written in each passage:
p_adapted beside p_yes, verdicts changed, the summary's adaptation block, the not-applied
path, a labelled pair that never judges itself, and the refusals (exit 2)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from judge.backends import ChatRequest, ResilientBackend, RuleBackend
from judge.batch import RunSpec, run_spec
from judge.cli import main
from judge.judging import PassageVerdict
from judge.metrics import fit_adaptation

MARK = re.compile(r"\[p=([0-9.]+)\]")


def _rule(request: ChatRequest) -> Any:
    text = " ".join(m.content for m in request.messages if isinstance(m.content, str))
    p = float(MARK.findall(text)[-1])
    return {"yes": p, "no": 1.0 - p}


@pytest.fixture()
def fake_judge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    backend = RuleBackend(_rule, name="fake:p", supports_probabilities=True)

    def make(*_a: Any, **kw: Any) -> ResilientBackend:
        return ResilientBackend(backend, policy=kw.get("policy"))

    monkeypatch.setattr("judge.backends.make_backend", make)
    # no encoder here (the tests below that want one give the fake one)
    monkeypatch.setattr("judge.systems._adapt_features.default_encoder", lambda: None)


# Four queries of six passages: (P(yes), relevant, labelled). The judge ranks every query
# right but leans on it: says yes to all of q1 and q2, no to all of q3 and q4 (at 0.5).
LEANING: dict[str, list[tuple[float, int, bool]]] = {
    "q1": [
        (0.95, 1, True),
        (0.93, 1, True),
        (0.8, 0, True),
        (0.78, 0, True),
        (0.94, 1, False),
        (0.79, 0, False),
    ],
    "q2": [
        (0.9, 1, True),
        (0.92, 1, True),
        (0.75, 0, True),
        (0.7, 0, True),
        (0.91, 1, False),
        (0.72, 0, False),
    ],
    "q3": [
        (0.3, 1, True),
        (0.35, 1, True),
        (0.1, 0, True),
        (0.05, 0, True),
        (0.33, 1, False),
        (0.08, 0, False),
    ],
    "q4": [
        (0.4, 1, True),
        (0.45, 1, True),
        (0.2, 0, True),
        (0.15, 0, True),
        (0.42, 1, False),
        (0.18, 0, False),
    ],
}


def _write(
    tmp_path: Path, table: dict[str, list[tuple[float, int, bool]]], flip: str | None = None
) -> tuple[Path, Path]:
    data = tmp_path / "data.jsonl"
    qrels = tmp_path / "labels.qrels"
    lines, labels = [], []
    for qid, rows in table.items():
        docs = [
            {"id": f"{qid}d{i}", "text": f"passage {i} of {qid} [p={p}]"} for i, (p, _, _) in enumerate(rows)
        ]
        lines.append(json.dumps({"id": qid, "query": f"what is {qid}", "retrieval_context": docs}))
        for i, (_, rel, labelled) in enumerate(rows):
            if labelled:
                docno = f"{qid}d{i}"
                labels.append(f"{qid} 0 {docno} {1 - rel if docno == flip else rel}")
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    qrels.write_text("\n".join(labels) + "\n", encoding="utf-8")
    return data, qrels


def _score(tmp_path: Path, data: Path, qrels: Path | None, out: str, *extra: str) -> int:
    args = ["score", str(data), "-o", str(tmp_path / out), "--backend", "fake", "--language", "en"]
    args += ["--probability", "--no-explain", "--p-yes-threshold", "0.5", "--quiet", "--no-recall"]
    if qrels is not None:
        args += ["--labels", str(qrels)]
    return main([*args, *extra])


def _outputs(tmp_path: Path, out: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    records = [json.loads(x) for x in (tmp_path / out).read_text(encoding="utf-8").splitlines()]
    verdicts = {f"{r['id']}d{i}": v for r in records for i, v in enumerate(r["verdicts"])}
    summary = json.loads((tmp_path / out.replace(".jsonl", ".summary.json")).read_text(encoding="utf-8"))
    return verdicts, summary


@pytest.mark.usefixtures("fake_judge")
def test_adapt_decides_the_unlabelled_passages_and_says_so(tmp_path: Path) -> None:
    data, qrels = _write(tmp_path, LEANING)
    assert _score(tmp_path, data, qrels, "plain.jsonl") == 0
    assert _score(tmp_path, data, qrels, "adapted.jsonl", "--adapt") == 0
    plain, plain_summary = _outputs(tmp_path, "plain.jsonl")
    adapted, summary = _outputs(tmp_path, "adapted.jsonl")
    assert "adaptation" not in plain_summary
    block = summary["adaptation"]
    assert block["applied"] is True and block["method"] == "logistic.v2"
    assert block["features"] == ["logit", "centred"]
    assert (block["labels"], block["positives"], block["queries"]) == (16, 8, 4)
    loqo = block["leave_one_query_out"]
    # alone at 0.5 on the 16 labels: yes to q1, q2 (8), no to q3, q4: 8 right of 16, chance
    # 1/2: kappa 0; the centred log-odds put every query's relevant labels above the rest
    assert loqo["alone"]["kappa"] == pytest.approx(0.0, abs=1e-4)
    assert loqo["adapted"]["kappa"] == pytest.approx(1.0)
    assert loqo["alone"]["kappa_ci"] is not None and loqo["gain"]["kappa_ci"] is not None
    lines = sorted(f"{q} {d} {r}\n" for q, rows in LEANING.items() for d, r in _labelled(q, rows))
    assert len(block["labels_sha256"]) == 64 and block["labels_sha256"] == _sha(lines)
    # the unlabelled passages: the judge said yes to q1d5 / q2d5 (not relevant) and no to
    # q3d4 / q4d4 (relevant); adapted, each takes its people's answer
    for docno, judge_said, now in (
        ("q1d5", "yes", "no"),
        ("q2d5", "yes", "no"),
        ("q3d4", "no", "yes"),
        ("q4d4", "no", "yes"),
    ):
        v = adapted[docno]
        assert plain[docno]["verdict"] == judge_said and v["verdict"] == now
        assert v["p_yes"] == plain[docno]["p_yes"]  # the model's P(yes) kept
        assert (v["p_adapted"] >= 0.5) == (now == "yes")
        assert v["adapted"] == {
            "method": "logistic.v2",
            "labels_sha256": block["labels_sha256"],
            "judge_verdict": judge_said,
        }
    # the rule differs from the judge on those 4 and, held out, on the 8 labelled passages the
    # judge has wrong (q1d2, q1d3, q2d2, q2d3 yes; q3d0, q3d1, q4d0, q4d1 no)
    assert _labelled_changes(adapted) == 8 and block["changed"] == 4 + 8
    # labelled passages take their label; what it replaced is the judge's own verdict, P(yes)
    # and reason (never the rule's), and the labels' changes count against the judge's own
    v = adapted["q1d2"]
    assert v["source"] == "human" and v["verdict"] == "no" and v["p_adapted"] < 0.5
    assert v["replaced"] == plain["q1d2"]["replaced"]
    assert v["replaced"]["verdict"] == "yes" and v["replaced"]["p_yes"] == pytest.approx(0.8)
    assert summary["labels"]["changed"] == plain_summary["labels"]["changed"] == 8
    # the figures follow the adapted verdicts: every query [1, 1, 0, 0, 1, 0] (labels, then
    # the adapted d4, d5): AP (1 + 1 + 3/5) / 3 = 0.866667; the judge alone: q1 all yes -> 1
    assert summary["judge"]["map"] == pytest.approx(0.866667)
    assert summary["labels"]["applied"] == 16


# LEANING with every label contradicting the judge (a scale read upside down: 1 where the
# judge says no, 0 where it says yes), on every query.
INVERTED: dict[str, list[tuple[float, int, bool]]] = {
    q: [(p, int(p < 0.5), lab) for p, _, lab in rows] for q, rows in LEANING.items()
}


@pytest.mark.usefixtures("fake_judge")
def test_labels_contradicting_the_judge_everywhere_change_no_verdict_and_say_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, qrels = _write(tmp_path, INVERTED)
    assert _score(tmp_path, data, qrels, "plain.jsonl") == 0
    assert _score(tmp_path, data, qrels, "adapted.jsonl", "--adapt") == 0
    err = capsys.readouterr().err
    plain, _ = _outputs(tmp_path, "plain.jsonl")
    adapted, summary = _outputs(tmp_path, "adapted.jsonl")
    block = summary["adaptation"]
    # the rule agrees with those labels on held-out queries (kappa 1 against the judge's -1) but
    # weighs the judge's log-odds negatively: it would flip every verdict, so it is not applied
    loqo = block["leave_one_query_out"]
    assert loqo["adapted"]["kappa"] > loqo["alone"]["kappa"]
    assert block["weights"]["logit"] < 0
    assert block["applied"] is False and "negatively" in block["reason"]
    assert "inverted scale" in block["warning"]
    assert (block["decided"], block["changed"]) == (0, 0)
    assert "--adapt" in err and "inverted scale" in err
    # no unlabelled verdict changes; every labelled passage still takes its label
    for docno, v in adapted.items():
        if v["source"] == "human":
            assert v["replaced"]["verdict"] == plain[docno]["replaced"]["verdict"]
        else:
            assert v["verdict"] == plain[docno]["verdict"] and "p_adapted" not in v
    assert summary["judge"] == _outputs(tmp_path, "plain.jsonl")[1]["judge"]


def _compare_plain_and_adapted(
    tmp_path: Path, table: dict[str, list[tuple[float, int, bool]]]
) -> tuple[Any, Any]:
    """compare-systems over two copies of ``table``'s run with its labels as qrels: without
    ``--adapt`` (``r0``) and with it (``r1``)."""
    import judge

    data, qrels = _write(tmp_path, table)
    common: dict[str, Any] = {
        "backend": "fake",
        "qrels": qrels,
        "stability_resamples": 0,
        "resamples": 100,
        "config": judge.JudgeConfig(language="en", probability=True, explain=False, p_yes_threshold=0.5),
    }
    plain = judge.compare_systems({"a": data, "b": data}, tmp_path / "r0", **common)
    return plain, judge.compare_systems({"a": data, "b": data}, tmp_path / "r1", adapt=True, **common)


@pytest.mark.usefixtures("fake_judge")
def test_a_comparison_keeps_the_judge_when_the_labels_contradict_it(tmp_path: Path) -> None:
    from judge.io import read_qrels

    plain, adapted = _compare_plain_and_adapted(tmp_path, INVERTED)
    block = adapted.conventions["adaptation"]
    assert block["applied"] is False and "inverted scale" in block["warning"]
    assert any(w.startswith("--adapt:") and "inverted scale" in w for w in adapted.warnings)
    # every pooled pair as without --adapt (the labels on theirs, the judge on the rest)
    assert (
        read_qrels(tmp_path / "r1" / "pool.qrels").to_dict()
        == read_qrels(tmp_path / "r0" / "pool.qrels").to_dict()
    )
    assert not any(w.startswith("--adapt:") for w in plain.warnings)


def _labelled(qid: str, rows: list[tuple[float, int, bool]]) -> list[tuple[str, int]]:
    return [(f"{qid}d{i}", rel) for i, (_, rel, labelled) in enumerate(rows) if labelled]


def _sha(lines: list[str]) -> str:
    import hashlib

    return hashlib.sha256("".join(lines).replace(" ", "\t").encode()).hexdigest()


def _labelled_changes(adapted: dict[str, dict[str, Any]]) -> int:
    """Labelled passages whose held-out rule decision differs from the judge's own verdict."""
    return sum(
        1
        for v in adapted.values()
        if v["source"] == "human" and (v["p_adapted"] >= 0.5) != (v["replaced"]["verdict"] == "yes")
    )


@pytest.mark.usefixtures("fake_judge")
def test_a_labelled_pair_never_enters_its_own_prediction(tmp_path: Path) -> None:
    data, qrels = _write(tmp_path, LEANING)
    assert _score(tmp_path, data, qrels, "a.jsonl", "--adapt") == 0
    first, _ = _outputs(tmp_path, "a.jsonl")
    data, qrels = _write(tmp_path, LEANING, flip="q2d0")  # its own label flipped
    assert _score(tmp_path, data, qrels, "b.jsonl", "--adapt") == 0
    second, summary = _outputs(tmp_path, "b.jsonl")
    assert second["q2d0"]["p_adapted"] == pytest.approx(first["q2d0"]["p_adapted"])
    assert second["q2d0"]["verdict"] == "no"  # the (flipped) label still decides the passage
    # ... while the rule the other queries' passages get did learn from it
    assert second["q1d0"]["p_adapted"] != pytest.approx(first["q1d0"]["p_adapted"])
    before = _outputs(tmp_path, "a.jsonl")[1]["adaptation"]["labels_sha256"]
    assert summary["adaptation"]["labels_sha256"] != before and "relearned" not in summary["adaptation"]
    # resuming the first output with the new labels re-decides it, and says so
    assert _score(tmp_path, data, qrels, "a.jsonl", "--adapt") == 0
    again, block = _outputs(tmp_path, "a.jsonl")
    assert block["adaptation"]["relearned_from"] == [before]
    assert "decided again" in block["adaptation"]["relearned"]
    assert again["q1d0"]["p_adapted"] == pytest.approx(second["q1d0"]["p_adapted"])


@pytest.mark.usefixtures("fake_judge")
def test_not_applied_keeps_the_judge_and_says_why(tmp_path: Path) -> None:
    right = {q: [(0.9 if rel else 0.1, rel, lab) for _, rel, lab in rows] for q, rows in LEANING.items()}
    data, qrels = _write(tmp_path, right)
    assert _score(tmp_path, data, qrels, "out.jsonl", "--adapt") == 0
    verdicts, summary = _outputs(tmp_path, "out.jsonl")
    block = summary["adaptation"]
    assert block["applied"] is False and "not above the judge alone's" in block["reason"]
    assert block["leave_one_query_out"]["alone"]["kappa"] == pytest.approx(1.0)
    assert block["changed"] == 0 and block["decided"] == 0
    # a verdict the rule did not decide carries neither field (outputs as without --adapt)
    assert all("p_adapted" not in v and "adapted" not in v for v in verdicts.values())
    assert verdicts["q1d4"]["verdict"] == "yes" and verdicts["q1d5"]["verdict"] == "no"


@pytest.mark.usefixtures("fake_judge")
def test_too_few_labels_keep_the_judge(tmp_path: Path) -> None:
    few = {q: [(p, rel, lab and q == "q1") for p, rel, lab in rows] for q, rows in LEANING.items()}
    data, qrels = _write(tmp_path, few)
    assert _score(tmp_path, data, qrels, "out.jsonl", "--adapt") == 0
    _, summary = _outputs(tmp_path, "out.jsonl")
    assert summary["adaptation"]["applied"] is False
    assert "4 labelled pairs" in summary["adaptation"]["reason"]


@pytest.mark.usefixtures("fake_judge")
@pytest.mark.parametrize(
    ("extra", "labels", "message"),
    [
        ((), False, "needs the run's labels"),
        (("--examples", "2"), True, "cannot be used with --examples"),
        (("--mode", "graded", "--labels-yes-grade", "2"), True, "binary verdicts only"),
        (("--no-probability",), True, "P(yes)"),
    ],
)
def test_refusals_exit_2_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], labels: bool, message: str
) -> None:
    data, qrels = _write(tmp_path, LEANING)
    assert _score(tmp_path, data, qrels if labels else None, "out.jsonl", "--adapt", *extra) == 2
    err = capsys.readouterr().err
    assert "--adapt" in err and message in err
    assert not (tmp_path / "out.jsonl").exists()


def test_run_spec_carries_adapt() -> None:
    assert RunSpec().adapt is False
    assert run_spec(adapt=True).adapt is True
    from judge.backends import ConfigError

    with pytest.raises(ConfigError, match="adapt"):
        RunSpec(adapt="yes")  # type: ignore[arg-type]


def test_rerunning_adapt_is_idempotent() -> None:
    # adapt_records undoes an earlier adaptation before deciding again
    from judge.batch import adapt_records, build_record, model_verdict_of
    from judge.io import DatasetRecord
    from judge.io._jsonl import DatasetPassage
    from judge.judging import JudgeConfig, summarize
    from judge.store import Label, LabelSet

    records, labels = [], []
    for qid, rows in LEANING.items():
        verdicts = [
            PassageVerdict(
                index=i,
                passage_id=f"{qid}d{i}",
                verdict="yes" if p >= 0.5 else "no",
                p_yes=p,
                template_id="t",
                template_hash="h",
                backend="fake",
            )
            for i, (p, _, _) in enumerate(rows)
        ]
        passages = tuple(DatasetPassage(text="x", id=f"{qid}d{i}") for i in range(len(rows)))
        rec = DatasetRecord(id=qid, query=f"q {qid}", passages=passages, line=1)
        result = summarize(rec.query, verdicts, JudgeConfig(probability=True), "fake", k=(5, 10))
        records.append(build_record(rec, result, (5, 10)) | {"conventions": {"p_yes_threshold": 0.5}})
        labels += [Label(qid, d, r, "ann") for d, r in _labelled(qid, rows)]
    once, block = adapt_records(records, LabelSet(labels), resamples=50)
    twice, again = adapt_records(once, LabelSet(labels), resamples=50)
    assert once == twice and block == again
    assert block["applied"]
    v = PassageVerdict.model_validate(once[0]["verdicts"][5])
    assert v.verdict == "no" and model_verdict_of(v).verdict == "yes"
    # the same values as the pure function on the same inputs
    flat = [(q, p, rel if lab else None) for q, rows in LEANING.items() for p, rel, lab in rows]
    fit = fit_adaptation(
        [p for _, p, _ in flat], [q for q, _, _ in flat], [y for _, _, y in flat], 0.5, resamples=50
    )
    assert v.p_adapted == pytest.approx(fit.p_adapted[5], abs=1e-6)


Check = Callable[..., Any]


@pytest.mark.usefixtures("fake_judge")
def test_compare_systems_adapt_learns_from_the_pools_labels(tmp_path: Path) -> None:
    from judge.io import read_qrels

    plain, adapted = _compare_plain_and_adapted(tmp_path, LEANING)
    assert plain.conventions["adaptation"] is None
    block = adapted.conventions["adaptation"]
    assert block["applied"] is True and (block["labels"], block["queries"]) == (16, 4)
    # the 16 labelled pooled pairs are judged too under --adapt (8 without)
    assert (plain.pool.judged, adapted.pool.judged) == (8, 24)
    before = read_qrels(tmp_path / "r0" / "pool.qrels").to_dict()
    after = read_qrels(tmp_path / "r1" / "pool.qrels").to_dict()
    # the unlabelled pairs the judge had wrong now take the rule's (right) answer; labels stay
    assert (before["q1"]["q1d5"], after["q1"]["q1d5"]) == (1, 0)
    assert (before["q3"]["q3d4"], after["q3"]["q3d4"]) == (0, 1)
    assert after["q1"]["q1d2"] == before["q1"]["q1d2"] == 0


@pytest.mark.usefixtures("fake_judge")
def test_a_comparison_adapts_on_the_log_odds_only_and_says_what_was_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The encoder's columns lowered the order of configurations on DL 2019 (docs/agreement.md):
    a comparison's rule never reads them, even with the encoder installed, and the report's
    block and the command's warning give the measured order."""
    from _fake_encoder import FakeEncoder

    from judge.systems import ADAPT_ORDER_NOTE

    monkeypatch.setattr("judge.systems._adapt_features.default_encoder", FakeEncoder)
    data, qrels = _write(tmp_path, LEANING)
    out = tmp_path / "r"
    args = ["compare-systems", f"a={data}", f"b={data}", "-o", str(out), "--backend", "fake"]
    args += ["--language", "en", "--probability", "--no-explain", "--p-yes-threshold", "0.5"]
    assert main([*args, "--qrels", str(qrels), "--adapt", "--stability-resamples", "0"]) == 0
    assert f"judge: warning: {ADAPT_ORDER_NOTE}" in capsys.readouterr().err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    block = report["conventions"]["adaptation"]
    assert block["features"] == ["logit", "centred"] and block["order"] == ADAPT_ORDER_NOTE
    assert "0.67 -> 0.63 on TREC DL 2019" in ADAPT_ORDER_NOTE  # the figures docs/agreement.md gives


@pytest.mark.usefixtures("fake_judge")
def test_compare_systems_adapt_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, qrels = _write(tmp_path, LEANING)
    args = ["compare-systems", f"a={data}", f"b={data}", "-o", str(tmp_path / "r"), "--backend", "fake"]
    assert main([*args, "--adapt"]) == 2
    assert "--adapt" in capsys.readouterr().err
    assert main([*args, "--adapt", "--qrels", str(qrels), "--until-decided"]) == 2
    assert "--until-decided" in capsys.readouterr().err
    assert not (tmp_path / "r" / "pool.judged.jsonl").exists()


def test_a_search_nightly_config_takes_adapt(tmp_path: Path) -> None:
    from judge.io import InputError
    from judge.systems import load_search_nightly

    cfg = tmp_path / "n.toml"
    cfg.write_text('[search]\nqueries = "q.jsonl"\nconfig = "c.toml"\nqrels = "l.qrels"\nadapt = true\n')
    assert load_search_nightly(cfg).adapt is True
    cfg.write_text('[search]\nqueries = "q.jsonl"\nconfig = "c.toml"\nadapt = 1\n')
    with pytest.raises(InputError) as err:
        load_search_nightly(cfg)
    assert err.value.field == "search.adapt"


@pytest.mark.usefixtures("fake_judge")
def test_the_encoders_features_decide_where_the_judge_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from _fake_encoder import FakeEncoder

    monkeypatch.setattr("judge.systems._adapt_features.default_encoder", FakeEncoder)
    # the judge ranks every query right (relevant 0.05 above the rest) but leans: yes to all of
    # q0 and q1, no to all of q2 and q3; the relevant passages share their words (apple
    # orchard), the others theirs (tax form), which the encoder's feedback reads
    data = tmp_path / "data.jsonl"
    qrels = tmp_path / "labels.qrels"
    lines, labels = [], []
    lean = [0.7, 0.8, 0.2, 0.3]
    for q in range(4):
        docs = []
        for i in range(6):
            rel = i % 2 == 0
            words = "apple orchard apple harvest" if rel else "tax form filing deadline"
            p = lean[q] + (0.05 if rel else 0.0) + 0.01 * (i // 2)
            docs.append({"id": f"d{i}", "text": f"{words} {q} [p={p:.2f}]"})
            if i < 4:
                labels.append(f"q{q} 0 d{i} {int(rel)}")
        lines.append(json.dumps({"id": f"q{q}", "query": f"question {q}", "retrieval_context": docs}))
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    qrels.write_text("\n".join(labels) + "\n", encoding="utf-8")
    assert _score(tmp_path, data, qrels, "out.jsonl", "--adapt") == 0
    verdicts, summary = _outputs(tmp_path, "out.jsonl")
    block = summary["adaptation"]
    # one rule over every column (logistic.v2: no choice among feature sets)
    assert block["features"] == ["logit", "centred", "similarity", "feedback"] and block["applied"]
    assert "candidates" not in block
    assert block["weights"]["feedback"] > 0
    assert block["leave_one_query_out"]["adapted"]["kappa"] == pytest.approx(1.0)
    # the unlabelled d4 (relevant) and d5 (not) of every query decided by their words
    for q in range(4):
        assert verdicts[f"q{q}d4"]["verdict"] == "yes" and verdicts[f"q{q}d5"]["verdict"] == "no"


def test_encoder_feedback_by_hand() -> None:
    from _fake_encoder import FakeEncoder

    from judge.batch import AdaptPair
    from judge.systems import encoder_features

    enc = FakeEncoder()
    texts = {("q", "a"): "apple", ("q", "b"): "tax", ("q", "c"): "apple pie", ("r", "x"): "alone"}
    pairs = [
        AdaptPair("q", "a", None, 0.5, 1),
        AdaptPair("q", "b", None, 0.5, 0),
        AdaptPair("q", "c", None, 0.5, None),
        AdaptPair("r", "x", None, 0.5, 1),  # a query without both kinds: 0
    ]
    got = encoder_features(texts, enc)(pairs)
    v = enc.passages(["apple", "tax", "apple pie"]).astype(float)
    # c: cos(c, a) - cos(c, b); a and b have no other label of the other kind: 0
    assert got["feedback"] == pytest.approx([0.0, 0.0, float(v[2] @ v[0] - v[2] @ v[1]), 0.0])
    # no query text (and fewer than 4 passages): no similarity
    assert got["similarity"] == [0.0] * 4


def test_encoder_similarity_is_centred_on_its_query_by_hand() -> None:
    from _fake_encoder import FakeEncoder

    from judge.batch import AdaptPair
    from judge.systems import encoder_features

    enc = FakeEncoder()
    docs = ["apple pie recipe", "apple tart", "tax form", "car repair"]
    texts = {("q", f"d{i}"): t for i, t in enumerate(docs)} | {("r", "x"): "alone"}
    pairs = [AdaptPair("q", f"d{i}", "apple pie", 0.5, None) for i in range(4)]
    pairs.append(AdaptPair("r", "x", "alone", 0.5, None))  # one passage: no mean (0)
    got = encoder_features(texts, enc)(pairs)
    cos = enc.passages(docs).astype(float) @ enc.queries(["apple pie"])[0].astype(float)
    assert got["similarity"] == pytest.approx([*(cos - cos.mean()), 0.0])
    assert got["similarity"][0] > got["similarity"][3]  # the apple pie recipe is nearest
    assert got["feedback"] == [0.0] * 5  # no labels: no feedback
