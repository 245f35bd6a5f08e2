"""Calibration says when a refit threshold does not help: per-fold held-out kappa before and
after, the gain's noise band, and a refusal to offer a refit that is not better beyond noise
(the metric, ``judge calibrate`` and the server's calibrate route)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from judge.metrics import calibrate_threshold
from judge.metrics._label_agreement import _folds


def _kappa_2x2(y: np.ndarray, pred: np.ndarray) -> float:
    """Cohen's kappa by the textbook formula (p_o - p_e) / (1 - p_e) on a 2x2 table."""
    n = y.size
    p_o = float(np.mean(y == pred))
    p_e = (y.sum() * pred.sum() + (n - y.sum()) * (n - pred.sum())) / n**2
    return (p_o - p_e) / (1 - p_e)


def test_a_refit_that_separates_the_classes_helps() -> None:
    # 20 negatives all at P(yes) 0.6 and 20 positives all at 0.8; the current threshold 0.5
    # calls everything yes: p_o = 0.5, p_e = 0.5 * 1 + 0.5 * 0 = 0.5, kappa 0 on every fold
    # (each stratified fold: 4 negatives, 4 positives). Fitted without the fold, the threshold
    # is the midpoint 0.7, which separates every held-out fold: kappa 1.
    r = calibrate_threshold([0.6] * 20 + [0.8] * 20, [0] * 20 + [1] * 20, current_threshold=0.5, folds=5)
    assert r.fold_thresholds == [0.7] * 5 and r.threshold == 0.7
    assert r.fold_kappa_before == [0.0] * 5 and r.fold_kappa_after == [1.0] * 5
    # pooled the same: 0 -> 1; every bootstrap resample holding both classes gains exactly 1
    assert r.kappa_before == 0.0 and r.kappa_after == 1.0 and r.kappa_gain == 1.0
    assert r.kappa_gain_band == (1.0, 1.0) and r.fold_gain_se == 0.0
    assert r.helps and r.verdict.startswith("the refit threshold helps")
    d = r.as_dict()
    assert d["cv_kappa_before"] == 0.0 and d["cv_kappa_after"] == 1.0 and d["helps"] is True
    assert d["kappa_gain_band"] == [1.0, 1.0] and d["folds"] == 5 and d["seed"] == 0


def test_a_refit_that_changes_nothing_does_not_help() -> None:
    # P(yes) 0.2 or 0.8, each with 10 positives and 10 negatives: the labels say nothing
    # about P(yes). The only candidate besides the current 0.5 is the midpoint 0.5 itself,
    # so every fold keeps 0.5: gain 0 on every fold, band [0, 0], not above zero.
    p = [0.2] * 20 + [0.8] * 20
    y = [0] * 10 + [1] * 10 + [0] * 10 + [1] * 10
    r = calibrate_threshold(p, y, current_threshold=0.5, folds=5)
    assert r.fold_kappa_after == r.fold_kappa_before
    assert r.kappa_gain == 0.0 and r.kappa_gain_band == (0.0, 0.0) and not r.helps
    assert "does not help" in r.verdict and "keep the current one" in r.verdict
    assert r.as_dict()["helps"] is False


def test_random_labels_are_not_called_helpful_and_the_figures_match_the_formulas() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, 60)
    y = rng.integers(0, 2, 60)
    r = calibrate_threshold(p, y, current_threshold=0.5, folds=5, seed=0)
    folds = _folds(y, 5, 0)
    before = [_kappa_2x2(y[f], (p[f] >= 0.5).astype(int)) for f in folds]
    after = [_kappa_2x2(y[f], (p[f] >= t).astype(int)) for f, t in zip(folds, r.fold_thresholds, strict=True)]
    assert r.fold_kappa_before == pytest.approx(before, abs=1e-6)
    assert r.fold_kappa_after == pytest.approx(after, abs=1e-6)
    gains = np.array(after) - np.array(before)
    se = float(np.std(gains, ddof=1)) * math.sqrt(1 / 5 + 1 / 4)
    assert r.fold_gain_se == pytest.approx(se, abs=1e-5)
    # The band: the same seeded resamples of the items, kappa by the 2x2 formula.
    pred = np.zeros(60, dtype=int)
    for f, t in zip(folds, r.fold_thresholds, strict=True):
        pred[f] = p[f] >= t
    cur = (p >= 0.5).astype(int)
    idx = np.random.default_rng(0).integers(0, 60, size=(2000, 60))
    diffs = [_kappa_2x2(y[i], pred[i]) - _kappa_2x2(y[i], cur[i]) for i in idx]
    lo, hi = np.quantile([d for d in diffs if math.isfinite(d)], [0.01, 0.99])  # a 98% band
    assert r.kappa_gain_band == pytest.approx((lo, hi), abs=1e-5)
    assert r.kappa_gain == pytest.approx(_kappa_2x2(y, pred) - _kappa_2x2(y, cur), abs=1e-5)
    assert not r.helps and r.kappa_gain_band is not None and r.kappa_gain_band[0] <= 0
    # Over 40 random-label sets, a refit is called helpful rarely (measured: 2 of 40).
    helped = 0
    for s in range(40):
        g = np.random.default_rng(100 + s)
        pp, yy = g.uniform(0, 1, 60), g.integers(0, 2, 60)
        helped += calibrate_threshold(pp, yy, seed=s).helps
    assert helped <= 2


def test_a_noisy_but_real_threshold_helps() -> None:
    rng = np.random.default_rng(3)
    p = rng.uniform(0, 1, 600)
    y = (rng.uniform(0, 1, 600) < 1 / (1 + np.exp(-(p - 0.7) * 40))).astype(int)
    r = calibrate_threshold(p, y, current_threshold=0.5, folds=5, seed=0)
    assert r.helps and r.kappa_gain_band is not None and r.kappa_gain_band[0] > 0


# --- judge calibrate -------------------------------------------------------------------------
def _judged(path: Path, ps: list[float]) -> Path:
    verdicts = [
        {
            "index": i,
            "passage_id": f"p{i}",
            "verdict": "yes" if p >= 0.575 else "no",
            "p_yes": p,
            "template_id": "binary.zh.v2",
            "template_hash": "x",
            "backend": "fake",
        }
        for i, p in enumerate(ps)
    ]
    record = {"id": "q0", "query": "q", "mode": "binary", "docnos": [f"p{i}" for i in range(len(ps))]}
    path.write_text(json.dumps({**record, "verdicts": verdicts}) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "home"))
    yield tmp_path


def test_judge_calibrate_stores_only_a_refit_that_helps(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from judge.cli import main
    from judge.store import LabelStore

    rng = np.random.default_rng(7)
    ps = [round(float(x), 4) for x in rng.uniform(0, 1, 60)]
    judged = _judged(home / "j.jsonl", ps)
    base = ["calibrate", "--judged", str(judged), "--template", "binary.zh.v2"]
    # Labels drawn at random, whatever P(yes) says: reported, not stored, said plainly.
    noise = home / "noise.qrels"
    noise.write_text("".join(f"q0 0 p{i} {int(rng.integers(0, 2))}\n" for i in range(60)), encoding="utf-8")
    assert main([*base, "--labels", str(noise), "--name", "noise"]) == 0
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert report["helps"] is False and report["stored"] is False
    assert len(report["fold_kappa_before"]) == report["folds"] == 5
    assert report["kappa_gain_band"][0] <= 0
    assert "does not help" in out.err and "not stored" in out.err and "--calibration" not in out.err
    with LabelStore() as store:
        assert store.calibration("noise") is None
    # --force stores it anyway, and says so.
    assert main([*base, "--labels", str(noise), "--name", "noise", "--force"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["stored"] is True and "--force" in out.err
    with LabelStore() as store:
        assert store.calibration("noise") is not None
    # Labels that follow P(yes) >= 0.7: the refit helps and is stored.
    clean = home / "clean.qrels"
    clean.write_text("".join(f"q0 0 p{i} {int(p >= 0.7)}\n" for i, p in enumerate(ps)), encoding="utf-8")
    assert main([*base, "--labels", str(clean), "--name", "clean"]) == 0
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert report["helps"] is True and report["stored"] is True and report["kappa_gain_band"][0] > 0
    assert "helps" in out.err and "--calibration clean" in out.err


# --- the server's calibrate route ------------------------------------------------------------
def test_the_calibrate_route_reports_and_refuses_a_refit_that_does_not_help(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from _review import p_backend
    from _server import app_for, wait_job
    from fastapi.testclient import TestClient

    from judge.store import LabelStore

    rng = np.random.default_rng(11)
    ps = [round(float(x), 3) for x in rng.uniform(0.01, 0.99, 40)]
    recs = [
        {
            "id": f"c{i}",
            "query": f"校准问题{i}",
            "retrieval_context": [
                {"id": f"d{j}", "text": f"段落{i}-{j} [p={ps[4 * i + j]:.3f}]"} for j in range(4)
            ],
        }
        for i in range(10)
    ]
    noise = [int(x) for x in rng.integers(0, 2, 40)]
    with TestClient(app_for(tmp_path, backend=p_backend())) as c:
        opts = {"probability": True, "explain": True, "p_yes_threshold": 0.5, "k": [3]}
        r = c.post("/v1/jobs", json={"records": recs, "options": opts})
        job_id = r.json()["id"]
        assert wait_job(c, job_id)["status"] == "done"
        for n, v in enumerate(noise):
            body = {"query_id": f"c{n // 4}", "docno": f"d{n % 4}", "label": v}
            assert c.post(f"/v1/jobs/{job_id}/labels", json=body).status_code == 201
        r = c.post(f"/v1/jobs/{job_id}/calibrate", json={"name": "noise"})
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["stored"] is False and data["helps"] is False and "does not help" in data["verdict"]
        rep = data["report"]
        for key in ("fold_kappa_before", "fold_kappa_after", "cv_kappa_before", "cv_kappa_after"):
            assert key in rep
        assert len(rep["fold_kappa_before"]) == rep["folds"] == 5 and rep["kappa_gain_band"][0] <= 0
        with LabelStore(tmp_path / "labels.sqlite") as store:
            assert store.calibration("noise") is None
        # Not stored, so no job can select it.
        r = c.post(
            "/v1/jobs", json={"records": recs[:1], "options": {"probability": True, "calibration": "noise"}}
        )
        assert r.status_code == 422
        # force stores it (201); dry_run never stores.
        r = c.post(f"/v1/jobs/{job_id}/calibrate", json={"name": "noise2", "dry_run": True, "force": True})
        assert r.status_code == 200 and r.json()["stored"] is False
        r = c.post(f"/v1/jobs/{job_id}/calibrate", json={"name": "noise", "force": True})
        assert r.status_code == 201 and r.json()["stored"] is True and r.json()["helps"] is False
        # Relabelled by the rule P(yes) >= 0.7: the refit helps and is stored.
        for n, p in enumerate(ps):
            body = {"query_id": f"c{n // 4}", "docno": f"d{n % 4}", "label": int(p >= 0.7)}
            assert c.post(f"/v1/jobs/{job_id}/labels", json=body).status_code == 201
        r = c.post(f"/v1/jobs/{job_id}/calibrate", json={"name": "clean"})
        assert r.status_code == 201, r.text
        assert r.json()["stored"] is True and r.json()["helps"] is True
        assert r.json()["report"]["kappa_gain_band"][0] > 0
