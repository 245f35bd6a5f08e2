"""``judge nightly`` with a ``[search]`` section: the first night stores the baseline run,
an unchanged engine passes, a deliberately worse engine raises the alert exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _experiment_fixtures import DATA, bundled

from judge.cli import main
from judge.io import InputError
from judge.stability import read_history
from judge.systems import SEARCH_HISTORY_SCHEMA, load_search_nightly

WORSE = """
import json
from pathlib import Path

_DOCS = [json.loads(line) for line in Path({corpus!r}).read_text(encoding="utf-8").splitlines()]


def search(query, depth, **params):
    # the same passages for every query: the corpus's last ones
    return [{{"id": d["id"], "text": d["text"]}} for d in _DOCS[-depth:]]
"""


def _nightly(tmp: Path, engine: Path, name: str = "shop") -> Path:
    cfg = tmp / f"nightly-{engine.stem}.toml"
    cfg.write_text(
        f'name = "{name}"\nbackend = "qrels:all.qrels"\n'
        'history = "nightly/history.jsonl"\nreport_dir = "nightly/reports"\n'
        f'[search]\nqueries = "{DATA / "queries.zh.jsonl"}"\nconfig = "{engine}"\n'
        'measures = ["ndcg_cut_10", "P_5"]\nresamples = 2000\n',
        encoding="utf-8",
    )
    return cfg


def test_first_night_baseline_then_pass_then_alert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    data = bundled(tmp_path)
    good = _nightly(tmp_path, data.config)
    assert main(["nightly", str(good), "--quiet"]) == 0
    history = tmp_path / "nightly" / "history.jsonl"
    first = read_history(history)[-1]
    assert first["schema"] == SEARCH_HISTORY_SCHEMA and first["status"] == "baseline"
    assert (tmp_path / "nightly" / "baseline.jsonl").exists()
    assert first["calls"] > 0
    # the same engine again: identical results, nothing new to judge, no drop
    assert main(["nightly", str(good), "--quiet"]) == 0
    second = read_history(history)[-1]
    assert second["status"] == "pass" and second["passed"] is True and second["calls"] == 0
    assert second["measures"]["ndcg_cut_10"]["diff"] == 0.0
    assert second["measures"]["ndcg_cut_10"]["p_value"] == 1.0
    # a deliberately worse engine: the same last passages for every query
    module = tmp_path / "worse_engine.py"
    module.write_text(WORSE.format(corpus=str(DATA / "corpus.zh.jsonl")), encoding="utf-8")
    worse = tmp_path / "worse.toml"
    worse.write_text(
        f'engine = "python"\ncallable = "worse_engine:search"\npythonpath = "{tmp_path}"\ndepth = 10\n',
        encoding="utf-8",
    )
    capsys.readouterr()
    assert main(["nightly", str(_nightly(tmp_path, worse)), "--quiet"]) == 1
    out = capsys.readouterr()
    assert "ALERT" in out.err and "DROP" in out.out
    third = read_history(history)[-1]
    assert third["status"] == "alert" and third["passed"] is False
    row = third["measures"]["ndcg_cut_10"]
    assert row["dropped"] and row["diff"] < 0 and row["p_holm"] < 0.05
    assert row["baseline"] == pytest.approx(first["measures"]["ndcg_cut_10"]["current"])
    report = json.loads((Path(third["report_dir"]) / "report.json").read_text(encoding="utf-8"))
    assert set(report["systems"]) == {"baseline", "current"}
    assert (tmp_path / "nightly" / "search-trend.png").exists()


def test_bad_search_section_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "n.toml"
    cfg.write_text('[search]\nqueries = "q.jsonl"\n', encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_search_nightly(cfg)
    assert err.value.field == "search.config"
    cfg.write_text('[search]\nqueries = "q.jsonl"\nconfig = "c.toml"\nconfidence = 2.0\n', encoding="utf-8")
    assert main(["nightly", str(cfg), "--quiet"]) == 2
    assert "search.confidence" in capsys.readouterr().err
    cfg.write_text('[search]\nqueries = "q.jsonl"\nconfig = "c.toml"\nbogus = 1\n', encoding="utf-8")
    assert main(["nightly", str(cfg), "--quiet"]) == 2
    assert "search.bogus" in capsys.readouterr().err
