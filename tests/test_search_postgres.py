"""The postgres engine against a real PostgreSQL started by the test (Debian's
``postgresql``; ``initdb`` as a non-root user, loopback only, stopped by its pid)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from judge.cli import main
from judge.io import read_dataset
from judge.search import Query, SearchError, SearchOptions, load_config, run_search

BINARIES = sorted(glob.glob("/usr/lib/postgresql/*/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_user(cmd: list[str]) -> list[str]:
    """Run as ``postgres`` when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return cmd
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
    return [runuser, "-u", "postgres", "--", *cmd]


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    if not BINARIES:
        pytest.skip(
            "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)"
        )
    pytest.importorskip("psycopg", reason="needs psycopg[binary]")
    bindir = Path(BINARIES[-1])
    root = Path(tempfile.mkdtemp(prefix="judge-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = _free_port()
    pid: int | None = None
    try:
        subprocess.run(
            _as_user(
                [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            _as_user(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(root / "log"),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    f"-k {sock} -h 127.0.0.1 -p {port}",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        pid = int((data / "postmaster.pid").read_text().splitlines()[0])
        dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                """CREATE TABLE passages (
                    id text PRIMARY KEY, title text, body text,
                    tsv tsvector GENERATED ALWAYS AS (
                        setweight(to_tsvector('english', coalesce(title, '')), 'A')
                        || setweight(to_tsvector('english', body), 'B')) STORED)"""
            )
            conn.execute(
                "INSERT INTO passages (id, title, body) VALUES "
                "('d1', 'Anemia in dogs', 'Pale gums and tiredness are common signs.'),"
                "('d2', 'Dog care', 'Anemia can follow tick bites; a vet checks the gums.'),"
                "('d3', 'Green tea', 'Tea has caffeine.')"
            )
        yield dsn
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGINT)  # fast shutdown
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
        shutil.rmtree(root, ignore_errors=True)


SQL = """
SELECT id, body, ts_rank(ARRAY[0.1, 0.2, 0.4, %(title_weight)s]::float4[], tsv, q) AS score
FROM passages, plainto_tsquery('english', %(query)s) AS q
WHERE tsv @@ q
ORDER BY score DESC, id
LIMIT %(depth)s
"""


def write_config(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "pg.toml"
    sql = SQL.replace("\n", " ")
    path.write_text(
        f'engine = "postgres"\nsql = "{sql}"\n{extra}\n[params]\ntitle_weight = 1.0\n', encoding="utf-8"
    )
    return path


def test_postgres_ranks_with_weights_and_binds_the_query(
    tmp_path: Path, postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    secret_dsn = postgres + " password=hunter2-pg-secret"
    monkeypatch.setenv("JUDGE_TEST_PG_DSN", secret_dsn)
    cfg = load_config(write_config(tmp_path, 'dsn_env = "JUDGE_TEST_PG_DSN"'))
    hostile = "anemia'); DROP TABLE passages; --"
    queries = [Query("q1", "anemia"), Query("q2", "gums anemia"), Query("q3", hostile), Query("q4", "zebra")]
    run = run_search(queries, cfg, tmp_path / "pg.jsonl", options=SearchOptions(concurrency=2, backoff_s=0))
    records = {r.id: r for r in read_dataset(run.dataset_path)}
    # The title's weight (A = 1.0) puts d1 (anemia in the title) above d2 (in the body, B = 0.4).
    assert [p.id for p in records["q1"].passages] == ["d1", "d2"]
    # Scores are PostgreSQL's own: the same SQL run directly gives the same numbers.
    with psycopg.connect(postgres) as conn:
        direct = conn.execute(SQL, {"query": "anemia", "depth": 10, "title_weight": 1.0}).fetchall()
        assert conn.execute("SELECT count(*) FROM passages").fetchone() == (3,)  # the table survived
    assert [(d, pytest.approx(s)) for d, _, s in direct] == [
        (p.id, json.loads(run.dataset_path.read_text().splitlines()[0])["retrieval_context"][i]["score"])
        for i, p in enumerate(records["q1"].passages)
    ]
    # The hostile text was bound as a parameter and searched as words (all of them: none matches).
    assert run.no_hits == ("q3", "q4")
    meta = json.loads(run.meta_path.read_text(encoding="utf-8"))
    assert meta["engine"]["version"].startswith("PostgreSQL 1")
    assert meta["first_request"]["params"] == {"title_weight": 1.0, "query": "anemia", "depth": 10}
    # A lower title weight flips the order: the knob matters.
    low = run_search(queries[:1], cfg.with_params({"title_weight": 0.1}), tmp_path / "low.jsonl")
    assert [p.id for p in read_dataset(low.dataset_path)[0].passages] == ["d2", "d1"]
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert b"hunter2-pg-secret" not in path.read_bytes(), path


def test_postgres_errors_name_the_field(
    tmp_path: Path, postgres: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad_sql = tmp_path / "bad.toml"
    bad_sql.write_text(
        f'engine = "postgres"\ndsn = "{postgres}"\n'
        'sql = "SELECT id, body FROM nowhere WHERE body = %(query)s"\n',
        encoding="utf-8",
    )
    with pytest.raises(SearchError, match="the query failed") as err:
        run_search([Query("q", "x")], load_config(bad_sql), tmp_path / "a.jsonl")
    assert (err.value.path, err.value.field) == (str(bad_sql), "sql")
    cfg = write_config(
        tmp_path, f'dsn = "host=127.0.0.1 port={_free_port()} user=postgres connect_timeout=5"'
    )
    queries = tmp_path / "q.tsv"
    queries.write_text("q\tanemia\n", encoding="utf-8")
    assert (
        main(
            ["search", str(queries), "--config", str(cfg), "-o", str(tmp_path / "b.jsonl"), "--retries", "0"]
        )
        == 2
    )
    assert "field 'dsn'" in capsys.readouterr().err
    env_cfg = write_config(tmp_path, 'dsn_env = "JUDGE_TEST_PG_UNSET_DSN"')
    with pytest.raises(SearchError, match="JUDGE_TEST_PG_UNSET_DSN is not set") as err:
        run_search([Query("q", "x")], load_config(env_cfg), tmp_path / "c.jsonl")
    assert err.value.field == "dsn_env"
