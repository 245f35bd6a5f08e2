"""Browser-facing defences: the same-origin rule for state changes made with the sign-in
cookie (CSRF), the security headers of every HTML page, and no query string (so no key) in
the access log of a real ``judge serve``."""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _server import ROOT, app_for, ndjson, records, serve_env, wait_job
from fastapi.testclient import TestClient

from judge.server._security import AccessLogRedactor, same_origin

KEY = "k-alpha"
NDJSON = {"Content-Type": "application/x-ndjson"}
EVIL = "http://evil.example"
HERE = "http://testserver"  # TestClient's Host


def _signed_in(c: Any) -> None:
    r = c.post("/login?next=/", data={"key": KEY}, follow_redirects=False)
    assert r.status_code == 303
    c.cookies.set("judge_session", r.cookies["judge_session"])


def _post_job(c: Any, headers: dict[str, str]) -> Any:
    return c.post("/v1/jobs", content=ndjson(records(1)), headers=headers)


# --- CSRF ------------------------------------------------------------------------------------
def test_cookie_requests_from_another_origin_are_refused(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, keys=[KEY])) as c:
        _signed_in(c)
        for headers in (
            {"Content-Type": "text/plain", "Origin": EVIL},
            {**NDJSON, "Origin": EVIL},
            {**NDJSON, "Origin": "http://testserver:8001"},  # another port of this host
            {**NDJSON, "Origin": "null"},
            {**NDJSON, "Sec-Fetch-Site": "cross-site", "Origin": EVIL},
            {**NDJSON, "Sec-Fetch-Site": "same-site", "Origin": "http://testserver:8001"},
        ):
            r = _post_job(c, headers)
            assert r.status_code == 403, headers
            assert "refused" in r.json()["detail"] and "Bearer" in r.json()["detail"]
        assert c.get("/v1/jobs").json()["jobs"] == []  # nothing was queued
        job = _post_job(c, {**NDJSON, "Origin": HERE, "Sec-Fetch-Site": "same-origin"})
        assert job.status_code == 202  # the viewer's own request
        cancel = c.post(f"/v1/jobs/{job.json()['id']}/cancel", headers={"Origin": EVIL})
        assert cancel.status_code == 403
        assert c.post("/logout", headers={"Origin": EVIL}, follow_redirects=False).status_code == 403
        evaluate = c.post(
            "/v1/evaluate", json={"query": "q", "retrieval_context": ["x"]}, headers={"Origin": EVIL}
        )
        assert evaluate.status_code == 403
        wait_job(c, job.json()["id"])
        assert _post_job(c, NDJSON).status_code == 202  # no Origin at all: not a browser's cross-site request


def test_cookie_requests_with_form_content_types_are_refused(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, keys=[KEY])) as c:
        _signed_in(c)
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            r = _post_job(c, {"Content-Type": ctype, "Origin": HERE})
            assert r.status_code == 403, ctype
            assert ctype.split(";")[0] in r.json()["detail"] and "application/json" in r.json()["detail"]
            r = c.post(
                "/v1/compare", content=b'{"systems": {}}', headers={"Content-Type": ctype, "Origin": HERE}
            )
            assert r.status_code == 403


def test_bearer_clients_are_not_checked(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, keys=[KEY])) as c:
        bearer = {"Authorization": f"Bearer {KEY}"}
        r = _post_job(
            c, {**bearer, "Content-Type": "text/plain", "Origin": EVIL, "Sec-Fetch-Site": "cross-site"}
        )
        assert r.status_code == 202
        wait_job(c, r.json()["id"], headers=bearer)


def test_sign_in_from_another_origin_is_refused(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, keys=[KEY])) as c:
        r = c.post("/login", data={"key": KEY}, headers={"Origin": EVIL}, follow_redirects=False)
        assert r.status_code == 403 and "judge_session" not in r.headers.get("set-cookie", "")
        r = c.post("/login", data={"key": KEY}, headers={"Origin": HERE}, follow_redirects=False)
        assert r.status_code == 303


def test_without_keys_browsers_from_other_origins_are_refused_too(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path)) as c:  # auth off: a page on the web could reach 127.0.0.1
        assert _post_job(c, {"Content-Type": "text/plain", "Origin": EVIL}).status_code == 403
        assert _post_job(c, {**NDJSON, "Sec-Fetch-Site": "cross-site"}).status_code == 403
        r = _post_job(c, {"Content-Type": "text/plain"})  # curl --data-binary: fine
        assert r.status_code == 202
        wait_job(c, r.json()["id"])


def test_same_origin() -> None:
    assert same_origin("http://127.0.0.1:8000", "127.0.0.1:8000")
    assert same_origin("https://judge.example.org", "judge.example.org")
    assert same_origin("https://judge.example.org", "judge.example.org:443")
    assert same_origin("http://[::1]:8000", "[::1]:8000")
    assert not same_origin("http://127.0.0.1:8001", "127.0.0.1:8000")
    assert not same_origin("http://127.0.0.1", "127.0.0.1:8000")
    assert not same_origin("null", "127.0.0.1:8000")
    assert not same_origin("http://evil.example", "judge.example.org")
    assert not same_origin("file://", "127.0.0.1:8000")
    assert not same_origin("http://a:notaport", "a")
    assert not same_origin("http://127.0.0.1:8000", None)


# --- headers ---------------------------------------------------------------------------------
def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def _assert_page_headers(r: Any) -> dict[str, str]:
    assert r.headers["content-type"].startswith("text/html")
    csp = {
        part.strip().split(" ", 1)[0]: part.strip().partition(" ")[2]
        for part in r.headers["content-security-policy"].split(";")
    }
    assert csp["script-src"] == "'self'" and csp["default-src"] == "'none'"
    assert "unsafe-inline" not in r.headers["content-security-policy"]
    assert csp["frame-ancestors"] == "'none'" and csp["object-src"] == "'none'"
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    return csp


def test_every_html_page_has_the_security_headers_and_no_inline_script(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, keys=[KEY])) as c:
        signin = c.get("/jobs/x", headers={"Accept": "text/html"})
        assert signin.status_code == 401
        csp = _assert_page_headers(signin)
        (style,) = re.findall(r"<style>(.*?)</style>", signin.text, re.S)
        assert _csp_hash(style) in csp["style-src"].split()  # its one style block, by hash
        assert "<script" not in signin.text
        _signed_in(c)
        for path in ("/", "/jobs/j1", "/compare/j1"):
            page = c.get(path)
            assert page.status_code == 200
            _assert_page_headers(page)
            scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", page.text, re.S | re.I)
            assert scripts and all(body.strip() == "" for body in scripts)  # src= only
            assert not re.search(r"\son[a-z]+\s*=", page.text, re.I)  # no inline handlers
            assert "style=" not in page.text
        api = c.get("/v1/jobs")
        assert api.headers["x-content-type-options"] == "nosniff"
        assert "content-security-policy" not in api.headers
        docs = c.get("/docs")
        assert "frame-ancestors 'none'" in docs.headers["content-security-policy"]
        assert docs.headers["x-frame-options"] == "DENY"


def test_viewer_scripts_set_no_inline_style_attribute() -> None:
    static = ROOT / "judge" / "server" / "static"
    for name in ("app.js", "compare.js"):
        text = (static / name).read_text(encoding="utf-8")
        assert "innerHTML" not in text and 'setAttribute("style"' not in text, name
    assert "node.style.cssText" in (static / "app.js").read_text(encoding="utf-8")


# --- logs ------------------------------------------------------------------------------------
def test_access_log_filter_drops_the_query_string() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/v1/jobs?api_key=s3cret&x=1", "1.1", 401),
        None,
    )
    assert AccessLogRedactor().filter(record)
    assert record.getMessage() == '127.0.0.1:5 - "GET /v1/jobs?[query redacted] HTTP/1.1" 401'


def test_no_query_string_in_a_real_servers_access_log(tmp_path: Path) -> None:
    env = serve_env(tmp_path, JUDGE_API_KEYS=KEY)
    log = tmp_path / "serve.log"
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "judge", "serve", "--host", "127.0.0.1", "--port", "0"),
                *("--backend-factory", "_server:fake_backend", "--db", str(tmp_path / "s.sqlite")),
                *("--log-level", "info"),
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        try:
            assert proc.stdout is not None
            url = None
            deadline = time.monotonic() + 60
            while url is None and time.monotonic() < deadline:
                line = proc.stdout.readline()
                assert line, log.read_text(encoding="utf-8")
                m = re.search(r"listening on (http://\S+)", line)
                url = m.group(1) if m else None
            assert url is not None
            for path, code in (
                ("/v1/info?api_key=query-secret-1", 401),
                ("/healthz?token=query-secret-2", 200),
                ("/v1/jobs?limit=5&key=query-secret-3", 200),
            ):
                req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {KEY}"})
                if code == 401:
                    req = urllib.request.Request(url + path)
                try:
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        assert resp.status == code
                except urllib.error.HTTPError as exc:
                    assert exc.code == code
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=30)  # uvicorn's access log goes to stdout
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
    text = out + log.read_text(encoding="utf-8")
    assert '"GET /v1/info?[query redacted] HTTP/1.1" 401' in text, text
    assert '"GET /healthz?[query redacted] HTTP/1.1" 200' in text
    assert "query-secret" not in text and KEY not in text
