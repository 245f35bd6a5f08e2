"""The review page of a comparison in a real browser (Debian's chromium driven by
playwright): a verdict opened without a reason gets it from the server (reasons on request),
and a reason the judge could not give is said on the page with a way to ask again."""

from __future__ import annotations

import json
import time
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

from _reasons_fake import NO_REASON  # noqa: E402
from _server import serve_env, serve_process  # noqa: E402

# P(yes) of each passage (distinct, so the queue's order is fixed); y3 cannot be explained.
P = {"x1": 0.9, "x2": 0.8, "x3": 0.7, "x4": 0.6, "y1": 0.85, "y2": 0.75, "y3": 0.65}
P.update({f"c{i}": 0.95 - 0.01 * i for i in range(1, 6)})
A = ["x1", "x2", "x3", "x4", "c1", "c2", "c3", "c4", "c5"]
B = ["y1", "y2", "y3", "c1", "c2", "c3", "c4", "c5"]


# A selector, not wait_for_function: polling a function string evaluates it in the page, which
# its CSP (no unsafe-eval) refuses.
REASON_SHOWN = "#cur-reason:has-text('模型估计')"


def _ranking(docnos: list[str]) -> list[dict[str, Any]]:
    def text(d: str) -> str:
        return f"第 {d} 段说明。[p={P[d]:.2f}]" + (NO_REASON if d == "y3" else "")

    return [
        {
            "id": "q0",
            "query": "小狗贫血的表现",
            "retrieval_context": [{"id": d, "text": text(d)} for d in docnos],
        }
    ]


def _call(url: str, method: str = "GET", body: Any = None) -> Any:
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_the_review_page_asks_the_reason_of_the_pair_it_opens(tmp_path: Path) -> None:
    args = ["--backend-factory", "_reasons_fake:backend", "--db", str(tmp_path / "s.sqlite")]
    options = {"top_queries": 1, "top_passages": 1, "seed": 1, "resamples": 200, "stability_resamples": 50}
    with serve_process(args, serve_env(tmp_path)) as (_proc, url), sync_api.sync_playwright() as p:
        body = {"systems": {"A": _ranking(A), "B": _ranking(B)}, "options": options}
        job_id = _call(url + "/v1/compare", "POST", body)["id"]
        for _ in range(1200):  # bounded: at most 1200 polls, 50 ms apart
            job = _call(f"{url}/v1/jobs/{job_id}")
            if job["status"] in ("done", "failed"):
                break
            time.sleep(0.05)
        assert job["status"] == "done", job.get("error")
        items = _call(f"{url}/v1/jobs/{job_id}/queue?limit=100")["items"]
        missing = [i for i, it in enumerate(items) if not it["reason"]]
        plain = next(i for i in missing if items[i]["docno"] != "y3")
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(f"{url}/jobs/{job_id}/review")
            page.wait_for_selector("body[data-ready='1']")
            # The queue's first item is the borderline y3 (P(yes) 0.65 against 0.575): its
            # reason failed with the job, so the page asks it and says why there is none.
            assert items[0]["docno"] == "y3" and "y3" in page.inner_text("#current .muted")
            page.wait_for_selector("#cur-reason[data-error='1']")
            shown = page.inner_text("#cur-reason")
            assert shown.startswith("No reason:") and "'y3'" in shown and "ask again" in shown
            assert page.locator("#reason-again").count() == 1
            # A pair asked with the job shows its reason at once; one nobody asked gets it now.
            asked = next(i for i, it in enumerate(items) if it["reason"])
            page.click(f"#queue li[data-pos='{asked}']")
            assert page.inner_text("#cur-reason") == items[asked]["reason"]
            page.click(f"#queue li[data-pos='{plain}']")
            page.wait_for_selector(REASON_SHOWN)
            assert f"{P[items[plain]['docno']]:.2f}" in page.inner_text("#cur-reason")
        finally:
            browser.close()
        # what the page asked is kept: the queue now carries the reason it fetched
        again = {
            it["docno"]: it["reason"] for it in _call(f"{url}/v1/jobs/{job_id}/queue?limit=100")["items"]
        }
        assert again[items[plain]["docno"]] and not again["y3"]
