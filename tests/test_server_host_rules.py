"""The server's host rule (DNS rebinding), the origin's scheme, comparison system names'
bound, and the header-read timeout of a real ``judge serve`` (raw sockets on 127.0.0.1)."""

from __future__ import annotations

import http.client
import socket
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from _server import app_for, make_config, ndjson, records, serve_env, serve_process
from fastapi.testclient import TestClient

from judge.server import create_app, parse_allowed_hosts
from judge.server._security import host_allowed, same_origin

NDJSON = {"Content-Type": "application/x-ndjson"}
REBIND = "rebind.attacker.example"


def _jobs(client: Any) -> list[Any]:
    return list(client.get("/v1/jobs").json()["jobs"])


# --- host rule -------------------------------------------------------------------------------
def test_without_keys_a_foreign_host_is_refused_before_any_route(tmp_path: Path) -> None:
    with TestClient(app_for(tmp_path)) as c:
        # A DNS-rebinding page: Host and Origin both name the attacker's domain, and to the
        # browser the request is same-origin.
        page = {"Host": f"{REBIND}", "Origin": f"http://{REBIND}", "Sec-Fetch-Site": "same-origin"}
        r = c.post("/v1/jobs", content=ndjson(records(1)), headers={**NDJSON, **page})
        assert r.status_code == 421 and REBIND in r.json()["detail"]
        assert "--allowed-hosts" in r.json()["detail"]
        for path in ("/healthz", "/v1/jobs", "/", "/static/app.js", "/no-such-route"):
            assert c.get(path, headers={"Host": REBIND}).status_code == 421
        assert c.get("/v1/jobs", headers={"Host": "localhost:8001"}).status_code == 421  # another port
        assert c.get("/v1/jobs", headers={"Host": "testserver.evil"}).status_code == 421
        assert _jobs(c) == []  # the refused job was never queued
        # The address the connection reached (TestClient: testserver:80) and localhost answer.
        for host in ("testserver", "testserver:80", "localhost", "LOCALHOST:80"):
            assert c.get("/v1/jobs", headers={"Host": host}).status_code == 200, host


def test_allowed_hosts_name_more_and_keys_turn_the_rule_off_unless_named(tmp_path: Path) -> None:
    config = make_config(tmp_path / "a")
    config.allowed_hosts = ("judge.internal", "proxy.example:8443")
    with TestClient(create_app(config)) as c:
        assert c.get("/healthz", headers={"Host": "judge.internal:1234"}).status_code == 200
        assert c.get("/healthz", headers={"Host": "proxy.example:8443"}).status_code == 200
        assert c.get("/healthz", headers={"Host": "proxy.example:8444"}).status_code == 421
        assert c.get("/healthz", headers={"Host": REBIND}).status_code == 421
    bearer = {"Authorization": "Bearer k1"}
    with TestClient(app_for(tmp_path / "b", keys=["k1"])) as c:  # keys: the key is the defence
        assert c.get("/v1/jobs", headers={**bearer, "Host": REBIND}).status_code == 200
    config = make_config(tmp_path / "c", keys=["k1"])
    config.allowed_hosts = ("judge.internal",)
    with TestClient(create_app(config)) as c:  # keys and --allowed-hosts: the rule is on
        assert c.get("/v1/jobs", headers={**bearer, "Host": REBIND}).status_code == 421
        assert c.get("/v1/jobs", headers={**bearer, "Host": "judge.internal"}).status_code == 200


def test_host_allowed_and_parse_allowed_hosts() -> None:
    own = ("127.0.0.1", 8000)
    assert host_allowed("127.0.0.1:8000", own, ())
    assert host_allowed("localhost:8000", own, ())
    assert not host_allowed("127.0.0.1", own, ())  # port 80 is not this server's
    assert not host_allowed("127.0.0.2:8000", own, ())
    assert not host_allowed(None, own, ())
    assert not host_allowed("", own, ())
    assert not host_allowed("a:notaport", own, ())
    assert host_allowed("[::1]:9000", ("::1", 9000), ())
    assert not host_allowed("localhost.:8000", own, ())
    extra = parse_allowed_hosts(["Judge.Example:443, other.example", "[::1]:81"])
    assert extra == (("judge.example", 443), ("other.example", None), ("::1", 81))
    assert host_allowed("judge.example", own, extra) is False  # port 80, not 443
    assert host_allowed("JUDGE.example:443", own, extra)
    assert host_allowed("other.example:1", own, extra)
    for bad in ("a/b", "x:y", "user@host", "h?q"):
        with pytest.raises(ValueError, match="not a host"):
            parse_allowed_hosts([bad])


# --- origin's scheme -------------------------------------------------------------------------
def test_an_https_origin_is_not_an_http_servers_origin(tmp_path: Path) -> None:
    assert same_origin("http://127.0.0.1:8000", "127.0.0.1:8000", "http")
    assert not same_origin("https://127.0.0.1:8000", "127.0.0.1:8000", "http")
    assert not same_origin("http://judge.example.org:443", "judge.example.org", "https")
    assert same_origin("https://judge.example.org", "judge.example.org", "https")
    assert not same_origin("https://judge.example.org", "judge.example.org", "http")
    with TestClient(app_for(tmp_path)) as c:
        # Host and Origin name the same host and port; only the scheme differs.
        here = {"Host": "testserver:80", "Origin": "https://testserver:80"}
        r = c.post("/v1/jobs", content=ndjson(records(1)), headers={**NDJSON, **here})
        assert r.status_code == 403 and "https://testserver:80" in r.json()["detail"]
        r = c.post("/v1/jobs", content=ndjson(records(1)), headers={**NDJSON, "Origin": "https://testserver"})
        assert r.status_code == 403
        assert _jobs(c) == []
        r = c.post("/v1/jobs", content=ndjson(records(1)), headers={**NDJSON, "Origin": "http://testserver"})
        assert r.status_code == 202


# --- comparison system names -----------------------------------------------------------------
def test_a_long_system_name_is_422_naming_the_field_before_any_file(tmp_path: Path) -> None:
    three = records(3)
    with TestClient(app_for(tmp_path)) as c:
        for name in ("s" * 101, "系" * 101, "é" * 100 + "x", "s" * 300):
            r = c.post("/v1/compare", json={"systems": {"A": three, name: three}})
            assert r.status_code == 422, (len(name), r.text)
            assert r.json()["fields"][0].startswith("body.systems"), r.json()
            assert "longer than 100 characters" in r.json()["detail"][0]["msg"]
        assert _jobs(c) == [] and list((tmp_path / "jobs").iterdir()) == []
        # 100 characters (and 200 UTF-8 bytes) is within the bound
        r = c.post("/v1/compare", json={"systems": {"A": three, "é" * 100: three}})
        assert r.status_code == 202, r.text


def test_a_long_system_name_is_refused_on_the_command_line_too() -> None:
    from judge.io import InputError
    from judge.systems import check_name, parse_system_args

    assert check_name("s" * 100) == "s" * 100
    with pytest.raises(InputError, match="longer than 100") as info:
        parse_system_args(["s" * 101 + "=x.jsonl"])
    assert info.value.field == "NAME"


# --- a real server: host rule on real sockets, header-read timeout ---------------------------
def _status(host: str, port: int, host_header: str) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=20)
    try:
        conn.putrequest("GET", "/healthz", skip_host=True)
        conn.putheader("Host", host_header)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def _closed_within(sock: socket.socket, cap_s: float) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) before ``cap_s`` seconds pass."""
    deadline = time.monotonic() + cap_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.1, min(1.0, deadline - time.monotonic())))
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True
        if data == b"":
            return True
    return False


def test_a_real_server_answers_its_own_hosts_and_closes_slow_connections(tmp_path: Path) -> None:
    args = [
        *("--backend-factory", "_server:fake_backend", "--db", str(tmp_path / "s.sqlite")),
        *("--header-timeout", "1", "--keep-alive-timeout", "1", "--allowed-hosts", "judge.test"),
    ]
    with serve_process(args, serve_env(tmp_path)) as (_proc, url):
        port = int(url.rsplit(":", 1)[1])
        assert _status("127.0.0.1", port, f"127.0.0.1:{port}") == 200
        assert _status("127.0.0.1", port, f"localhost:{port}") == 200
        assert _status("127.0.0.1", port, "judge.test") == 200
        assert _status("127.0.0.1", port, f"{REBIND}:{port}") == 421
        assert _status("127.0.0.1", port, f"127.0.0.1:{port + 1}") == 421
        # A request line and half a header, then nothing: closed (1 s bound; generous cap).
        with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:" + str(port).encode() + b"\r\nX-Slow: a")
            assert _closed_within(slow, 60.0)
        # A connection that never sends a byte: closed too.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
            assert _closed_within(idle, 60.0)
        # A whole request on a kept-alive connection, then half of the next one: closed.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as kept:
            host = f"Host: 127.0.0.1:{port}\r\n".encode()
            kept.sendall(b"GET /healthz HTTP/1.1\r\n" + host + b"\r\n")
            kept.settimeout(20)
            assert kept.recv(4096).startswith(b"HTTP/1.1 200")
            kept.sendall(b"GET /healthz HTTP/1.1\r\n")
            assert _closed_within(kept, 60.0)


def test_bad_allowed_hosts_is_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    from _server import ROOT

    proc = subprocess.run(
        [sys.executable, "-m", "judge", "serve", "--port", "0", "--allowed-hosts", "a/b"],
        env=serve_env(tmp_path),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--allowed-hosts" in proc.stderr
