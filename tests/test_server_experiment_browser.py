"""The viewer's experiment page (``/experiments/{id}``) in a real browser (Debian's chromium
driven by playwright): the answer first, the configurations' table, the heat map of the 2 x 2
grid, and two configurations side by side sorted by their per-query difference, with the
passages only one of them returned marked; a reason on request and a passage sent to the
review queue. ``judge serve`` runs with a registered embedded index over the bundled Chinese
corpus and the qrels-backed judge.

With ``JUDGE_DOCS_SCREENSHOT=1`` the screenshot is also written to
``docs/server-experiment.png`` (the guide "Experiments as a team" shows it).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest
from test_server_browser import CHROMIUM, FIT_CHECK, _watch_csp, pytestmark  # noqa: F401

sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")

from _experiment_fixtures import DATA, bundled  # noqa: E402
from _server import ROOT, serve_env, serve_process  # noqa: E402


def _post(url: str, body: dict[str, object]) -> str:
    req = urllib.request.Request(
        url + "/v1/experiments",
        data=json.dumps(body, ensure_ascii=False).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 202
        job_id: str = json.loads(resp.read())["id"]
    return job_id


def test_the_experiment_page_answers_first_and_sets_two_configurations_side_by_side(tmp_path: Path) -> None:
    data = bundled(tmp_path)
    shutil.copy(DATA / "bm25.toml", tmp_path / "shipped.toml")
    args = [
        "--search-config",
        f"bm25={tmp_path / 'shipped.toml'}",
        "--backend",
        f"qrels:{data.qrels}",
        "--db",
        str(tmp_path / "s.sqlite"),
    ]
    body = {
        "queries": (DATA / "queries.zh.jsonl").read_text(encoding="utf-8"),
        "config": "bm25",
        "grid": {"k1": [0.6, 1.2], "b": [0.3, 0.75]},
        "options": {"depth": 3, "resamples": 1000},
    }
    shot = tmp_path / "experiment.png"
    with serve_process(args, serve_env(tmp_path)) as (_proc, url), sync_api.sync_playwright() as p:
        job_id = _post(url, body)
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.set_default_timeout(60_000)
            refused = _watch_csp(page)
            page.goto(url + "/")
            page.wait_for_selector(f"#jobs tr[data-job='{job_id}'] a.kind.experiment")
            page.click(f"#jobs tr[data-job='{job_id}'] a.kind.experiment")  # linked from the job list
            page.wait_for_url(f"**/experiments/{job_id}")
            page.wait_for_selector("#job-head [data-status=done]")  # followed over server-sent events
            page.wait_for_selector("#answer")
            report = json.loads(urllib.request.urlopen(f"{url}/v1/experiments/{job_id}/report").read())
            e = report["experiment"]
            # The answer comes first: the best, its interval, its test against the baseline.
            first = page.locator("#experiment-body > *").first
            assert first.get_attribute("id") == "answer"
            assert page.get_attribute("#answer", "data-best") == e["best"]
            assert "interval" in page.inner_text("#best-ci")
            assert e["best_vs_baseline"] in page.inner_text("#best-test")
            assert page.locator("#configs tbody tr").count() == 4
            assert page.locator("#heatmap td.hm").count() == 4
            assert page.get_attribute("#heatmap td.hm.best", "data-config") == e["best"]
            # The best's tie group, every pair of configurations, and which figure was tested.
            assert e["tie_group"][0] == e["best"]
            assert page.get_attribute("#tie-group", "data-members") == " ".join(e["tie_group"])
            assert page.locator("#pairwise tbody tr").count() == len(e["pairwise"]) == 6
            figure = report["conventions"]["tested_figure"]
            assert page.get_attribute("#tested-figure", "data-figure") == figure
            # Two configurations side by side, largest disagreement first.
            names = [c["name"] for c in e["configurations"]]
            page.select_option("#pick-a", names[0])
            page.select_option("#pick-b", names[3])
            page.wait_for_selector(f"#pair[data-a='{names[0]}'][data-b='{names[3]}']")
            assert page.locator("#pair .pq").count() == 16
            diffs = [page.get_attribute(f"#pair .pq:nth-child({i})", "data-diff") for i in range(1, 17)]
            sizes = [abs(float(d)) for d in diffs if d]
            assert sizes == sorted(sizes, reverse=True) and sizes[0] > 0
            pair = json.loads(
                urllib.request.urlopen(f"{url}/v1/experiments/{job_id}/pair?a={names[0]}&b={names[3]}").read()
            )
            assert pair["queries"][0]["id"] == page.get_attribute("#pair .pq", "data-qid")
            only = page.locator("#pair li.only")
            expected_only = sum(q["only_a"] + q["only_b"] for q in pair["queries"])
            assert expected_only > 0 and only.count() == expected_only
            assert "only" in only.first.inner_text()
            top = page.locator("#pair .pq").first
            assert top.locator(".dcol[data-side=a] li").count() == 3  # the pool's depth
            # A reason on request.
            reason = top.locator(".dcol[data-side=b] li").first.locator(".reason")
            assert reason.is_hidden()
            top.locator(".dcol[data-side=b] li .reason-btn").first.click()
            assert "qrels label" in reason.inner_text()
            # Another order, then back.
            page.select_option("#pair-order", "query")
            page.wait_for_selector("#pair[data-order=query]")
            assert page.get_attribute("#pair .pq", "data-qid") == "q01"
            page.select_option("#pair-order", "disagreement")
            page.wait_for_selector("#pair[data-order=disagreement]")
            assert page.get_attribute("#pair .pq", "data-qid") == pair["queries"][0]["id"]
            page.set_viewport_size({"width": 1280, "height": 1000})
            overflow = page.evaluate(FIT_CHECK)
            assert overflow["tables"] == [] and overflow["page"] == 0, overflow
            page.set_viewport_size({"width": 1280, "height": 1700})
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(shot))  # the answer, the table, the heat map, the first queries
            # From there, a passage goes to the review queue, opened at it.
            marked = page.locator("#pair li.only").first
            docno = marked.get_attribute("data-docno")
            text = marked.locator(".text").inner_text()
            marked.locator("a.review-link").click()
            page.wait_for_url(f"**/jobs/{job_id}/review?*")
            page.wait_for_selector("#cur-text")
            assert page.inner_text("#cur-text") == text and docno in page.inner_text("#current")
            assert refused == []  # everything ran under the CSP
        finally:
            browser.close()
    print(f"experiment screenshot: {shot}")
    assert shot.stat().st_size > 10_000
    if os.environ.get("JUDGE_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(shot, ROOT / "docs" / "server-experiment.png")
