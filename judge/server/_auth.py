"""API keys: where they come from, how a request proves it holds one, and the bind check.

Only SHA-256 digests of the keys are kept in memory after start (compared in constant
time); a key never reaches a log line, an error, a job record or the database. A key is
named by a non-secret label (``key-`` and 8 hex digits of its digest); the key set by a
fingerprint, which the viewer's sessions (:mod:`judge.server._sessions`) are bound to.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from judge.io import InputError
from judge.server._db import sha256_hex

COOKIE_NAME = "judge_session"


def load_keys(
    env_value: str | None = None, keys_file: str | Path | None = None, *, flag: str = "--api-keys-file"
) -> list[str]:
    """Keys from ``JUDGE_API_KEYS`` (comma-separated) and/or a file (one per line, ``#``
    comments and blank lines ignored); a file that cannot be read is an :class:`InputError`
    naming ``flag``, the option that gave it."""
    raw = env_value if env_value is not None else os.environ.get("JUDGE_API_KEYS", "")
    keys = [k.strip() for k in raw.split(",") if k.strip()]
    if keys_file is not None:
        path = Path(keys_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", path=str(path), field=flag) from None
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
        # Changes whenever a key is added or removed: sessions made under another set end.
        self.fingerprint = sha256_hex("keyring:" + ",".join(sorted(self._digests)))

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def label_for(self, key: str) -> str | None:
        """The key's label (``key-`` + 8 hex digits of its digest), or None if not accepted.
        Every digest is compared, in constant time."""
        candidate = sha256_hex("key:" + key)
        found: str | None = None
        for d in self._digests:
            if hmac.compare_digest(candidate, d):
                found = d
        return None if found is None else "key-" + found[:8]

    def check_key(self, key: str) -> bool:
        return self.label_for(key) is not None

    def label_for_authorization(self, header: str | None) -> str | None:
        """The label of the key in ``Authorization: Bearer <key>`` (None: missing or wrong)."""
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.label_for(token.strip())

    def check_authorization(self, header: str | None) -> bool:
        return self.label_for_authorization(header) is not None
