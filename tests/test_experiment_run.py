"""``judge experiment`` end to end on the bundled Chinese search data, judged by the
qrels-backed judge (every corpus passage graded for every query: one call per pair asked).

Expected values are derived from the runs' TREC files by hand (pool unions, coverage) or
recomputed through another path (the measures and the paired test on the search package's
own TREC runs against the experiment's pool.qrels)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from _experiment_fixtures import Bundled, bundled, trec_rankings

import judge
from judge.cli import main
from judge.io import join_run_qrels, read_qrels, read_run, write_run
from judge.metrics import compare_scores, evaluate, parse_measure_args
from judge.search import load_config
from judge.systems import ComparisonReport, SystemsReport, parse_grid, plan_configurations


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Bundled:
    return bundled(tmp_path_factory.mktemp("bundled"))


def _run(data: Bundled, out: Path, *args: str, cache: Path | None = None) -> dict:
    code = main(
        [
            "experiment",
            str(data.queries),
            "--config",
            str(data.config),
            *args,
            "--backend",
            f"qrels:{data.qrels}",
            "--cache",
            str(cache or out.parent / "cache.sqlite"),
            "--resamples",
            "2000",
            "-o",
            str(out),
            "--quiet",
            "--json",
        ]
    )
    assert code == 0
    return json.loads((out / "report.json").read_text(encoding="utf-8"))


def _union_pairs(trec_files: list[Path], depth: int | None = None) -> set[tuple[str, str]]:
    pairs: set[tuple[str, str]] = set()
    for path in trec_files:
        for q, docs in trec_rankings(path, depth).items():
            pairs |= {(q, d) for d in docs}
    return pairs


def test_grid_names_and_hashes(data: Bundled) -> None:
    planned = plan_configurations([data.config], parse_grid(["k1=0.6,1.2", "b=0.3,0.75"]))
    assert [p.name for p in planned] == [
        "bm25-k1_0.6-b_0.3",
        "bm25-k1_0.6-b_0.75",
        "bm25-k1_1.2-b_0.3",
        "bm25-k1_1.2-b_0.75",
    ]
    base = load_config(data.config)
    assert planned[3].config.hash == base.hash  # k1=1.2, b=0.75 is the file itself
    assert planned[0].config.hash == base.with_params({"k1": 0.6, "b": 0.3}).hash
    assert len({p.config.hash for p in planned}) == 4
    assert [p.config.params["k1"] for p in planned] == [0.6, 0.6, 1.2, 1.2]


def test_pooled_calls_best_significance_coverage_heatmap(data: Bundled, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    report = _run(data, out, "--grid", "k1=0.2,3.0", "--grid", "b=0.0,1.0")
    e = report["experiment"]
    names = [c["name"] for c in e["configurations"]]
    assert names == ["bm25-k1_0.2-b_0", "bm25-k1_0.2-b_1", "bm25-k1_3-b_0", "bm25-k1_3-b_1"]
    trecs = [Path(c["trec"]) for c in e["configurations"]]
    # every pair in the union of the four runs is judged once: calls = unique pairs
    union = _union_pairs(trecs)
    nominal = sum(len(d) for t in trecs for d in trec_rankings(t).values())
    assert report["pool"]["unique_pairs"] == len(union)
    assert report["pool"]["pairs"] == nominal
    assert e["calls"] == len(union) == report["pool"]["calls"]
    assert e["nominal_pairs"] == 4 * 16 * 10
    assert e["calls_ratio"] == pytest.approx(len(union) / 640, abs=1e-6)
    assert e["pairs"] == len(union) and e["calls_per_pair"] == 1.0
    # every pooled pair is judged: coverage 1 at every k
    assert all(v == 1.0 for c in e["configurations"] for v in c["coverage"].values())
    assert set(e["configurations"][0]["coverage"]) == {"5", "10"}
    # the measures again, from the search package's TREC runs against pool.qrels; in rank
    # order (BM25 ties equal scores, which trec_eval would reorder by docno)
    (m,) = parse_measure_args(["ndcg_cut_10"])
    qrels = read_qrels(out / "pool.qrels")
    per_query = {}
    for c, path in zip(e["configurations"], trecs, strict=True):
        ranked = tmp_path / f"{c['name']}.ranked"
        write_run(
            ranked,
            {q: [(d, float(100 - i)) for i, d in enumerate(docs)] for q, docs in trec_rankings(path).items()},
        )
        ev = evaluate([m], join_run_qrels(qrels, read_run(ranked)))
        per_query[c["name"]] = dict(zip(ev.qids, ev.query_scores(m), strict=True))
        assert c["objective"] == pytest.approx(float(np.mean(ev.query_scores(m))), abs=1e-9)
        assert report["systems"][c["name"]]["measures"]["ndcg_cut_10"] == pytest.approx(c["objective"])
    best = max(per_query, key=lambda n: float(np.mean(list(per_query[n].values()))))
    assert e["best"] == best
    assert e["best_value"] == pytest.approx(max(c["objective"] for c in e["configurations"]))
    # the paired test of each configuration against the baseline, as judge compare computes it
    baseline = names[0]
    for name in names[1:]:
        qids = sorted(per_query[baseline])
        expected = compare_scores(
            np.array([per_query[baseline][q] for q in qids]),
            np.array([per_query[name][q] for q in qids]),
            measure="ndcg_cut_10",
            resamples=2000,
            seed=0,
        )
        got = next(c for c in report["comparisons"] if c["system"] == name and c["measure"] == "ndcg_cut_10")
        assert got["p_value"] == pytest.approx(expected.p_permutation)
        assert got["diff"] == pytest.approx(expected.difference)
    # two knobs vary: the heat map is drawn and the table is in the markdown
    assert e["knobs"] == ["k1", "b"]
    assert e["heatmap"] == "heatmap.png"
    assert (out / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Experiment" in md and "b \\ k1" in md
    # the report loads back from its folder (the server's viewer) with the experiment section
    loaded = ComparisonReport.load(out)
    assert loaded.report.experiment is not None and "## Experiment" in loaded.markdown()
    assert 'id="experiment"' in loaded.html()


def test_one_knob_draws_no_heatmap_and_depth_limits_coverage(data: Bundled, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    report = _run(data, out, "--grid", "k1=0.2,3.0", "--depth", "3")
    e = report["experiment"]
    assert e["knobs"] == ["k1"] and e["heatmap"] is None and not (out / "heatmap.png").exists()
    trecs = [Path(c["trec"]) for c in e["configurations"]]
    pooled = _union_pairs(trecs, depth=3)
    assert e["calls"] == len(pooled)
    for c, path in zip(e["configurations"], trecs, strict=True):
        top5 = [(q, d) for q, docs in trec_rankings(path, 5).items() for d in docs]
        assert c["coverage"]["5"] == pytest.approx(sum(p in pooled for p in top5) / len(top5), abs=1e-6)
        assert c["coverage"]["5"] < 1.0


def test_a_later_experiment_reuses_every_judgment(data: Bundled, tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    first = _run(data, tmp_path / "one", "--grid", "b=0.75,1.0", cache=cache)
    assert first["experiment"]["calls"] == first["pool"]["unique_pairs"]
    # the same experiment again: nothing searched, nothing judged; the experiment's calls
    # are still those of its first run (kept in calls.json), none of them this run
    again = _run(data, tmp_path / "one", "--grid", "b=0.75,1.0", cache=cache)
    assert again["experiment"]["calls_this_run"] == 0
    assert again["experiment"]["calls"] == first["experiment"]["calls"]
    assert all(c["queries_searched"] == 0 for c in again["experiment"]["configurations"])
    # a new experiment elsewhere with one more configuration: calls only for its new pairs
    second = _run(data, tmp_path / "two", "--grid", "b=0.75,1.0,0.0", cache=cache)
    old = _union_pairs([Path(c["trec"]) for c in first["experiment"]["configurations"]])
    new = _union_pairs([Path(c["trec"]) for c in second["experiment"]["configurations"]])
    assert len(new - old) > 0
    assert second["experiment"]["calls"] == len(new - old)


def test_two_config_files_and_the_python_api(data: Bundled, tmp_path: Path) -> None:
    worse = data.write_config("flat", "depth = 10\n[params]\nk1 = 0.0\nb = 0.0\n")
    report = judge.experiment(
        data.queries,
        [data.config, worse],
        tmp_path / "api",
        backend=f"qrels:{data.qrels}",
        cache=tmp_path / "cache.sqlite",
        measures=["P_5", "ndcg_cut_10"],
        resamples=500,
        stability_resamples=0,
    )
    assert isinstance(report, SystemsReport)
    e = report.experiment
    assert e is not None and e.strategy == "configs" and e.objective == "P_5"
    assert [c.name for c in e.configurations] == ["bm25", "flat"]
    assert [c.source for c in e.configurations] == [str(data.config), str(worse)]
    assert e.knobs == ["k1", "b"]  # both differ: the heat map has one cell per file
    assert e.best in {"bm25", "flat"}


def test_trials_are_reproducible_with_a_seed(data: Bundled, tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    cache = tmp_path / "cache.sqlite"
    args = ("--grid", "k1=0.1:3.0", "--grid", "b=0.0:1.0", "--trials", "3", "--seed", "7")
    a = _run(data, tmp_path / "a", *args, cache=cache)
    b = _run(data, tmp_path / "b", *args, cache=cache)
    pa = [c["params"] for c in a["experiment"]["configurations"]]
    pb = [c["params"] for c in b["experiment"]["configurations"]]
    assert pa == pb and len(pa) == 3
    assert [c["trial"] for c in a["experiment"]["configurations"]] == [0, 1, 2]
    assert a["experiment"]["strategy"] == "trials" and a["experiment"]["seed"] == 7
    assert all(0.1 <= p["k1"] <= 3.0 and 0.0 <= p["b"] <= 1.0 for p in pa)
    # trials judged as they went; the second study found every verdict in the cache
    assert a["experiment"]["calls"] == a["pool"]["unique_pairs"]
    assert b["experiment"]["calls"] == 0
    other = _run(data, tmp_path / "c", *args[:-1], "8", cache=cache)
    assert [c["params"] for c in other["experiment"]["configurations"]] != pa


def test_human_labels_and_until_decided_as_in_compare_systems(data: Bundled, tmp_path: Path) -> None:
    # human labels for q01 fill the pool first: its pairs are never sent to the judge
    labels = tmp_path / "q01.qrels"
    lines = [line for line in data.qrels.read_text(encoding="utf-8").splitlines() if line.startswith("q01 ")]
    labels.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = _run(
        data, tmp_path / "labelled", "--grid", "k1=0.2,3.0", "--qrels", str(labels), "--qrels-level", "1"
    )
    trecs = [Path(c["trec"]) for c in report["experiment"]["configurations"]]
    union = _union_pairs(trecs)
    q01 = {p for p in union if p[0] == "q01"}
    assert report["pool"]["human_labels"] == len(q01) > 0
    assert report["experiment"]["calls"] == len(union) - len(q01)
    # adaptive judging: the report says what it judged, and the calls are those pairs
    adaptive = _run(data, tmp_path / "adaptive", "--grid", "k1=0.2,3.0", "--until-decided", "--batch", "8",
                    cache=tmp_path / "fresh.sqlite")  # fmt: skip
    a = adaptive["adaptive"]
    assert a is not None and a["pool_pairs"] == len(union)
    assert adaptive["experiment"]["calls"] == a["judged_pairs"] <= len(union)


def test_another_query_set_in_the_same_folder_gets_its_own_runs(data: Bundled, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    _run(data, out, "--grid", "k1=0.2,1.2")
    fewer = tmp_path / "fewer.jsonl"
    fewer.write_text(
        "".join(data.queries.read_text(encoding="utf-8").splitlines(keepends=True)[:3]), encoding="utf-8"
    )
    code = main(["experiment", str(fewer), "--config", str(data.config), "--grid", "k1=0.2,1.2",
                 "--backend", f"qrels:{data.qrels}", "--cache", str(tmp_path / "cache.sqlite"),
                 "-o", str(out), "--quiet", "--json"])  # fmt: skip
    assert code == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["experiment"]["queries"] == 3 and report["pool"]["queries"] == 3
    assert all(c["queries_searched"] == 3 for c in report["experiment"]["configurations"])
    assert report["experiment"]["calls"] == 0  # every pair was judged by the first experiment


def test_the_bundled_data_responds_to_bm25s_knobs(data: Bundled, tmp_path: Path) -> None:
    # The README's data and judge: a 3 x 3 grid of k1 and b (the file's own values first, the
    # baseline) gives distinct objectives, and the best is not the baseline.
    readme_qrels = data.queries.with_name("queries.zh.qrels")
    assert sorted(readme_qrels.read_text(encoding="utf-8").split("\n")) == sorted(
        data.qrels.read_text(encoding="utf-8").split("\n")
    )
    report = _run(data, tmp_path / "exp", "--grid", "k1=1.2,0.6,1.8", "--grid", "b=0.75,0.3,0.9")
    e = report["experiment"]
    objectives = [c["objective"] for c in e["configurations"]]
    assert len(objectives) == 9 and len({round(v, 6) for v in objectives}) >= 3
    assert e["configurations"][0]["name"] == "bm25-k1_1.2-b_0.75"
    assert e["best"] != "bm25-k1_1.2-b_0.75"
    assert e["best_value"] == max(objectives) > objectives[0]


def test_the_readme_quotes_what_its_experiment_prints(data: Bundled, tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    command = r"judge experiment datasets/search/queries\.zh\.jsonl[^`]*?--grid (\S+) --grid (\S+)"
    grids = re.findall(command, readme)
    assert len(grids) == 1
    quoted = re.search(r"`(Best on\s+ndcg_cut_10: .*?)`", readme, re.S)
    assert quoted is not None
    out = tmp_path / "exp"  # the README's command as written (default resamples), a fresh cache
    code = main(["experiment", str(data.queries), "--config", str(data.config), "--grid", grids[0][0],
                 "--grid", grids[0][1], "--backend", f"qrels:{data.queries.with_name('queries.zh.qrels')}",
                 "--cache", str(tmp_path / "c.sqlite"), "-o", str(out), "--quiet", "--json"])  # fmt: skip
    assert code == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["experiment"]["best"] != report["experiment"]["configurations"][0]["name"]
    best_line = (tmp_path / "exp" / "report.md").read_text(encoding="utf-8").splitlines()[2]
    assert " ".join(quoted.group(1).split()) == best_line
