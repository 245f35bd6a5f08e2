"""The service's ``qrels`` read as ``--qrels`` reads it: TREC qrels or a Quepid/SRW judgment
list (the ``query,docid,rating`` CSV, SRW's IMPORT_JUDGMENT JSON, RRE ratings) told apart by
content, its query texts the job's (a comparison's systems', an experiment's query set), its
ratings' scale ``qrels_scale`` (``--qrels-scale``). ``POST /v1/compare`` and ``POST
/v1/experiments`` on the same judgments in every format give the same pool and figures as the
TREC qrels and as ``judge compare-systems --qrels FILE``; what the reader refuses is a 422
naming ``options.qrels`` (line, the file's field) or ``options.qrels_scale``, with nothing
stored.

The judge is the qrels-backed one (``judge.qrels``: every passage of every query graded, so
one call per pair and no unjudged pair), in process for the service and ``--backend
qrels:FILE`` for the command line."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _experiment_fixtures import DATA, Bundled, bundled
from _server import MARKER, make_config, wait_job
from fastapi.testclient import TestClient

from judge.backends import QrelsBackend
from judge.cli import main
from judge.io import read_qrels_lines
from judge.server import create_app, register_configs

OPTIONS: dict[str, Any] = {"seed": 7, "resamples": 400, "stability_resamples": 50}
N = 6
# a comma, a quote and Chinese in every query text (and a tab in one)
TEXTS = {f"q{i:02d}": f'红色连衣裙, "尺码 {i}" 怎么选' + ("\t加大" if i == 3 else "") for i in range(N)}
# per query: people say n1 (junk the judge calls no, A's rank 3) is relevant and r2 (relevant
# to the judge, B's rank 3) is not; r1 (B's rank 2) is relevant to both
GRADES = {"n1": 2, "r2": 0, "r1": 1}


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))


def systems() -> dict[str, list[dict[str, Any]]]:
    """Four relevant passages per query; ``A`` returns r0 then junk, ``B`` r0, r1, r2, n0, r3."""
    a, b = [], []
    for qid, text in TEXTS.items():
        rel = [{"id": f"r{j}", "text": f"{MARKER} {text} 的相关段落{j}"} for j in range(4)]
        junk = [{"id": f"n{j}", "text": f"{qid} 的无关段落{j}，今天天气晴朗"} for j in range(3)]
        a.append({"id": qid, "query": text, "retrieval_context": [rel[0], *junk]})
        b.append({"id": qid, "query": text, "retrieval_context": [*rel[:3], junk[0], rel[3]]})
    return {"A": a, "B": b}


def judge_qrels(path: Path) -> Path:
    """The judge's answers: every r* relevant, every n* not, for every query."""
    rows = [f"{q} 0 r{j} 1" for q in TEXTS for j in range(4)] + [
        f"{q} 0 n{j} 0" for q in TEXTS for j in range(3)
    ]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def labels(fmt: str, grades: dict[str, Any] | None = None) -> str:
    """The same judgments (``grades``: docid -> rating for every query) in ``fmt``."""
    grades = grades if grades is not None else GRADES
    if fmt == "trec":
        return "".join(f"{q} 0 {d} {g}\n" for q in TEXTS for d, g in grades.items())
    if fmt == "csv":
        buf = io.StringIO(newline="")
        out = csv.writer(buf, lineterminator="\n")
        out.writerow(["query", "docid", "rating"])
        out.writerows([TEXTS[q], d, g] for q in TEXTS for d, g in grades.items())
        return buf.getvalue()
    if fmt == "srw":  # SRW's 0-1 scores: 2/3 -> 2, 0 -> 0, 1/3 -> 1 (floor(3r + 1/2))
        srw = {"2": "0.667", "1": "0.333", "0": "0.000"}
        entries = [
            {"query": TEXTS[q], "ratings": [{"docId": d, "rating": srw[str(g)]} for d, g in grades.items()]}
            for q in TEXTS
        ]
        body = {"name": "people", "type": "IMPORT_JUDGMENT", "judgmentRatings": entries}
        return json.dumps(body, ensure_ascii=False, indent=1)
    assert fmt == "rre"
    queries = [
        {
            "placeholders": {"$query": TEXTS[q]},
            "relevant_documents": {d: {"gain": g} for d, g in grades.items()},
        }
        for q in TEXTS
    ]
    return json.dumps({"id_field": "id", "index": "x", "queries": queries}, ensure_ascii=False, indent=1)


def _write_systems(tmp: Path) -> dict[str, Path]:
    paths = {}
    for name, recs in systems().items():
        paths[name] = tmp / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), "utf-8")
    return paths


def _app(tmp: Path, backend: Any) -> Any:
    return create_app(make_config(tmp, backend=backend))


def _cli(tmp: Path, qrels: Path, out: Path, *extra: str) -> int:
    paths = _write_systems(tmp)
    return main(
        [
            "compare-systems",
            *(f"{n}={p}" for n, p in paths.items()),
            "--qrels",
            str(qrels),
            *extra,
            "--backend",
            f"qrels:{judge_qrels(tmp / 'judge.qrels')}",
            "--cache",
            str(out.parent / f"{out.name}.sqlite"),
            "--seed",
            str(OPTIONS["seed"]),
            "--resamples",
            str(OPTIONS["resamples"]),
            "--stability-resamples",
            str(OPTIONS["stability_resamples"]),
            "-o",
            str(out),
            "--quiet",
            "--json",
        ]
    )


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    """What the human labels decide: the pool, every system's means, every test."""
    return {
        "pool": {k: v for k, v in report["pool"].items() if k != "calls"},  # the cache is shared
        "systems": {n: s["measures"] for n, s in report["systems"].items()},
        "comparisons": report["comparisons"],
        "relevance_level": report["conventions"]["relevance_level"],
    }


def _pairs(text: str) -> list[tuple[str, str, int]]:
    return sorted((q, d, int(g)) for q, _, d, g in (line.split() for line in text.splitlines()))


def _compare(client: TestClient, qrels: str, **options: Any) -> tuple[dict[str, Any], str, str]:
    body = {"systems": systems(), "options": {**OPTIONS, "qrels": qrels, **options}}
    posted = client.post("/v1/compare", json=body)
    assert posted.status_code == 202, posted.text
    job = wait_job(client, posted.json()["id"])
    assert job["status"] == "done", job["error"]
    report = client.get(f"/v1/jobs/{job['id']}/report").json()
    pool = client.get(f"/v1/jobs/{job['id']}/results?format=qrels").text
    return report, pool, job["id"]


FILE_CONVENTIONS = {
    "trec": None,
    "csv": {"format": "csv", "scale": "graded-0-3", "mapping": "graded 0-3 kept as they are"},
    "srw": {
        "format": "srw",
        "scale": "srw-0-1",
        "mapping": "SRW 0-1 to graded floor(3r+1/2): "
        "[0,1/6) -> 0, [1/6,1/2) -> 1, [1/2,5/6) -> 2, [5/6,1] -> 3",
    },
    "rre": {"format": "rre", "scale": "graded-0-3", "mapping": "graded 0-3 kept as they are"},
}


def test_every_format_gives_the_trec_qrels_pool_and_the_clis_report(tmp_path: Path) -> None:
    backend = QrelsBackend(judge_qrels(tmp_path / "judge.qrels"))
    got: dict[str, tuple[dict[str, Any], str]] = {}
    with TestClient(_app(tmp_path / "srv", backend)) as client:
        for fmt in FILE_CONVENTIONS:
            got[fmt] = _compare(client, labels(fmt), qrels_level=1)[:2]
    trec_report, trec_pool = got["trec"]
    # worked by hand: relevant per query are r0, r3 (the judge), n1 and r1 (people; r2 is not).
    # A ranks r0, n0, n1, n2: AP = (1/1 + 2/3) / 4; B ranks r0, r1, r2, n0, r3: (1 + 1 + 3/5) / 4
    assert trec_report["systems"]["A"]["measures"]["map"] == pytest.approx(5 / 12)
    assert trec_report["systems"]["B"]["measures"]["map"] == pytest.approx(0.65)
    assert trec_report["pool"]["human_labels"] == 3 * N
    assert "q00 0 n1 1" in trec_pool.splitlines() and "q00 0 r2 0" in trec_pool.splitlines()
    for fmt, convention in FILE_CONVENTIONS.items():
        report, pool = got[fmt]
        assert _figures(report) == _figures(trec_report), fmt
        assert _pairs(pool) == _pairs(trec_pool), fmt
        assert report["conventions"].get("human_labels_file") == convention, fmt
        assert report["conventions"]["human_labels"] == "human.qrels"  # no server path
        # the same list given to judge compare-systems --qrels FILE
        given = tmp_path / f"labels.{fmt}"
        given.write_text(labels(fmt), encoding="utf-8")
        out = tmp_path / f"cli-{fmt}"
        assert _cli(tmp_path, given, out, "--qrels-level", "1") == 0
        cli = json.loads((out / "report.json").read_text(encoding="utf-8"))
        assert _figures(report) == _figures(cli), fmt
        assert cli["conventions"].get("human_labels_file") == convention, fmt
        assert pool == (out / "pool.qrels").read_text(encoding="utf-8"), fmt
    # the judge was asked once per pooled pair people did not label (7 pooled, 3 labelled, per
    # query), by the first job; the others found every verdict in the server's cache
    assert backend.calls == trec_report["pool"]["calls"] == trec_report["pool"]["judged"] == 4 * N


def _refused(client: TestClient, tmp: Path, options: dict[str, Any]) -> dict[str, Any]:
    """A comparison refused with 422, nothing stored or listed, no judge call."""
    r = client.post("/v1/compare", json={"systems": systems(), "options": {**OPTIONS, **options}})
    assert r.status_code == 422, r.text
    assert client.get("/v1/jobs").json()["jobs"] == []
    jobs = tmp / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())
    assert str(tmp) not in r.text and str(tmp.resolve()) not in r.text
    body: dict[str, Any] = r.json()
    return body


def _fields(body: dict[str, Any]) -> list[str]:
    return [body["field"]] if body.get("field") else list(body.get("fields") or [])


def test_a_1_10_list_needs_its_scale_and_is_read_on_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Quepid 1-10 ratings of 1..3 only fit 0-3 scales too: without ``qrels_scale`` it is a 422
    naming ``options.qrels_scale`` (the CLI's exit 2 names ``--qrels-scale``); with
    ``quepid-1-10`` the ratings go to round((r-1)/3): 3 -> 1, 2 -> 0, 1 -> 0."""
    ten = labels("csv", {"n1": 3, "r1": 2, "r2": 1})
    backend = QrelsBackend(judge_qrels(tmp_path / "judge.qrels"))
    with TestClient(_app(tmp_path / "srv", backend)) as client:
        body = _refused(client, tmp_path / "srv", {"qrels": ten, "qrels_level": 1})
        assert _fields(body) == ["options.qrels_scale"]
        assert "ambiguous" in body["detail"] and "options.qrels_scale" in body["detail"]
        assert "--qrels-scale" not in body["detail"] and body["detail"].startswith("human.qrels")
        # checked as every option is: a name of the CLI's, a string, and only with qrels
        for bad in ("quepid-0-10", "graded", 3, "3", ["binary"], True):
            body = _refused(client, tmp_path / "srv", {"qrels": ten, "qrels_scale": bad})
            assert any(f.endswith("options.qrels_scale") for f in _fields(body)), (bad, body)
        body = _refused(client, tmp_path / "srv", {"qrels_scale": "quepid-1-10"})
        assert any(f.endswith("options.qrels_scale") for f in _fields(body)), body
        assert backend.calls == 0
        report, pool, job_id = _compare(client, ten, qrels_scale="quepid-1-10", qrels_level=1)
        # the report loading itself from the job's folder (the viewer's differences, computed
        # once) reads the list on the same stated scale
        (tmp_path / "srv" / "jobs" / job_id / "differences.json").unlink()
        differences = client.get(f"/v1/jobs/{job_id}/differences")
        assert differences.status_code == 200, differences.text
        assert {s["name"]: s["value"] for s in differences.json()["queries"][0]["systems"]} == {
            "A": pytest.approx(5 / 9),
            "B": pytest.approx(7 / 15),
        }
    # relevant per query: r0, r3 (the judge) and n1 (people's 3); r1 and r2 (2, 1) are not.
    # A: r0, n0, n1: AP = (1 + 2/3) / 3; B: r0, r1, r2, n0, r3: (1 + 2/5) / 3
    assert report["systems"]["A"]["measures"]["map"] == pytest.approx(5 / 9)
    assert report["systems"]["B"]["measures"]["map"] == pytest.approx(7 / 15)
    assert report["conventions"]["human_labels_file"] == {
        "format": "csv",
        "scale": "quepid-1-10",
        "mapping": "Quepid 1-10 to graded round((r-1)/3): 1-2 -> 0, 3-5 -> 1, 6-8 -> 2, 9-10 -> 3",
    }
    given = tmp_path / "ten.csv"
    given.write_text(ten, encoding="utf-8")
    assert _cli(tmp_path, given, tmp_path / "no", "--qrels-level", "1") == 2
    assert "field '--qrels-scale'" in capsys.readouterr().err
    out = tmp_path / "cli"
    assert _cli(tmp_path, given, out, "--qrels-level", "1", "--qrels-scale", "quepid-1-10") == 0
    cli = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert _figures(report) == _figures(cli) and pool == (out / "pool.qrels").read_text(encoding="utf-8")


def test_an_unknown_query_text_is_422_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = labels("csv").splitlines()
    text[3] = '"红色连衣裙, ""尺码 99"" 怎么选",r1,1'  # line 4: no system has this query
    bad = "\n".join(text) + "\n"
    backend = QrelsBackend(judge_qrels(tmp_path / "judge.qrels"))
    with TestClient(_app(tmp_path / "srv", backend)) as client:
        body = _refused(client, tmp_path / "srv", {"qrels": bad, "qrels_level": 1})
        assert (body["field"], body["line"]) == ("options.qrels.query", 4)
        assert body["detail"].startswith("human.qrels:4: ") and "尺码 99" in body["detail"]
        # a rating off the list's stated scale names its line and field too
        srw = labels("srw").replace('"0.333"', '"1.5"', 1)
        body = _refused(client, tmp_path / "srv", {"qrels": srw, "qrels_level": 1})
        assert body["field"] == "options.qrels" and body["line"] is not None
        assert "1.5" in body["detail"]
        # TREC qrels keep their reader's errors
        body = _refused(client, tmp_path / "srv", {"qrels": "q00 0 r0 x\n"})
        assert _fields(body)[0].startswith("options.qrels") and body["line"] == 1
    assert backend.calls == 0
    given = tmp_path / "bad.csv"
    given.write_text(bad, encoding="utf-8")
    assert _cli(tmp_path, given, tmp_path / "no", "--qrels-level", "1") == 2
    assert "bad.csv:4: field 'query'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- experiments
@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Bundled:
    found = bundled(tmp_path_factory.mktemp("bundled"))
    shutil.copy(DATA / "bm25.toml", found.root / "shipped.toml")
    return found


def _quepid_csv() -> str:
    """The bundled query set's qrels as Quepid exports ratings: query TEXT,docid,rating."""
    rows = [json.loads(x) for x in (DATA / "queries.zh.jsonl").read_text(encoding="utf-8").splitlines()]
    texts = {r["id"]: r["query"] for r in rows}
    buf = io.StringIO(newline="")
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(["query", "docid", "rating"])
    for _, q, d, g, _ in read_qrels_lines(DATA / "queries.zh.qrels").rows():
        out.writerow([texts[q], d, g])
    return buf.getvalue()


def test_an_experiment_takes_a_quepid_csv_as_its_trec_qrels(data: Bundled, tmp_path: Path) -> None:
    config = make_config(tmp_path, backend=QrelsBackend(data.qrels))
    config.runtime.search_configs = register_configs([f"bm25={data.root / 'shipped.toml'}"])
    body: dict[str, Any] = {
        "queries": (DATA / "queries.zh.jsonl").read_text(encoding="utf-8"),
        "config": "bm25",
        "grid": {"k1": [1.2, 0.6]},
        "options": {"resamples": 200, "qrels_level": 1},
    }
    reports, views = {}, {}
    with TestClient(create_app(config)) as client:
        csv_text = _quepid_csv()
        lines = csv_text.splitlines()
        lines[1] = "不在查询集里,dog01,1"  # line 2: no query of the set has this text
        unknown = "\n".join(lines) + "\n"
        refused = client.post(
            "/v1/experiments", json={**body, "options": {**body["options"], "qrels": unknown}}
        )
        assert refused.status_code == 422, refused.text
        assert (refused.json()["field"], refused.json()["line"]) == ("options.qrels.query", 2)
        # graded labels and a binary judge meet only on a stated level: refused before anything runs
        graded = {**body["options"], "qrels": csv_text, "qrels_level": None}
        refused = client.post("/v1/experiments", json={**body, "options": graded})
        assert refused.status_code == 422 and refused.json()["field"] == "options.qrels_level", refused.text
        assert client.get("/v1/experiments").json()["experiments"] == []
        for name, qrels in (
            ("trec", (DATA / "queries.zh.qrels").read_text(encoding="utf-8")),
            ("csv", csv_text),
        ):
            posted = client.post(
                "/v1/experiments", json={**body, "options": {**body["options"], "qrels": qrels}}
            )
            assert posted.status_code == 202, posted.text
            job = wait_job(client, posted.json()["id"], timeout=300)
            assert job["status"] == "done", job
            reports[name] = client.get(f"/v1/experiments/{job['id']}/report").json()
            # the pair view loads the report from its folder, reading the labels again
            first, best = (c["name"] for c in reports[name]["experiment"]["configurations"])
            pair = client.get(f"/v1/experiments/{job['id']}/pair", params={"a": first, "b": best})
            assert pair.status_code == 200, pair.text
            views[name] = pair.json()["queries"]
    trec, by_csv = reports["trec"], reports["csv"]
    assert {n: s["measures"] for n, s in by_csv["systems"].items()} == {
        n: s["measures"] for n, s in trec["systems"].items()
    }
    assert by_csv["experiment"]["best"] == trec["experiment"]["best"]
    assert by_csv["experiment"]["best_value"] == trec["experiment"]["best_value"]
    assert by_csv["comparisons"] == trec["comparisons"]
    assert {k: v for k, v in by_csv["pool"].items() if k != "calls"} == {
        k: v for k, v in trec["pool"].items() if k != "calls"
    }
    assert by_csv["pool"]["human_labels"] > 0
    assert by_csv["conventions"]["human_labels_file"] == FILE_CONVENTIONS["csv"]
    assert "human_labels_file" not in trec["conventions"]
    assert views["csv"] == views["trec"]
