"""No server path and no engine URL in a response: the one scrubbing of what leaves the server.

Every route passes what it answers with through :func:`public` (a job's view, whose one
serialisation is :meth:`judge.server._jobs.JobManager.view`; a report's text; a pair view;
an input error's message), with the job's folder and the server's registered search
configurations:

* a registered configuration's file is named by its registered name (``search
  configuration 'shop'``), never by its path;
* the job's folder, the registered configurations' folders and their indexes' are taken out
  of every path (files named relative to the job's folder: ``output.jsonl``,
  ``systems/A.jsonl``; an index by its folder's name);
* a registered engine's URL (its scheme, host and port, whatever follows) is shown as
  ``<engine URL>``.

A failed job's ``error`` (``error=True``) is free text from wherever the failure came from:
besides the above, any other URL is shown as ``<URL>`` and any other absolute path by its
last part. The whole error goes to the server's log (``judge.server``), secrets redacted.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from judge.search import SearchConfig
from judge.server._search_configs import RegisteredConfig

ENGINE_URL = "<engine URL>"
OTHER_URL = "<URL>"
# what follows a URL's start up to a space, a quote or a bracket, but not a sentence's
# punctuation after it ("cannot reach http://h:1/x: refused")
_URL_REST = r"(?:[^\s'\"<>`()\[\]{}]*[^\s'\"<>`()\[\]{}:.,;!?])?"
# a URL in free text: a scheme, "://", then the rest
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://" + _URL_REST)
# an absolute path of two parts or more in free text (the API's own /v1/... routes are text)
_PATH = re.compile(r"(?<![\w.~/:\-])/(?!v1/)(?:[^\s'\"/:<>`()]+/)+([^\s'\"/:<>`()]+)")


def _origins(config: SearchConfig) -> set[str]:
    """The scheme, host and port of every URL a configuration's engine reaches (its sources'
    too): ``http://search.internal:9200``; a template's placeholders end the literal part."""
    found: set[str] = set()
    for url in (config.url, config.dsn):
        literal = re.split(r"\{\{|##", url or "", maxsplit=1)[0]
        parts = urllib.parse.urlsplit(literal)
        if parts.scheme and parts.netloc:
            found.add(f"{parts.scheme}://{parts.netloc}")
    for source in config.sources:
        found |= _origins(source)
    return found


def _folders(job_dir: Path | None, extra: Iterable[Path] = ()) -> dict[str, str]:
    """Each folder as given and resolved, with its separator: taken out of every path."""
    return {
        str(p).rstrip("/") + "/": ""
        for d in (*([job_dir] if job_dir is not None else []), *extra)
        for p in {d, d.resolve()}
    }


_CONFIG_RULES: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], re.Pattern[str] | None]] = {}


def _config_rules(configs: Mapping[str, RegisteredConfig]) -> tuple[dict[str, str], re.Pattern[str] | None]:
    """What the registered configurations make a response show instead: their files by
    their names, their folders and indexes' taken out; their engines' URLs (worked out
    once per set of registered configurations: they are fixed for a server's life)."""
    key = tuple(sorted((name, str(c.path)) for name, c in configs.items()))
    found = _CONFIG_RULES.get(key)
    if found is None:
        names = {
            str(p): f"search configuration {c.name!r}"
            for c in configs.values()
            for p in {c.path, c.path.resolve()}
        }
        folders = _folders(None, [d for c in configs.values() for d in c.folders()])
        origins = sorted({o for c in configs.values() for o in _origins(c.config)}, key=len, reverse=True)
        engine = (
            re.compile("(?:" + "|".join(re.escape(o) for o in origins) + ")" + _URL_REST) if origins else None
        )
        found = _CONFIG_RULES[key] = ({**folders, **names}, engine)
    return found


def _replacements(pairs: Mapping[str, str]) -> list[tuple[str, str]]:
    """(server text, what a response shows instead), longest first, each also as a JSON
    string escapes it."""
    escaped = {json.dumps(k)[1:-1]: v for k, v in pairs.items()}
    return sorted({**escaped, **pairs}.items(), key=lambda kv: len(kv[0]), reverse=True)


def public(
    value: Any,
    job_dir: Path | None,
    configs: Mapping[str, RegisteredConfig] | None = None,
    *,
    error: bool = False,
) -> Any:
    """``value`` (a string, or a JSON value: every string in it) as a response may carry it
    (see the module docstring); ``error``: free text, whose other URLs and absolute paths
    are taken out too."""
    known, engine = _config_rules(configs or {})
    replacements = _replacements({**_folders(job_dir), **known})

    def text(s: str) -> str:
        for found, shown in replacements:
            if found in s:
                s = s.replace(found, shown)
        if engine is not None:
            s = engine.sub(ENGINE_URL, s)
        if error:
            s = _URL.sub(OTHER_URL, s)
            s = _PATH.sub(lambda m: m.group(1), s)
        return s

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return text(v)
        if isinstance(v, Mapping):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        return v

    return walk(value)


__all__ = ["ENGINE_URL", "OTHER_URL", "public"]
