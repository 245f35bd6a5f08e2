"""The review page in a real browser (Debian's chromium driven by playwright): a reviewer
signs in, opens a job, reviews the first five verdicts of the queue with the keyboard and
watches the job's mAP, the agreement panel and the queue change; a reload shows the labels
kept; a second reviewer's different label shows as a conflict.

The judge is a fake whose P(yes) is written in each passage (``tests/_review.py``), so the
queue's order is known: its first four are borderline verdicts (P(yes) 0.48-0.53) whose
flip moves the job's mAP, the fifth an audit draw.
With ``JUDGE_DOCS_SCREENSHOT=1`` the screenshot is also written to ``docs/server-review.png``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium (/usr/bin/chromium): apt-get install chromium"
    ),
]
pytest.importorskip("fastapi")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")

from _review import TABLE, records  # noqa: E402
from _server import ROOT, serve_env, serve_process  # noqa: E402

ALICE = "alice-review-key"
ALICE_PRINCIPAL = "key-" + hashlib.sha256(b"key:" + ALICE.encode()).hexdigest()[:8] + "/alice"
BOB = "bob-review-key"
OPTIONS = {"probability": True, "explain": True, "p_yes_threshold": 0.5, "k": [3]}


def _call(url: str, key: str, method: str = "GET", body: Any = None) -> Any:
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _watch_csp(page: Any) -> list[str]:
    """The page's console messages about its Content-Security-Policy (a refused inline script
    or style shows there): the review page must run without any."""
    refused: list[str] = []
    page.on(
        "console", lambda msg: refused.append(msg.text) if "Content Security Policy" in msg.text else None
    )
    return refused


def _truth(query_id: str, docno: str) -> int:
    return TABLE[int(query_id[1:])][2][int(docno[1:])]


def test_review_five_with_the_keyboard_in_chromium(tmp_path: Path) -> None:
    env = serve_env(tmp_path, JUDGE_API_KEYS=f"{ALICE},{BOB}")
    args = ["--backend-factory", "_review:p_backend", "--db", str(tmp_path / "s.sqlite")]
    shot = tmp_path / "review.png"
    with serve_process(args, env) as (_proc, url), sync_api.sync_playwright() as p:
        job = _call(url + "/v1/jobs", ALICE, "POST", {"records": records(), "options": OPTIONS})
        job_id = job["id"]
        for _ in range(600):  # bounded: 600 polls of the job, each a request
            job = _call(f"{url}/v1/jobs/{job_id}", ALICE)
            if job["status"] == "done":
                break
        assert job["status"] == "done"
        queue = _call(f"{url}/v1/jobs/{job_id}/queue?limit=50", ALICE)
        first5 = queue["items"][:5]
        map_before = job["summary"]["judge"]["map"]
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(f"{url}/jobs/{job_id}")
            refused = _watch_csp(page)
            page.fill("input[name=key]", ALICE)
            if page.locator("input[name=name]").count():  # a sign-in form that takes a name
                page.fill("input[name=name]", "alice")
            page.click("button[type=submit]")
            page.wait_for_selector("#review-link")  # the job page links to its review page
            page.click("#review-link")
            page.wait_for_url(f"**/jobs/{job_id}/review")
            page.wait_for_selector("body[data-ready='1']")
            if page.is_enabled("#reviewer"):  # no name from sign-in: the page asks for one
                page.fill("#reviewer", "alice")
                page.keyboard.press("Escape")
            # the signed-in name behind the key's label (a name is unique per key)
            assert page.input_value("#reviewer") == ALICE_PRINCIPAL
            assert page.inner_text("#stat-queue .v") == str(queue["total"])
            assert "No labelled items yet" in page.inner_text("#agree-overall")
            map_shown = page.inner_text("#stat-map .v")
            assert float(map_shown) == pytest.approx(map_before, abs=1e-4)
            # The page shows the queue's first item: query, passage, verdict, P(yes) vs threshold.
            top = first5[0]
            assert page.inner_text("#cur-query") == top["query"]
            assert f"{top['p_yes']:.3f}" == page.inner_text("#cur-p")
            assert page.inner_text("#cur-threshold") == "0.500"
            assert "模型估计的相关概率为" in page.inner_text("#cur-reason")
            # j/k move; then label the first five with the keyboard, as the ground truth says.
            page.keyboard.press("j")
            assert page.inner_text("#cur-query") == first5[1]["query"]
            page.keyboard.press("k")
            assert page.inner_text("#cur-query") == top["query"]
            for i, item in enumerate(first5):
                shown = page.inner_text("#current .muted")
                assert f"query {item['query_id']} · rank {item['rank']}" in shown
                page.keyboard.press("y" if _truth(item["query_id"], item["docno"]) else "n")
                if i == 0:
                    page.keyboard.press("c")  # the comment field
                    page.keyboard.type("明显无关")
                page.keyboard.press("Enter")
                page.wait_for_selector(f"body[data-saved='{i + 1}']")
            assert page.inner_text("#stat-queue .v") == str(queue["total"] - 5)
            assert page.inner_text("#agree-overall [data-fig=n]") == "5"
            map_after = float(page.inner_text("#stat-map .v"))
            assert map_after != pytest.approx(map_before, abs=1e-6)
            server = _call(f"{url}/v1/jobs/{job_id}", ALICE)
            assert map_after == pytest.approx(server["summary"]["judge"]["map"], abs=1e-4)
            assert int(page.inner_text("#stat-human .v")) == 5
            assert int(page.inner_text("#stat-borderline .v")) < int(job["review"]["borderline"])
            # A reload shows the labels kept: out of the queue, in the agreement panel.
            page.reload()
            page.wait_for_selector("body[data-ready='1']")
            assert page.inner_text("#stat-queue .v") == str(queue["total"] - 5)
            assert page.inner_text("#agree-overall [data-fig=n]") == "5"
            keys = [li.get_attribute("data-key") for li in page.locator("#queue li").all()]
            assert not {it["key"] for it in first5} & set(keys)
            assert "None." in page.inner_text("#conflicts")
            stored = _call(f"{url}/v1/labels?format=json", ALICE)["labels"]
            assert len(stored) == 5 and {x["reviewer"] for x in stored} == {ALICE_PRINCIPAL}
            first = next(x for x in stored if (x["qid"], x["docno"]) == (top["query_id"], top["docno"]))
            assert first["comment"] == "明显无关" and first["judge_p_yes"] == top["p_yes"]
            assert sum(x["audit"] for x in stored) == sum(it["audit"] for it in first5) == 1
            # Bob disagrees with alice on the first item: a conflict.
            bob = _call(
                f"{url}/v1/jobs/{job_id}/labels",
                BOB,
                "POST",
                {
                    "query_id": top["query_id"],
                    "docno": top["docno"],
                    "label": 1 - _truth(top["query_id"], top["docno"]),
                    "reviewer": "bob",
                },
            )
            page.reload()
            page.wait_for_selector("body[data-ready='1']")
            conflict = page.locator(
                f"#conflicts li[data-query='{top['query_id']}'][data-docno='{top['docno']}']"
            )
            assert conflict.count() == 1
            text = conflict.inner_text()
            bob_name = bob["label"]["reviewer"]  # "bob", or the key's label when the server names callers
            assert bob_name != "alice" and "alice" in text and bob_name in text
            assert "Conflicts between reviewers (1)" in page.inner_text("#conflicts")
            page.screenshot(path=str(shot), full_page=True)
            # The calibrate action refuses five labels (it needs 30); typing its name moves nothing.
            page.fill("#calibrate-name", "jk")
            page.click("#calibrate")
            page.wait_for_selector("#calibrate-result.err")
            assert "30" in page.inner_text("#calibrate-result")
            # The job page: the summary with the labels, the agreement panel and the conflict.
            page.goto(f"{url}/jobs/{job_id}")
            page.wait_for_selector("#agreement")
            summary = page.inner_text("#summary")
            assert "mAP (judge + people)" in summary and "decided by people" in summary
            assert "Conflicts between reviewers (1)" in page.inner_text("#conflicts")
            assert refused == []  # everything ran under the page's Content-Security-Policy, if any
        finally:
            browser.close()
    print(f"review screenshot: {shot}")
    assert shot.stat().st_size > 10_000
    if os.environ.get("JUDGE_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(shot, ROOT / "docs" / "server-review.png")


def test_sample_mode_in_chromium(tmp_path: Path) -> None:
    """The side panel's sample mode draws pairs (POST /v1/jobs/{id}/sample), the page lists
    them with their inclusion probability, and a label saved there carries it into the
    sample file (GET /v1/labels?format=sample&job=ID)."""
    env = serve_env(tmp_path, JUDGE_API_KEYS=ALICE)
    args = ["--backend-factory", "_review:p_backend", "--db", str(tmp_path / "s.sqlite")]
    with serve_process(args, env) as (_proc, url), sync_api.sync_playwright() as p:
        job_id = _call(url + "/v1/jobs", ALICE, "POST", {"records": records(), "options": OPTIONS})["id"]
        for _ in range(600):  # bounded: 600 polls of the job, each a request
            if _call(f"{url}/v1/jobs/{job_id}", ALICE)["status"] == "done":
                break
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.set_default_timeout(30_000)
            refused = _watch_csp(page)
            page.goto(f"{url}/jobs/{job_id}/review")
            page.fill("input[name=key]", ALICE)
            if page.locator("input[name=name]").count():
                page.fill("input[name=name]", "alice")
            page.click("button[type=submit]")
            page.wait_for_selector("body[data-ready='1']")
            page.fill("#sample-n", "6")
            page.select_option("#sample-design", "uniform")
            page.fill("#sample-seed", "3")
            page.click("#sample-draw")
            page.wait_for_url(f"**/jobs/{job_id}/review?mode=sample")
            page.wait_for_selector("body[data-ready='1']")
            drawn = _call(f"{url}/v1/jobs/{job_id}/sample", ALICE)
            assert drawn["count"] > 0
            assert page.locator("#queue li").count() == drawn["count"]
            first = drawn["items"][0]
            assert page.inner_text("#cur-query") == first["query"]
            assert "drawn with probability 0.250 (uniform)" in page.inner_text("#current .muted")
            assert page.inner_text("#stat-queue .v") == str(drawn["count"])
            page.keyboard.press("y")
            page.keyboard.press("Enter")
            page.wait_for_selector("body[data-saved='1']")
            assert page.inner_text("#stat-queue .v") == str(drawn["count"] - 1)
            req = urllib.request.Request(
                f"{url}/v1/labels?format=sample&job={job_id}", headers={"Authorization": f"Bearer {ALICE}"}
            )
            with urllib.request.urlopen(req, timeout=30) as resp:
                lines = resp.read().decode("utf-8").splitlines()[1:]
            # the job's sample file: the labelled pair, and every other drawn pair named unlabelled (-1)
            assert f"{first['query_id']} 0 {first['docno']} 1 0.25" in lines
            unlabelled = sum(x.split()[3] == "-1" for x in lines)
            assert len(lines) == drawn["count"] and unlabelled == drawn["count"] - 1
            assert refused == []
        finally:
            browser.close()
