"""Sites of passages and the site-priors file (source quality).

A passage's *site* is the host name of its ``url`` (lower-cased, port and a leading
``www.`` dropped, a trailing dot removed, internationalised names kept as Unicode), or, with
no usable URL, its ``site``/``source`` field normalised the same way when it looks like a
host name (``news.Sina.com.cn``) or kept as given when it is a name (``新华网``).

:func:`site_of` accepts URLs with or without a scheme (``www.gov.cn/zhengce``,
``//baike.baidu.com/item/x``, ``https://user@host:8080/p``) and returns None for anything
that has no plausible host (empty, spaces inside the host, ``http://``, ``mailto:x``, a
bare word without a dot).

Site priors (``--site-priors FILE``): a grade 0-3 per domain that overrides the judge.
Two formats, chosen by the file name:

* ``*.json``: one object, ``{"gov.cn": 3, "baike.baidu.com": 3, "example-farm.com": 0}``;
* anything else, TSV: ``domain<TAB>grade[<TAB>note]`` per line; blank lines and lines
  starting with ``#`` are ignored (a note becomes the recorded reason).

A prior for ``gov.cn`` covers ``gov.cn`` and every subdomain (``www.nhc.gov.cn``), never
``notgov.cn``; the longest matching suffix wins (``news.example.com`` beats
``example.com``). ``*.gov.cn`` and ``.gov.cn`` are read as ``gov.cn``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from judge.io._errors import InputError

__all__ = ["SitePrior", "SitePriors", "normalise_host", "read_site_priors", "site_of", "source_site"]

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_HOST = re.compile(r"^[^\s/\\?#@:]+$")


def normalise_host(host: str) -> str | None:
    """A host name in canonical form (lower case, no ``www.``, no trailing dot), or None
    when it is not a plausible host (no dot, empty labels, spaces)."""
    h = host.strip().lower().rstrip(".")
    if h.startswith("www."):
        h = h[4:]
    if not h or not _HOST.match(h) or "." not in h:
        return None
    if any(not label for label in h.split(".")):
        return None
    return h


def site_of(url: str | None) -> str | None:
    """The site (host name) of a URL, with or without a scheme; None when there is none."""
    if not isinstance(url, str):
        return None
    text = url.strip()
    if not text or any(ch.isspace() for ch in text):
        return None
    if not _SCHEME.match(text) and not text.startswith("//"):
        if ":" in text.split("/", 1)[0] and not re.match(r"^[^:/]+:\d+(/|$)", text):
            return None  # mailto:x, javascript:..., not a host
        text = "//" + text
    try:
        host = urlsplit(text).hostname
    except ValueError:
        return None
    return normalise_host(host) if host else None


def source_site(url: str | None, site: str | None = None) -> str | None:
    """A passage's site: from ``url``, else from a ``site``/``source`` field (a host name is
    normalised, a name such as ``新华网`` is kept as given, a broken URL is not); None when
    neither is usable."""
    found = site_of(url)
    if found is not None or site is None:
        return found
    label = site.strip()
    if not label:
        return None
    as_host = site_of(label)
    if as_host is not None:
        return as_host
    # A name such as 新华网 is kept; a broken URL (it has a scheme, a path or a port) is not.
    return None if any(ch in label for ch in "/:\\") else label


@dataclass(frozen=True)
class SitePrior:
    """One matched prior: the rule (``domain``) that matched, its grade and note."""

    domain: str
    grade: int
    note: str = ""


class SitePriors:
    """Domain -> grade 0-3, looked up by the longest matching domain suffix."""

    def __init__(self, grades: Mapping[str, int], notes: Mapping[str, str] | None = None) -> None:
        self._grades: dict[str, int] = {}
        self._notes: dict[str, str] = {}
        for raw, grade in grades.items():
            domain = _prior_domain(raw)
            if domain is None:
                raise InputError(f"not a domain: {raw!r}", field="site-priors")
            if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= 3:
                raise InputError(f"grade of {raw!r} must be an integer 0-3", field="site-priors")
            self._grades[domain] = grade
            if notes and notes.get(raw):
                self._notes[domain] = notes[raw]

    def __len__(self) -> int:
        return len(self._grades)

    def lookup(self, site: str | None) -> SitePrior | None:
        """The prior covering ``site`` (itself or a parent domain), or None."""
        if not site:
            return None
        host = site.lower()
        labels = host.split(".")
        for i in range(len(labels)):
            candidate = ".".join(labels[i:])
            grade = self._grades.get(candidate)
            if grade is not None:
                return SitePrior(candidate, grade, self._notes.get(candidate, ""))
        return None


def _prior_domain(raw: str) -> str | None:
    text = raw.strip().lower()
    if text.startswith("*."):
        text = text[2:]
    text = text.lstrip(".")
    if "/" in text or text.startswith("//") or _SCHEME.match(text):
        return site_of(text)
    if text.startswith("www."):
        text = text[4:]
    if not text or not _HOST.match(text) or any(not label for label in text.split(".")):
        return None
    return text


def read_site_priors(path: str | Path) -> SitePriors:
    """Read a site-priors file (JSON object or TSV, see the module docstring)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(p)) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"invalid UTF-8 at byte {exc.start}", path=str(p)) from exc
    if p.suffix.lower() == ".json":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc.msg})", path=str(p), line=exc.lineno) from exc
        if not isinstance(obj, dict):
            raise InputError("must be a JSON object mapping domain to grade", path=str(p))
        try:
            return SitePriors(obj)
        except InputError as exc:
            raise InputError(exc.message, path=str(p), field=exc.field) from exc
    grades: dict[str, int] = {}
    notes: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise InputError("expected domain<TAB>grade[<TAB>note]", path=str(p), line=lineno)
        domain, grade_text = cols[0].strip(), cols[1].strip()
        if not re.fullmatch(r"[0-3]", grade_text):
            raise InputError(
                f"grade must be 0, 1, 2 or 3, got {grade_text!r}", path=str(p), line=lineno, field="grade"
            )
        if _prior_domain(domain) is None:
            raise InputError(f"not a domain: {domain!r}", path=str(p), line=lineno, field="domain")
        grades[domain] = int(grade_text)
        if len(cols) > 2 and cols[2].strip():
            notes[domain] = cols[2].strip()
    return SitePriors(grades, notes)
