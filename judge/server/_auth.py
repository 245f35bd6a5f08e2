"""API keys: where they come from, how a request proves it holds one, and the bind check.

Only SHA-256 digests of the keys are kept in memory after start (compared in constant
time); a key never reaches a log line, an error, a job record or the database. The
viewer's sign-in form sets a cookie holding a digest of the key under another prefix,
so the cookie is not the key either.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from judge.io._errors import InputError
from judge.server._db import sha256_hex

COOKIE_NAME = "judge_session"


def load_keys(env_value: str | None = None, keys_file: str | Path | None = None) -> list[str]:
    """Keys from ``JUDGE_API_KEYS`` (comma-separated) and/or a file (one per line, ``#``
    comments and blank lines ignored)."""
    raw = env_value if env_value is not None else os.environ.get("JUDGE_API_KEYS", "")
    keys = [k.strip() for k in raw.split(",") if k.strip()]
    if keys_file is not None:
        path = Path(keys_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(
                f"cannot read: {exc.strerror}", path=str(path), field="--api-keys-file"
            ) from None
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                keys.append(line)
    return list(dict.fromkeys(keys))


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``: addresses nobody else can reach."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class KeyRing:
    """The digests of the accepted keys. Empty: auth is off (loopback only)."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [sha256_hex("key:" + k) for k in keys]
        self._sessions = [sha256_hex("session:" + k) for k in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    @staticmethod
    def _match(candidate: str, digests: list[str]) -> bool:
        found = False
        for d in digests:
            found |= hmac.compare_digest(candidate, d)
        return found

    def check_key(self, key: str) -> bool:
        return self._match(sha256_hex("key:" + key), self._digests)

    def session_for(self, key: str) -> str | None:
        """The cookie value for a valid key (None if the key is not accepted)."""
        return sha256_hex("session:" + key) if self.check_key(key) else None

    def check_session(self, value: str) -> bool:
        return self._match(value, self._sessions)

    def check_authorization(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and bool(token.strip()) and self.check_key(token.strip())
