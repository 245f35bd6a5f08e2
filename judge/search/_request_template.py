"""Request templates: the text of a search request with the query, the depth and the
configuration's knobs put in.

Placeholders: ``{{query}}``, ``{{depth}}`` and any knob under ``[params]`` (``{{k1}}``), each
optionally with a filter: ``|json`` (a JSON literal: a quoted, escaped string, or a number)
or ``|url`` (percent-encoded). OpenSearch Search Relevance Workbench's ``%SearchText%`` and
Quepid's ``#$query##`` stand for ``{{query}}``, Quepid's ``##knob##`` for ``{{knob}}``.
Rendering is one pass (a query containing ``{{x}}`` is not rendered again) and strict: an
unknown name or filter, or a ``{{`` that opens no placeholder, is a :class:`SearchError`
naming the configuration file and the field.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from judge.search._search_errors import SearchError

Value = str | int | float | bool

_PLACEHOLDER = re.compile(
    r"\{\{\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?:\|\s*(?P<filter>[A-Za-z_]+)\s*)?\}\}"
    r"|(?P<srw>%SearchText%)"
    r"|(?P<quepid_query>#\$query##)"
    r"|##(?P<knob>[A-Za-z_][A-Za-z0-9_]*)##"
)
FILTERS = ("json", "url")


def _plain(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _filtered(value: Value, name: str | None) -> str:
    if name is None:
        return _plain(value)
    if name == "json":
        return json.dumps(value, ensure_ascii=False)
    return urllib.parse.quote(_plain(value), safe="")


@dataclass(frozen=True)
class Template:
    """A checked template: ``text`` as written, ``field`` where it came from (for errors)."""

    text: str
    field: str
    path: str | None

    def names(self) -> set[str]:
        """The variable names the template uses."""
        out: set[str] = set()
        for m in _PLACEHOLDER.finditer(self.text):
            out.add(m.group("name") or m.group("knob") or "query")
        return out

    def render(self, variables: Mapping[str, Value]) -> str:
        def sub(m: re.Match[str]) -> str:
            if m.group("srw") or m.group("quepid_query"):
                return _plain(variables["query"])
            name = m.group("name") or m.group("knob")
            if name not in variables:
                known = ", ".join(sorted(variables))
                raise SearchError(
                    f"unknown template variable {name!r} in {m.group(0)!r} (known: {known})",
                    path=self.path,
                    field=self.field,
                )
            return _filtered(variables[name], m.group("filter"))

        return _PLACEHOLDER.sub(sub, self.text)


def compile_template(text: str, field: str, path: str | Path | None, known: set[str]) -> Template:
    """Check ``text``: every placeholder well formed, every name in ``known``, every filter
    one of :data:`FILTERS`; else a :class:`SearchError` naming ``path`` and ``field``."""
    where = str(path) if path is not None else None
    for m in _PLACEHOLDER.finditer(text):
        name = m.group("name") or m.group("knob")
        if name is not None and name not in known:
            known_list = ", ".join(sorted(known))
            raise SearchError(
                f"unknown template variable {name!r} in {m.group(0)!r} (known: {known_list})",
                path=where,
                field=field,
            )
        flt = m.group("filter")
        if flt is not None and flt not in FILTERS:
            raise SearchError(
                f"unknown filter {flt!r} in {m.group(0)!r} (known: {', '.join(FILTERS)})",
                path=where,
                field=field,
            )
    rest = _PLACEHOLDER.sub("", text)
    if "{{" in rest:  # a lone "}}" is fine: JSON objects close with it right after a placeholder
        bad = rest[max(0, rest.find("{{") - 10) :][:40]
        raise SearchError(f"a malformed placeholder near {bad!r}", path=where, field=field)
    return Template(text, field, where)
