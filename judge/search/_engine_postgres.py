"""The ``postgres`` engine: PostgreSQL full-text search through psycopg 3.

``sql`` is run with bound parameters, never with the query pasted into the SQL:
``%(query)s``, ``%(depth)s`` and each ``[params]`` knob as ``%(knob)s``. Its first three
columns are the hit's id, text and score (the score may be NULL), e.g.::

    sql = '''
    SELECT id, body, ts_rank_cd('{0.1, 0.2, %(title_weight)s, 1.0}', tsv, q) AS score
    FROM passages, websearch_to_tsquery('english', %(query)s) AS q
    WHERE tsv @@ q ORDER BY score DESC, id LIMIT %(depth)s
    '''

``dsn`` in the configuration, or the environment variable named by ``dsn_env``, or
libpq's own variables (``PGHOST``...) when neither is given. The DSN never reaches the
run's metadata.
"""

from __future__ import annotations

import os
from typing import Any

from judge.io import register_secret
from judge.search._hits import Hit, make_hit
from judge.search._search_config import SearchConfig
from judge.search._search_errors import SearchError, TransientSearchError


def _psycopg() -> Any:
    """psycopg 3, from the ``search`` extra (a clear error naming it when missing)."""
    try:
        import psycopg
    except ImportError:
        raise SearchError(
            "the postgres engine needs psycopg: pip install 'judge[search]'", field="engine"
        ) from None
    return psycopg


class PostgresEngine:
    def __init__(self, config: SearchConfig) -> None:
        self.config = config
        self.where = None if config.path is None else str(config.path)
        dsn = config.dsn
        if config.dsn_env is not None:
            dsn = os.environ.get(config.dsn_env)
            if dsn is None:
                raise SearchError(
                    f"the environment variable {config.dsn_env} is not set", path=self.where, field="dsn_env"
                )
        self.dsn = dsn or ""
        if dsn:
            register_secret(dsn)
        self.pool: list[Any] = []
        self.opened = 0

    async def _connection(self) -> Any:
        psycopg = _psycopg()

        if self.pool:
            return self.pool.pop()
        field = "dsn_env" if self.config.dsn_env else "dsn"
        try:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        except psycopg.OperationalError as exc:
            raise TransientSearchError(f"cannot connect: {exc}", field=field) from None
        except psycopg.Error as exc:  # a DSN libpq refuses (an unknown option...): not worth a retry
            raise SearchError(f"cannot connect: {exc}", path=self.where, field=field) from None
        self.opened += 1
        return conn

    async def search(self, query: str, depth: int) -> list[Hit]:
        psycopg = _psycopg()

        conn = await self._connection()
        args = {**self.config.params, "query": query, "depth": depth}
        try:
            async with conn.cursor() as cur:
                await cur.execute(self.config.sql, args)
                rows = await cur.fetchall()
        except psycopg.OperationalError as exc:
            await conn.close()
            raise TransientSearchError(f"the database failed: {exc}", field="dsn") from None
        except psycopg.Error as exc:
            await conn.close()
            raise SearchError(f"the query failed: {exc}", path=self.where, field="sql") from None
        self.pool.append(conn)
        hits: list[Hit] = []
        for i, row in enumerate(rows):
            if len(row) < 2:
                raise SearchError(
                    f"row {i}: expected the columns (id, text[, score]), got {len(row)}",
                    path=self.where,
                    field="sql",
                )
            hid, score = row[0], (row[2] if len(row) > 2 else None)
            if hid is not None and not isinstance(hid, bool | str | int):
                hid = str(hid)  # a uuid, a numeric: its text is the id
            hits.append(make_hit(i, hid, row[1], score, path=self.where, field="sql"))
        return hits

    async def version(self) -> str | None:
        conn = await self._connection()
        try:
            async with conn.cursor() as cur:
                await cur.execute("SHOW server_version")
                row = await cur.fetchone()
        finally:
            self.pool.append(conn)
        return None if row is None else f"PostgreSQL {row[0]}"

    async def stats(self) -> dict[str, Any]:
        return {}

    def describe_request(self, query: str, depth: int) -> dict[str, Any]:
        return {"sql": self.config.sql, "params": {**self.config.params, "query": query, "depth": depth}}

    async def close(self) -> None:
        while self.pool:
            await self.pool.pop().close()
