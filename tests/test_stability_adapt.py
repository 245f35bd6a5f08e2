"""``judge stability --adapt``: every run decided by the rule the same labels teach.

A fake judge reads each passage's P(yes) per run from its text (``[p=run0,run1,...]``; one
call at a time, so the runs go one after the other and the n-th ask of a passage is run
n). Checked: each run's verdicts are the ones :func:`judge.batch.adapt_records` gives on
that run's records; one labels_sha256 in every run and in the report (worked by hand); the
figures follow the adapted verdicts (worked by hand); a run where the rule does not help
keeps the judge's verdicts and the report says why, and that the runs disagree; the
refusals (exit 2 naming ``--adapt``, no call made); and nothing changes without ``--adapt``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from judge.backends import ChatRequest, ResilientBackend, ScriptedBackend, TransientError
from judge.batch import RunSpec, adapt_records, build_record
from judge.cli import main
from judge.io import InputError
from judge.judging import JudgeConfig
from judge.stability import (
    StabilityOptions,
    StabilityReport,
    load_records,
    render_markdown,
    run_stability_sync,
    summary_lines,
)
from judge.store import LabelSet, read_label_file

MARK = re.compile(r"\[p=([0-9.,x]+)\]")

# qid -> [(P(yes), or "x": unjudged in that run; relevant; labelled)]
Table = dict[str, list[tuple[float | str, int, bool]]]

# Four queries of six passages, labels on d0-d3 (2 relevant, 2 not). The judge ranks every
# query right but leans: yes to all of q1 and q2, no to all of q3 and q4 (at 0.5).
LEANING: Table = {
    "q1": [(0.95, 1, True), (0.93, 1, True), (0.8, 0, True), (0.78, 0, True),
           (0.94, 1, False), (0.79, 0, False)],
    "q2": [(0.9, 1, True), (0.92, 1, True), (0.75, 0, True), (0.7, 0, True),
           (0.91, 1, False), (0.72, 0, False)],
    "q3": [(0.3, 1, True), (0.35, 1, True), (0.1, 0, True), (0.05, 0, True),
           (0.33, 1, False), (0.08, 0, False)],
    "q4": [(0.4, 1, True), (0.45, 1, True), (0.2, 0, True), (0.15, 0, True),
           (0.42, 1, False), (0.18, 0, False)],
}  # fmt: skip
# The same lean in a second run, but the judge now says yes to q3d4 (0.55, relevant) and
# its q1d5 is lower (0.6, still yes): the judge alone's mAP moves, the adapted one does not.
CHANGED = {("q3", 4): 0.55, ("q1", 5): 0.6}
LEANING_AGAIN: Table = {
    q: [(CHANGED.get((q, i), p), r, lab) for i, (p, r, lab) in enumerate(rows)] for q, rows in LEANING.items()
}
# A run where the judge alone is right on every passage at 0.5: no rule can beat it.
RIGHT: Table = {q: [(0.8 if r else 0.2, r, lab) for (_p, r, lab) in rows] for q, rows in LEANING.items()}


class PerRun:
    """P(yes) of a passage's n-th ask (run n, the runs going one after the other); ``x``:
    the provider fails (the passage is unjudged in that run)."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()

    def __call__(self, request: ChatRequest, _index: int) -> Any:
        text = " ".join(m.content for m in request.messages if isinstance(m.content, str))
        values = MARK.findall(text)[-1].split(",")
        n = self.asked[text]
        self.asked[text] += 1
        if values[n % len(values)] == "x":
            return TransientError("the provider is down")
        p = float(values[n % len(values)])
        return {"yes": p, "no": 1.0 - p}


def _backend(**kw: Any) -> ScriptedBackend:
    return ScriptedBackend(PerRun(), name="fake:p", max_concurrency=1, **kw)


def _write(tmp_path: Path, runs: Sequence[Table]) -> tuple[Path, Path]:
    data, qrels = tmp_path / "data.jsonl", tmp_path / "labels.qrels"
    lines, labels = [], []
    for qid, rows in runs[0].items():
        docs = []
        for i, (_p, rel, labelled) in enumerate(rows):
            ps = ",".join(str(t[qid][i][0]) for t in runs)
            docs.append({"id": f"{qid}d{i}", "text": f"passage {i} of {qid} [p={ps}]"})
            if labelled:
                labels.append(f"{qid} 0 {qid}d{i} {rel}")
        lines.append(json.dumps({"id": qid, "query": f"what is {qid}", "retrieval_context": docs}))
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    qrels.write_text("\n".join(labels) + "\n", encoding="utf-8")
    return data, qrels


def _labels(qrels: Path) -> LabelSet:
    return LabelSet(read_label_file(qrels, reviewer="qrels"), source=f"labels file {qrels}")


CONFIG = JudgeConfig(probability=True, p_yes_threshold=0.5, language="en")


def _run(tmp_path: Path, runs: Sequence[Table], *, adapt: bool, out: str) -> StabilityReport:
    data, qrels = _write(tmp_path, runs)
    return run_stability_sync(
        _backend(),
        load_records(data),
        RunSpec(config=CONFIG, adapt=adapt),
        StabilityOptions(runs=len(runs), labels=_labels(qrels)),
        runs_dir=tmp_path / out,
    )


def _hand_sha(table: Table) -> str:
    lines = sorted(
        f"{q}\t{q}d{i}\t{r}\n" for q, rows in table.items() for i, (_, r, lab) in enumerate(rows) if lab
    )
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def _run_file(path: Path) -> dict[str, dict[str, Any]]:
    """docno -> verdict of a run file."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        for i, v in enumerate(rec["verdicts"]):
            out[f"{rec['id']}d{i}"] = v
    return out


def test_each_run_is_decided_as_adapt_records_decides_it(tmp_path: Path) -> None:
    runs = [LEANING, LEANING_AGAIN]
    plain = _run(tmp_path, runs, adapt=False, out="plain")
    adapted = _run(tmp_path, runs, adapt=True, out="adapted")
    data, qrels = _write(tmp_path, runs)
    records, labels = load_records(data), _labels(qrels)
    for run, blocks_row in zip(plain.runs, adapted.data["adaptation"]["runs"], strict=True):
        # adapt_records on the judge's own records of the same run (the plain run's)
        lines = [build_record(rec, res, (5, 10)) for rec, res in zip(records, run.results, strict=True)]
        expected, block = adapt_records(lines, labels)
        assert block["applied"] and blocks_row["applied"]
        assert blocks_row["kappa_alone"] == block["leave_one_query_out"]["alone"]["kappa"]
        assert blocks_row["kappa_adapted"] == block["leave_one_query_out"]["adapted"]["kappa"]
        assert (blocks_row["decided"], blocks_row["changed"]) == (block["decided"], block["changed"])
        got = _run_file(tmp_path / "adapted" / f"run-{run.index}.jsonl")
        for line in expected:
            for i, want in enumerate(line["verdicts"]):
                v = got[f"{line['id']}d{i}"]
                # a labelled passage keeps its label; what it replaced is the judge's own verdict
                # (never the rule's), an unlabelled one is the rule's
                human = v["source"] == "human"
                judge_side = v["replaced"] if human else v
                own = want["adapted"]["judge_verdict"] if human and want.get("adapted") else want["verdict"]
                assert judge_side["verdict"] == own
                assert v["p_adapted"] == pytest.approx(want["p_adapted"])
                assert v["adapted"] == want["adapted"] and judge_side["p_yes"] == want["p_yes"]
    # by hand: the rule decides every query [1, 1, 0, 0, 1, 0] (labels, then d4 yes, d5 no)
    # in both runs: AP (1 + 1 + 3/5) / 3 = 0.866667 each, no spread
    assert adapted.data["figures"]["map"]["values"] == pytest.approx([0.866667, 0.866667], abs=1e-6)
    assert adapted.passed and adapted.data["check"]["relative_spread"] == 0.0
    # the judge alone: run 0 q1, q2 [1,1,0,0,1,1] AP (1+1+3/5+4/6)/4 = 0.816667, q3, q4 [1,1,0,0,0,0]
    # AP 1: mAP 0.908333; run 1 q3 [1,1,0,0,1,0] 0.866667: mAP 0.875; a 3.74% spread
    assert plain.data["figures"]["map"]["values"] == pytest.approx([0.908333, 0.875], abs=1e-6)
    assert not plain.passed
    # the flips the judge made (q3d4) are gone once the rule decides
    assert plain.data["agreement"]["unstable_passages"] == 1
    assert adapted.data["agreement"]["unstable_passages"] == 0


def test_one_labels_hash_in_every_run_and_the_report(tmp_path: Path) -> None:
    report = _run(tmp_path, [LEANING, LEANING_AGAIN, LEANING], adapt=True, out="runs")
    section = report.data["adaptation"]
    digest = _hand_sha(LEANING)
    assert section["labels_sha256"] == digest and section["same_labels_in_every_run"]
    assert [r["labels_sha256"] for r in section["runs"]] == [digest] * 3
    for i in range(3):
        verdicts = _run_file(tmp_path / "runs" / f"run-{i}.jsonl").values()
        assert {v["adapted"]["labels_sha256"] for v in verdicts} == {digest}
    assert section["applied"] == "every run" and section["applied_runs"] == [0, 1, 2]
    assert section["runs_agree"] is True
    assert report.data["settings"]["adapt"] is True
    assert (section["runs"][0]["labels"], section["runs"][0]["queries"]) == (16, 4)
    md = render_markdown(report)
    assert "## Adapted decision (--adapt)" in md and f"**{digest}** in every run" in md
    assert "**The rule was applied in every run" in md
    assert f"  --adapt (labels sha256 {digest[:12]}): the rule was applied in every run" in "\n".join(
        summary_lines(report)
    )


def test_a_run_the_rule_does_not_help_keeps_the_judges_verdicts_and_says_why(tmp_path: Path) -> None:
    report = _run(tmp_path, [LEANING, RIGHT], adapt=True, out="runs")
    section = report.data["adaptation"]
    kept = section["runs"][1]
    # the judge alone is right on all 16 labels: kappa 1, which no rule can beat
    assert kept["applied"] is False and kept["kappa_alone"] == pytest.approx(1.0)
    assert kept["reason"].startswith("not applied: leave-one-query-out kappa adapted")
    assert (kept["decided"], kept["changed"]) == (0, 0)
    assert section["applied_runs"] == [0] and section["applied"] == "some runs"
    assert section["runs_agree"] is False
    disagree = "the runs disagree: the rule was applied in run 0 and not in run 1"
    assert section["statement"].startswith(disagree)
    assert kept["reason"] in section["statement"]
    # run 1: the judge's verdicts at 0.5, nothing adapted; labelled passages still take their label
    run1 = _run_file(tmp_path / "runs" / "run-1.jsonl")
    for q, rows in RIGHT.items():
        for i, (p, _rel, labelled) in enumerate(rows):
            v = run1[f"{q}d{i}"]
            judge_side = v["replaced"] if labelled else v
            assert judge_side["verdict"] == ("yes" if float(p) >= 0.5 else "no")
            assert "p_adapted" not in v and "adapted" not in v
            assert v["source"] == ("human" if labelled else "judge")
    # both runs end at [1, 1, 0, 0, 1, 0] per query: the rule in run 0, the judge in run 1
    assert report.data["figures"]["map"]["values"] == pytest.approx([0.866667, 0.866667], abs=1e-6)
    md = render_markdown(report)
    assert "**The runs disagree: the rule was applied in run 0 and not in run 1" in md
    assert "| 1 | no | 1.000 |" in md


def test_the_rule_applied_in_no_run_leaves_every_verdict_as_without_adapt(tmp_path: Path) -> None:
    runs = [RIGHT, RIGHT]
    plain = _run(tmp_path, runs, adapt=False, out="plain")
    adapted = _run(tmp_path, runs, adapt=True, out="adapted")
    assert adapted.data["adaptation"]["applied"] == "no run"
    assert adapted.data["adaptation"]["statement"].startswith(
        "the rule was applied in no run: every run kept the judge's verdicts (run 0: not applied"
    )
    for key in ("figures", "agreement", "unstable_passages", "check"):
        assert adapted.data[key] == plain.data[key]
    for i in range(2):  # every verdict as the judge gave it (the latency aside)
        a = _run_file(tmp_path / "adapted" / f"run-{i}.jsonl")
        b = _run_file(tmp_path / "plain" / f"run-{i}.jsonl")
        assert a.keys() == b.keys()
        for docno, v in a.items():
            assert v | {"latency_s": 0} == b[docno] | {"latency_s": 0}


def test_without_adapt_the_report_is_as_before(tmp_path: Path) -> None:
    report = _run(tmp_path, [LEANING, LEANING_AGAIN], adapt=False, out="runs")
    d = report.data
    # the keys the report had before --adapt existed (report.json schema judge.stability/1)
    assert set(d) == {
        "schema", "created", "dataset", "backend", "judge_config", "settings", "conventions", "check",
        "runs", "figures", "agreement", "noise", "query_ranges", "unstable_queries", "unstable_passages",
        "backend_fingerprint", "borderline", "human_labels",
    }  # fmt: skip
    assert set(d["settings"]) == {
        "runs", "threshold", "metric", "k", "concurrency", "parallel_runs", "confidence",
        "bootstrap_resamples", "bootstrap_seed", "top",
    }  # fmt: skip
    assert d["human_labels"] == {
        "source": f"labels file {tmp_path / 'labels.qrels'}",
        "passages": 16,
        "mapping": {"binary": d["human_labels"]["mapping"]["binary"]},
        "convention": "a labelled passage has its human label in every run (it cannot flip)",
    }
    for i in range(2):
        for v in _run_file(tmp_path / "runs" / f"run-{i}.jsonl").values():
            assert "p_adapted" not in v and "adapted" not in v
    md = render_markdown(report)
    assert "Adapted decision" not in md and "--adapt" not in "\n".join(summary_lines(report))


def test_runs_that_learned_from_different_labelled_pairs_are_said_to(tmp_path: Path) -> None:
    # run 1: the labelled q1d0 is unjudged, so its rule learned from 15 labels, not 16
    gap: Table = {q: [("x" if (q, i) == ("q1", 0) else p, r, lab) for i, (p, r, lab) in enumerate(rows)]
                  for q, rows in LEANING.items()}  # fmt: skip
    report = _run(tmp_path, [LEANING, gap], adapt=True, out="runs")
    section = report.data["adaptation"]
    assert section["labels_sha256"] is None and section["same_labels_in_every_run"] is False
    assert [r["labels"] for r in section["runs"]] == [16, 15]
    first, second = (r["labels_sha256"] for r in section["runs"])
    assert first == _hand_sha(LEANING)
    lines = sorted(
        f"{q}\t{q}d{i}\t{r}\n" for q, rows in LEANING.items() for i, (_, r, lab) in enumerate(rows)
        if lab and (q, i) != ("q1", 0)
    )  # fmt: skip
    assert second == hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
    assert "different labelled pairs" in section["labels_note"]
    assert "**differs between runs**" in render_markdown(report)
    assert "--adapt (the runs learned from different labels)" in "\n".join(summary_lines(report))


# ---- refusals (before any call) --------------------------------------------------------------


def test_the_api_refuses_adapt_where_it_cannot_learn_before_any_call(tmp_path: Path) -> None:
    data, qrels = _write(tmp_path, [LEANING])
    records, labels = load_records(data), _labels(qrels)
    cases: list[tuple[ScriptedBackend, JudgeConfig, LabelSet | None, str]] = [
        (_backend(), CONFIG, None, "needs the run's labels"),
        (_backend(), JudgeConfig(mode="graded", probability=True), labels, "binary verdicts only"),
        (_backend(), JudgeConfig(probability=False), labels, "P(yes)"),
        (_backend(supports_probabilities=False), JudgeConfig(), labels, "P(yes)"),
    ]
    for backend, config, given, words in cases:
        with pytest.raises(InputError) as err:
            run_stability_sync(
                backend, records, RunSpec(config=config, adapt=True), StabilityOptions(runs=2, labels=given)
            )
        assert err.value.field == "--adapt" and words in err.value.message
        assert backend.calls == 0
    backend = _backend()
    with pytest.raises(InputError) as err:
        run_stability_sync(
            backend, records, CONFIG, StabilityOptions(runs=2, labels=labels, adapt_features=lambda _p: {})
        )
    assert err.value.field == "adapt_features" and backend.calls == 0


@pytest.fixture()
def fake_open(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[ScriptedBackend]:
    """``make_backend`` gives a fresh per-run judge; every one made is listed (to count calls)."""
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    made: list[ScriptedBackend] = []

    def make(*_a: Any, **kw: Any) -> ResilientBackend:
        made.append(_backend())
        return ResilientBackend(made[-1], policy=kw.get("policy"))

    monkeypatch.setattr("judge.backends.make_backend", make)
    monkeypatch.setattr("judge.systems._adapt_features.default_encoder", lambda: None)
    return made


def _stability(data: Path, out: Path, *extra: str) -> int:
    args = ["stability", str(data), "--runs", "2", "-o", str(out), "--backend", "fake", "--language", "en"]
    args += ["--probability", "--no-explain", "--p-yes-threshold", "0.5"]
    return main([*args, *extra])


def test_cli_refuses_adapt_with_exit_2_before_any_call(
    tmp_path: Path, fake_open: list[ScriptedBackend], capsys: pytest.CaptureFixture[str]
) -> None:
    data, qrels = _write(tmp_path, [LEANING, LEANING_AGAIN])
    out = tmp_path / "r"
    cases = [
        ((), "needs the run's labels"),
        (("--labels", str(qrels), "--mode", "graded"), "binary verdicts only"),
        (("--labels", str(qrels), "--compare-settings"), "cannot be used with --compare-settings"),
    ]
    for extra, words in cases:
        assert _stability(data, out, "--adapt", *extra) == 2
        err = capsys.readouterr().err
        assert "--adapt" in err and words in err
    assert sum(b.calls for b in fake_open) == 0 and not out.exists()


def test_cli_adapt_end_to_end(
    tmp_path: Path, fake_open: list[ScriptedBackend], capsys: pytest.CaptureFixture[str]
) -> None:
    data, qrels = _write(tmp_path, [LEANING, LEANING_AGAIN])
    out = tmp_path / "r"
    assert _stability(data, out, "--labels", str(qrels), "--adapt") == 0
    captured = capsys.readouterr()
    digest = _hand_sha(LEANING)
    assert captured.out.startswith("PASS: mAP relative spread 0.00% over 2 runs")
    assert f"--adapt (labels sha256 {digest[:12]}): the rule was applied in every run" in captured.out
    assert "without the encoder's features" in captured.err
    d = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert d["adaptation"]["labels_sha256"] == digest and d["settings"]["adapt"] is True
    assert d["figures"]["map"]["values"] == pytest.approx([0.866667, 0.866667], abs=1e-6)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert f"`labels_sha256` **{digest}** in every run" in md
    # the same command without --adapt: the judge alone's figures, a breach (exit 1)
    assert _stability(data, tmp_path / "plain", "--labels", str(qrels)) == 1
    plain = json.loads((tmp_path / "plain" / "report.json").read_text(encoding="utf-8"))
    assert "adaptation" not in plain and "adapt" not in plain["settings"]
    assert plain["figures"]["map"]["values"] == pytest.approx([0.908333, 0.875], abs=1e-6)


def test_cli_hands_the_encoders_features_to_every_runs_rule(
    tmp_path: Path, fake_open: list[ScriptedBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    from _fake_encoder import FakeEncoder

    monkeypatch.setattr("judge.systems._adapt_features.default_encoder", FakeEncoder)
    # the judge ranks every query right (relevant 0.05 above the rest) but leans, another way
    # in run 1; the relevant passages share their words, the others theirs (the feedback)
    leans = [[0.7, 0.8, 0.2, 0.3], [0.25, 0.75, 0.3, 0.65]]
    tables: list[Table] = [
        {
            f"q{q}": [
                (round(lean[q] + 0.05 * (i % 2 == 0) + 0.01 * (i // 2), 2), int(i % 2 == 0), i < 4)
                for i in range(6)
            ]
            for q in range(4)
        }
        for lean in leans
    ]
    data, qrels = _write(tmp_path, tables)
    lines = []
    for line in data.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for i, doc in enumerate(row["retrieval_context"]):
            words = "apple orchard apple harvest" if i % 2 == 0 else "tax form filing deadline"
            doc["text"] = f"{words} {doc['text']}"
        lines.append(json.dumps(row))
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _stability(data, tmp_path / "r", "--labels", str(qrels), "--adapt", "--quiet") == 0
    d = json.loads((tmp_path / "r" / "report.json").read_text(encoding="utf-8"))
    for row in d["adaptation"]["runs"]:
        assert row["applied"] and row["features"] == ["logit", "centred", "similarity", "feedback"]
    for i in range(2):
        got = _run_file(tmp_path / "r" / "runs" / f"run-{i}.jsonl")
        for q in range(4):
            assert got[f"q{q}d4"]["verdict"] == "yes" and got[f"q{q}d5"]["verdict"] == "no"


def test_cli_labels_contradicting_the_judge_change_no_run_and_say_why(
    tmp_path: Path, fake_open: list[ScriptedBackend], capsys: pytest.CaptureFixture[str]
) -> None:
    # every label contradicts the judge (1 where it says no, 0 where it says yes): the rule
    # weighs its log-odds negatively and is applied in no run; stderr and the report say why
    inverted: list[Table] = [
        {q: [(p, int(float(p) < 0.5), lab) for p, _r, lab in rows] for q, rows in t.items()}
        for t in (LEANING, LEANING_AGAIN)
    ]
    data, qrels = _write(tmp_path, inverted)
    assert _stability(data, tmp_path / "plain", "--labels", str(qrels), "--quiet") in (0, 1)
    capsys.readouterr()
    assert _stability(data, tmp_path / "r", "--labels", str(qrels), "--adapt", "--quiet") in (0, 1)
    err = capsys.readouterr().err
    d = json.loads((tmp_path / "r" / "report.json").read_text(encoding="utf-8"))
    assert d["adaptation"]["applied"] == "no run"
    for row in d["adaptation"]["runs"]:
        assert "negatively" in row["reason"] and "inverted scale" in row["warning"]
        assert f"--adapt, run {row['run']}" in err
    assert "inverted scale" in err
    plain = json.loads((tmp_path / "plain" / "report.json").read_text(encoding="utf-8"))
    assert d["figures"] == plain["figures"]
    for i in range(2):  # every verdict as the judge gave it (the latency aside)
        a = _run_file(tmp_path / "r" / "runs" / f"run-{i}.jsonl")
        b = _run_file(tmp_path / "plain" / "runs" / f"run-{i}.jsonl")
        for docno, v in a.items():
            assert v | {"latency_s": 0} == b[docno] | {"latency_s": 0}
