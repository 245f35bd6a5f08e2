"""Who is calling: bearer keys, the viewer's sign-in sessions and the sign-in page (its
routes are in :mod:`judge.server._viewer_routes`).

Signing in with a key creates a random session token: the browser keeps it in an HttpOnly,
SameSite=Strict cookie (``Secure`` over HTTPS); the server keeps only its SHA-256 in the
job database's ``sessions`` table, with the optional reviewer name given at sign-in, the
key's label, the fingerprint of the key set and an expiry (``--session-ttl``, default 12 h).
Signing out deletes the row, so the cookie is dead at once; a session also ends when the
key set changes (another key file or ``JUDGE_API_KEYS``: the fingerprint no longer matches).

Every request that gets through carries ``request.state.principal``: the key's label
(``key-`` + 8 hex digits), followed by ``/`` and the name given at sign-in when one was
given (``key-1b73d32f/alice``), so a name is unique per key and can never be another key's
principal or ``anonymous``; ``anonymous`` when auth is off. ``request.state.key_label`` is
the key's label (None when auth is off).
"""

from __future__ import annotations

import secrets
import time
import unicodedata
import urllib.parse
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.server._auth import COOKIE_NAME, KeyRing
from judge.server._db import sha256_hex
from judge.store import SQLiteHolder

DEFAULT_TTL_S = 12 * 3600.0
MAX_NAME_CHARS = 64
ANONYMOUS = "anonymous"


class SessionStore(SQLiteHolder):
    """Sessions in the job database (its own connection; the table is made by the job
    database's migrations, so open :class:`~judge.server._db.JobDB` first)."""

    def __init__(self, db_path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(db_path, what="session store")
        self._clock = clock

    @staticmethod
    def _hash(token: str) -> str:
        return sha256_hex("session:" + token)

    def create(self, *, principal: str, key_label: str, keyring: str, ttl_s: float) -> str:
        """A new session; returns its token (only its hash is stored). Expired rows go too."""
        token = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            conn = self._connection()
            conn.execute("DELETE FROM sessions WHERE expires <= ?", (now,))
            conn.execute(
                "INSERT INTO sessions (token_hash, principal, key_label, keyring, created, expires)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (self._hash(token), principal, key_label, keyring, now, now + ttl_s),
            )
        return token

    def lookup(self, token: str, keyring: str) -> str | None:
        """The principal of a live session made under this key set, else None."""
        found = self.lookup_key(token, keyring)
        return None if found is None else found[0]

    def lookup_key(self, token: str, keyring: str) -> tuple[str, str] | None:
        """(principal, key label) of a live session made under this key set, else None. A
        principal stored without its key's label (by an older judge) gets it in front."""
        with self._lock:
            row = (
                self._connection()
                .execute(
                    "SELECT principal, keyring, expires, key_label FROM sessions WHERE token_hash = ?",
                    (self._hash(token),),
                )
                .fetchone()
            )
        if row is None or row[1] != keyring or float(row[2]) <= self._clock():
            return None
        principal, label = str(row[0]), str(row[3])
        return principal_of(label, principal), label

    def delete(self, token: str) -> None:
        with self._lock:
            self._connection().execute("DELETE FROM sessions WHERE token_hash = ?", (self._hash(token),))

    def count(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM sessions").fetchone()[0])


@dataclass(frozen=True)
class Identity:
    """Who made a request and how: ``bearer`` (a key in the header), ``cookie`` (a viewer
    session) or ``open`` (auth is off)."""

    principal: str
    via: str
    key_label: str | None = None


def cookie_value(scope: MutableMapping[str, Any], name: str = COOKIE_NAME) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() != b"cookie":
            continue
        for part in bytes(value).decode("latin-1").split(";"):
            found, _, val = part.strip().partition("=")
            if found == name and val:
                return val
    return None


class Authenticator:
    """Identifies a request by its bearer key or its session cookie."""

    def __init__(self, keys: KeyRing, sessions: SessionStore) -> None:
        self.keys = keys
        self.sessions = sessions

    @property
    def enabled(self) -> bool:
        return self.keys.enabled

    def identify(self, scope: MutableMapping[str, Any]) -> Identity | None:
        """The caller, or None if keys are required and none was shown. Also sets
        ``request.state.principal`` and ``request.state.auth_via`` (None when unknown)."""
        identity = self._identify(scope)
        state = scope.setdefault("state", {})
        state["principal"] = None if identity is None else identity.principal
        state["auth_via"] = None if identity is None else identity.via
        state["key_label"] = None if identity is None else identity.key_label
        return identity

    def _identify(self, scope: MutableMapping[str, Any]) -> Identity | None:
        if not self.keys.enabled:
            return Identity(ANONYMOUS, "open")
        for key, value in scope.get("headers", []):
            if key.lower() == b"authorization":
                label = self.keys.label_for_authorization(value.decode("latin-1"))
                if label is not None:
                    return Identity(label, "bearer", label)
        token = cookie_value(scope)
        if token is not None:
            found = self.sessions.lookup_key(token, self.keys.fingerprint)
            if found is not None:
                return Identity(found[0], "cookie", found[1])
        return None


def principal_of(key_label: str, name: str) -> str:
    """The principal of a sign-in: the key's label, then ``/`` and the name when one was
    given (a name is unique per key and never another key's principal)."""
    if not name or name == key_label or name.startswith(key_label + "/"):
        return name or key_label
    return f"{key_label}/{name}"


def clean_name(raw: str) -> str:
    """A reviewer name as given at sign-in: control and format characters dropped, spaces
    collapsed, at most 64 characters ('' if none)."""
    spaced = "".join(" " if ch.isspace() else ch for ch in raw)
    kept = "".join(ch for ch in spaced if not unicodedata.category(ch).startswith("C"))
    return " ".join(kept.split())[:MAX_NAME_CHARS]


# The sign-in page's only style; the viewer's Content-Security-Policy allows it by its hash.
SIGNIN_STYLE = (
    'body{font:15px system-ui,"Noto Sans CJK SC","WenQuanYi Zen Hei",sans-serif;background:#f6f7f9;'
    "display:flex;justify-content:center;padding-top:12vh}form{background:#fff;padding:2rem;"
    "border-radius:8px;box-shadow:0 1px 4px #0002;min-width:20rem}input{width:100%;padding:.5rem;"
    "margin:.5rem 0 1rem;box-sizing:border-box}button{padding:.5rem 1.2rem}.err{color:#b00020}"
    ".muted{color:#667085;font-size:.85rem}"
)


def signin_page(next_path: str, failed: bool) -> str:
    note = '<p class="err">That key was not accepted.</p>' if failed else ""
    nxt = urllib.parse.quote(next_path, safe="/")
    return f"""<!doctype html><html lang="zh"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1"><title>judge · sign in</title>
<style>{SIGNIN_STYLE}</style></head><body>
<form method="post" action="/login?next={nxt}"><h1>judge</h1>{note}
<label for="key">API key</label><input id="key" name="key" type="password" autocomplete="current-password"
autofocus><label for="name">Your name <span class="muted">(optional: the reviewer of your labels)</span>
</label><input id="name" name="name" type="text" autocomplete="name" maxlength="{MAX_NAME_CHARS}">
<button type="submit">Sign in</button></form></body></html>"""


__all__ = [
    "ANONYMOUS",
    "DEFAULT_TTL_S",
    "Authenticator",
    "Identity",
    "SessionStore",
    "clean_name",
    "principal_of",
    "signin_page",
]
