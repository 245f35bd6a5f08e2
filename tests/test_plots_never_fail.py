"""A plot never fails a run: error bars are clipped at 0 (an interval of equal values lies a
rounding error off its mean, and matplotlib refuses a negative bar), and a plot matplotlib
still cannot draw is a warning with the report written without it: ``judge stability``'s
two plots, the nightly trend plots (stability and search) and an experiment's heat map."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from judge.cli import main
from judge.search import build_index

# Three queries of five passages, only the fifth relevant: every query's AP is 1/5, and the
# mean of three 0.2s is 0.20000000000000004, above the bootstrap's degenerate [0.2, 0.2].
QUERIES = 3


def _equal_aps(tmp_path: Path) -> tuple[Path, Path]:
    data, qrels = tmp_path / "d.jsonl", tmp_path / "labels.qrels"
    lines, labels = [], []
    for i in range(QUERIES):
        passages = [{"id": f"d{j}", "text": f"passage {j} of question {i}"} for j in range(1, 6)]
        lines.append(json.dumps({"id": f"q{i}", "query": f"question {i}", "retrieval_context": passages}))
        labels += [f"q{i} 0 d{j} {int(j == 5)}" for j in range(1, 6)]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    qrels.write_text("\n".join(labels) + "\n", encoding="utf-8")
    return data, qrels


def test_the_premise_the_mean_of_equal_aps_lies_above_their_common_value() -> None:
    assert np.asarray([0.2] * QUERIES).mean() > 0.2


def test_error_bars_are_never_negative_and_a_missing_end_draws_none() -> None:
    from judge.stability import error_bars

    y = np.asarray([0.2, 0.5, 0.5], dtype=np.float64)
    y[0] = np.asarray([0.2] * QUERIES).mean()  # 0.2 + 2**-54: a rounding error above 0.2
    got = error_bars(y, [0.2, 0.4, float("nan")], [0.2, 0.75, 0.6])
    assert got[:, 0].tolist() == [y[0] - 0.2, 0.0]  # above: clipped at 0, not -2.8e-17
    assert got[:, 1].tolist() == pytest.approx([0.1, 0.25])
    assert got[:, 2].tolist() == pytest.approx([0.0, 0.1])  # no low end: no bar below
    assert (got >= 0).all()


def test_judge_stability_on_equal_aps_exits_0_with_its_report_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, qrels = _equal_aps(tmp_path)
    out = tmp_path / "report"
    code = main(["stability", str(data), "--backend", f"qrels:{qrels}", "--runs", "2", "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert [r["map"] for r in report["runs"]] == [pytest.approx(0.2), pytest.approx(0.2)]
    assert report["runs"][0]["ci"]["low"] == report["runs"][0]["ci"]["high"] == 0.2
    assert report["runs"][0]["map"] > 0.2  # the mean, a rounding error above its interval
    assert report["plots"] == {"map_per_run": "map_per_run.png", "query_ranges": "query_ranges.png"}
    assert "warnings" not in report and "warning" not in captured.err
    assert (out / "map_per_run.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "report.md").is_file() and captured.out.startswith("PASS: mAP relative spread 0.00%")


def test_a_plot_that_cannot_be_drawn_is_a_warning_and_the_report_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import judge.stability._report as report_module

    def refuse(_: Any) -> bytes:
        raise ValueError("matplotlib refused")

    monkeypatch.setattr(report_module, "plot_query_ranges", refuse)
    data, qrels = _equal_aps(tmp_path)
    out = tmp_path / "report"
    (out).mkdir()
    (out / "query_ranges.png").write_bytes(b"an earlier run's plot")
    code = main(["stability", str(data), "--backend", f"qrels:{qrels}", "--runs", "2", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["plots"] == {"map_per_run": "map_per_run.png"}
    assert report["warnings"] == [
        "the plot query_ranges.png could not be drawn (ValueError: matplotlib refused); written without it"
    ]
    assert f"judge stability: warning: {report['warnings'][0]}" in err
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "](map_per_run.png)" in markdown and "query_ranges.png)" not in markdown
    assert f"Warning: {report['warnings'][0]}." in markdown
    assert not (out / "query_ranges.png").exists()  # never an earlier run's plot beside this report


def test_a_trend_plot_that_cannot_be_drawn_is_a_warning_and_the_last_one_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import judge.stability._nightly as nightly
    from judge.stability import redraw_trend

    history, plot = tmp_path / "history.jsonl", tmp_path / "trend.png"
    history.write_text(
        json.dumps({"timestamp": "2026-11-30T03:00:00+00:00", "relative_spread": 0.0, "passed": True}) + "\n",
        encoding="utf-8",
    )
    assert redraw_trend(history, plot, 0.02) is None and plot.read_bytes()[:4] == b"\x89PNG"
    drawn = plot.read_bytes()

    def refuse(*_: Any) -> bytes:
        raise ValueError("matplotlib refused")

    monkeypatch.setattr(nightly, "plot_trend", refuse)
    warning = redraw_trend(history, plot, 0.02)
    assert warning == "the trend plot could not be drawn (ValueError: matplotlib refused); written without it"
    assert plot.read_bytes() == drawn


def test_a_search_trend_plot_that_cannot_be_drawn_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import judge.systems._engine_nightly as engine_nightly

    def refuse(*_: Any) -> bytes:
        raise ValueError("matplotlib refused")

    monkeypatch.setattr(engine_nightly, "plot_search_trend", refuse)
    cfg: Any = type(
        "Cfg", (), {"history": tmp_path / "h.jsonl", "name": "n", "trend_plot": tmp_path / "t.png"}
    )()
    plot, warning = engine_nightly.redraw_search_trend(cfg, "ndcg_cut_10")
    assert plot is None and not (tmp_path / "t.png").exists()
    assert warning == "the trend plot could not be drawn (ValueError: matplotlib refused); written without it"


def test_an_experiments_heat_map_that_cannot_be_drawn_is_a_warning_and_the_report_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import judge.systems._sweep as sweep

    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": text}) + "\n"
            for i, text in enumerate(["the cat sat", "cats and dogs", "apple pie", "a dog barks"])
        ),
        encoding="utf-8",
    )
    index = tmp_path / "idx"
    build_index(docs, index, language="en")
    config = tmp_path / "bm25.toml"
    config.write_text(
        f'engine = "embedded"\nindex = "{index}"\ndepth = 3\n[params]\nk1 = 1.2\nb = 0.75\n', encoding="utf-8"
    )
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "q1", "query": "cat"}\n{"id": "q2", "query": "dog"}\n', encoding="utf-8")
    qrels = tmp_path / "labels.qrels"
    qrels.write_text("".join(f"q{q} 0 d{d} {int(d % 2 == q % 2)}\n" for q in (1, 2) for d in range(4)))

    def refuse(_: Any) -> bytes:
        raise ValueError("matplotlib refused")

    monkeypatch.setattr(sweep, "heatmap_png", refuse)
    out = tmp_path / "exp"
    args = [
        "experiment",
        str(queries),
        "--config",
        str(config),
        "--grid",
        "k1=0.6,1.2",
        "--grid",
        "b=0.3,0.75",
    ]
    code = main([*args, "--backend", f"qrels:{qrels}", "--resamples", "200", "-o", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    warning = "the heat map could not be drawn (ValueError: matplotlib refused); written without it"
    assert report["experiment"]["heatmap"] is None and warning in report["warnings"]
    assert len(report["experiment"]["configurations"]) == 4 and not (out / "heatmap.png").exists()
    assert f"judge experiment: warning: {warning}" in captured.err
