"""The viewer's sessions: random tokens stored hashed with an expiry, revoked by sign-out and
by a change of the key set; the reviewer name and ``request.state.principal``; the cookie's
``Secure`` flag over HTTPS (and behind a proxy only when told to trust it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _server import app_for, make_config
from fastapi import Request
from fastapi.testclient import TestClient

from judge.server import create_app
from judge.server._auth import KeyRing
from judge.server._db import JobDB, sha256_hex
from judge.server._sessions import SessionStore, clean_name

KEYS = ["k-alpha", "k-beta"]
LABEL_ALPHA = "key-" + sha256_hex("key:k-alpha")[:8]


def _whoami(app: Any) -> Any:
    """A probe route that shows ``request.state.principal`` (the contract other routes use)."""

    @app.get("/probe/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        return {"principal": request.state.principal, "via": request.state.auth_via}

    return app


def _sign_in(c: Any, key: str = "k-alpha", name: str | None = None) -> Any:
    data = {"key": key} if name is None else {"key": key, "name": name}
    return c.post("/login?next=/", data=data, follow_redirects=False)


def _rows(tmp_path: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(tmp_path / "server.sqlite")
    try:
        return list(
            db.execute("SELECT token_hash, principal, key_label, keyring, created, expires FROM sessions")
        )
    finally:
        db.close()


def test_sign_in_makes_a_random_session_stored_hashed_with_an_expiry(tmp_path: Path) -> None:
    with TestClient(_whoami(app_for(tmp_path, keys=KEYS))) as c:
        first = _sign_in(c)
        second = _sign_in(c)
        assert first.status_code == second.status_code == 303
        a, b = first.cookies["judge_session"], second.cookies["judge_session"]
        assert a != b and len(a) >= 40  # random per sign-in, not a digest of the key
        header = first.headers["set-cookie"].lower()
        assert "httponly" in header and "samesite=strict" in header and "max-age=43200" in header
        assert "secure" not in header  # plain http
        rows = _rows(tmp_path)
        assert len(rows) == 2 and {r[0] for r in rows} == {
            sha256_hex("session:" + a),
            sha256_hex("session:" + b),
        }
        assert all(r[5] - r[4] == pytest.approx(12 * 3600) for r in rows)
        c.cookies.clear()
        c.cookies.set("judge_session", a)
        assert c.get("/probe/whoami").json() == {"principal": LABEL_ALPHA, "via": "cookie"}
    db = sqlite3.connect(tmp_path / "server.sqlite")
    dump = "\n".join(db.iterdump())
    db.close()
    assert a not in dump and b not in dump and "k-alpha" not in dump


def test_logout_revokes_the_session(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, keys=KEYS)) as c:
        cookie = _sign_in(c).cookies["judge_session"]
        c.cookies.set("judge_session", cookie)
        assert c.get("/v1/jobs").status_code == 200
        out = c.post("/logout", follow_redirects=False)
        assert out.status_code == 303 and 'judge_session=""' in out.headers["set-cookie"]
        c.cookies.clear()
        c.cookies.set("judge_session", cookie)  # the old cookie, replayed
        assert c.get("/v1/jobs").status_code == 401
        assert _rows(tmp_path) == []
        # Signing out with a dead session still clears the cookie (no 401).
        assert c.post("/logout", follow_redirects=False).status_code == 303


def test_a_changed_key_set_ends_every_session(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, keys=["k-alpha"])) as c:
        cookie = _sign_in(c).cookies["judge_session"]
    with TestClient(app_for(tmp_path, keys=["k-alpha"])) as c:  # restarted, same keys: still signed in
        c.cookies.set("judge_session", cookie)
        assert c.get("/v1/jobs").status_code == 200
    with TestClient(app_for(tmp_path, keys=["k-alpha", "k-gamma"])) as c:  # a key added
        c.cookies.set("judge_session", cookie)
        assert c.get("/v1/jobs").status_code == 401
    with TestClient(app_for(tmp_path, keys=["k-alpha"])) as c:  # bound to the set it was made under
        c.cookies.set("judge_session", cookie)
        assert c.get("/v1/jobs").status_code == 200


def test_reviewer_name_is_the_principal_and_a_bearer_key_its_label(tmp_path: Path) -> None:
    with TestClient(_whoami(app_for(tmp_path, keys=KEYS))) as c:
        cookie = _sign_in(c, name="  王 小明\u202e\x00 ").cookies["judge_session"]
        c.cookies.set("judge_session", cookie)
        # the name given at sign-in, behind the key's label: unique per key, never another key's
        alpha = "key-" + sha256_hex("key:k-alpha")[:8]
        assert c.get("/probe/whoami").json() == {"principal": alpha + "/王 小明", "via": "cookie"}
        c.cookies.clear()
        beta = c.get("/probe/whoami", headers={"Authorization": "Bearer k-beta"}).json()
        assert beta == {"principal": "key-" + sha256_hex("key:k-beta")[:8], "via": "bearer"}
        assert c.get("/probe/whoami").status_code == 401
        page = c.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 401 and 'name="name"' in page.text and 'name="key"' in page.text
    with TestClient(_whoami(app_for(tmp_path / "open"))) as c:  # auth off (loopback only)
        assert c.get("/probe/whoami").json() == {"principal": "anonymous", "via": "open"}


def test_clean_name() -> None:
    assert clean_name("  Ada\tLovelace\n ") == "Ada Lovelace"
    assert clean_name("\u200b\x07") == ""
    assert clean_name("x" * 100) == "x" * 64


def test_sessions_expire(tmp_path: Path) -> None:
    JobDB(tmp_path / "s.sqlite").close()  # migrated
    now = [1000.0]
    store = SessionStore(tmp_path / "s.sqlite", clock=lambda: now[0])
    ring = KeyRing(["k"])
    token = store.create(principal="ada", key_label="key-x", keyring=ring.fingerprint, ttl_s=60)
    assert store.lookup(token, ring.fingerprint) == "key-x/ada"  # a row without its key's label gets it
    assert store.lookup(token, KeyRing(["k", "k2"]).fingerprint) is None
    now[0] = 1059.0
    assert store.lookup(token, ring.fingerprint) == "key-x/ada"
    now[0] = 1060.0
    assert store.lookup(token, ring.fingerprint) is None
    store.create(principal="bob", key_label="key-x", keyring=ring.fingerprint, ttl_s=60)
    assert store.count() == 1  # the expired one was swept
    store.close()


def test_session_ttl_is_configurable(tmp_path: Path) -> None:
    config = make_config(tmp_path, keys=KEYS)
    config.session_ttl_s = 90 * 60
    with TestClient(create_app(config)) as c:
        assert "max-age=5400" in _sign_in(c).headers["set-cookie"].lower()
    (row,) = _rows(tmp_path)
    assert row[5] - row[4] == pytest.approx(5400)


def test_cookie_is_secure_over_https_and_behind_a_trusted_proxy_only(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path, keys=KEYS), base_url="https://testserver") as c:
        assert "secure" in _sign_in(c).headers["set-cookie"].lower()
    proxied = {"X-Forwarded-Proto": "https"}
    with TestClient(app_for(tmp_path, keys=KEYS)) as c:
        r = c.post("/login", data={"key": "k-alpha"}, headers=proxied, follow_redirects=False)
        assert r.status_code == 303 and "secure" not in r.headers["set-cookie"].lower()  # not trusted
    config = make_config(tmp_path, keys=KEYS)
    config.trust_forwarded_proto = True
    with TestClient(create_app(config)) as c:
        r = c.post("/login", data={"key": "k-alpha"}, headers=proxied, follow_redirects=False)
        assert "secure" in r.headers["set-cookie"].lower()
        r = c.post("/login", data={"key": "k-alpha"}, follow_redirects=False)
        assert "secure" not in r.headers["set-cookie"].lower()
