"""The search configurations a server may run experiments with: registered by the admin at
start (``judge serve --search-config NAME=FILE``, repeatable), named by requests.

A request never gives a path, a URL or an index location of its own: it names a registered
configuration and, in a grid or trials, values of the knobs (``[params]``) that
configuration has. Every point of the grid is checked before anything runs: a knob the
configuration does not have, a value that looks like a path or a URL, or a point whose
engine would reach another index, URL, database or module than the registered
configuration's is refused (422 naming the field). The listing (``GET /v1/search-configs``)
shows names, engines, depths and knobs only, redacted through the secrets registry: an
engine's secrets stay in the server's environment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.io import InputError, redact
from judge.search import SearchConfig, load_config

#: a registered configuration's name (also what a request may give: nothing else)
NAME_PATTERN = r"^[A-Za-z0-9][\w.\-]{0,99}$"
_NAME = re.compile(NAME_PATTERN)
# a knob value that reaches somewhere: a URL scheme, a path separator, a home or parent dir
_LOCATION = re.compile(r"(^[a-zA-Z][\w+.\-]*://)|[/\\]|^~|^\.\.?$|^[A-Za-z]:")


@dataclass(frozen=True)
class RegisteredConfig:
    """One registered search configuration: its name, its file and the configuration read
    from it (an embedded index resolved relative to the file, as the CLI does)."""

    name: str
    path: Path
    config: SearchConfig

    def folders(self) -> list[Path]:
        """The server folders this configuration names (its file's, its embedded index's):
        what a response must not show (:func:`judge.server._public.public`)."""
        found = [self.path.parent]
        if self.config.index is not None:
            found += [self.config.index, self.config.index.parent]
        return found

    def public(self) -> dict[str, Any]:
        """What ``GET /v1/search-configs`` shows: no path, URL, index or credential."""
        knobs = {k: redact(v) if isinstance(v, str) else v for k, v in self.config.params.items()}
        return {"name": self.name, "engine": self.config.engine, "depth": self.config.depth, "knobs": knobs}


def register_configs(items: Sequence[str]) -> dict[str, RegisteredConfig]:
    """``NAME=FILE`` items (``judge serve --search-config``) read and checked now: a bad item,
    a name given twice or a configuration that does not load is an InputError naming the flag."""
    out: dict[str, RegisteredConfig] = {}
    for item in items:
        name, sep, file = item.partition("=")
        name = name.strip()
        if not sep or not file.strip():
            raise InputError(f"expected NAME=FILE, got {item!r}", field="--search-config")
        if not _NAME.match(name):
            raise InputError(
                f"{name!r} is not a configuration name (letters, digits, _ . -; at most 100)",
                field="--search-config",
            )
        if name in out:
            raise InputError(f"{name!r} is registered twice", field="--search-config")
        path = Path(file.strip()).resolve()
        if not path.is_file():
            raise InputError("no such file", path=str(path), field="--search-config")
        try:
            config = load_config(path)
        except InputError as err:
            raise InputError(err.message, path=err.path, line=err.line, field="--search-config") from None
        out[name] = RegisteredConfig(name, path, config)
    return out


def _locations(config: SearchConfig) -> list[tuple[str, Any]]:
    """Everything a configuration's engine reaches (recursively through a hybrid's sources)."""
    found: list[tuple[str, Any]] = [
        ("engine", config.engine),
        ("index", config.index),
        ("url", config.url),
        ("dsn", config.dsn),
        ("dsn_env", config.dsn_env),
        ("callable", config.callable),
        ("retriever", config.retriever),
        ("pythonpath", config.pythonpath),
        ("headers", tuple(sorted(config.headers.items()))),
    ]
    for source in config.sources:
        found += _locations(source)
    return found


def _check_value(name: str, value: Any, where: str) -> None:
    if isinstance(value, str) and _LOCATION.search(value):
        raise InputError(
            f"knob {name!r}: {value!r} looks like a path or a URL; a request names registered "
            "configurations and knob values only",
            field=where,
        )


def check_knobs(registered: RegisteredConfig, grid: Mapping[str, Any], where: str) -> None:
    """The grid's knobs are the configuration's own and their values reach nowhere
    (InputError naming ``where.KNOB``)."""
    for name, spec in grid.items():
        if name not in registered.config.params:
            known = ", ".join(sorted(registered.config.params)) or "none"
            raise InputError(
                f"{registered.name!r} has no knob {name!r} (its knobs: {known})", field=f"{where}.{name}"
            )
        values: Iterable[Any] = spec.values() if isinstance(spec, Mapping) else spec
        for value in values:
            _check_value(name, value, f"{where}.{name}")


def location_knobs(config: SearchConfig) -> set[str]:
    """The knobs a configuration's ``url`` template names (``{{index}}``, Quepid's
    ``##index##``): they choose where the engine searches, not how it ranks."""
    found: set[str] = set()
    for source in (config, *config.sources):
        url = source.content.get("url")
        if isinstance(url, str):
            found |= {
                n
                for n in source.params
                if re.search(r"\{\{\s*" + re.escape(n) + r"\s*[|}]|##" + re.escape(n) + "##", url)
            }
    return found


def check_points(registered: RegisteredConfig, points: Iterable[Mapping[str, Any]], where: str) -> None:
    """Every point of the grid stays where the registered configuration points: another
    index, URL, database or module is refused, and so is another value of a knob its URL
    names (InputError naming ``where``)."""
    base = _locations(registered.config)
    fixed = location_knobs(registered.config)
    for point in points:
        moved_knobs = sorted(k for k in fixed if k in point and point[k] != registered.config.params.get(k))
        if moved_knobs:
            raise InputError(
                f"knob {moved_knobs[0]!r} names where {registered.name!r} searches (its URL); a request "
                "may not point it outside its registered index",
                field=f"{where}.{moved_knobs[0]}",
            )
        try:
            moved = registered.config.with_params(dict(point))
        except InputError as err:
            raise InputError(err.message, field=where) from None
        if _locations(moved) != base:
            raise InputError(
                f"the point {dict(point)!r} points {registered.name!r} outside its registered index",
                field=where,
            )


__all__ = [
    "NAME_PATTERN",
    "RegisteredConfig",
    "check_knobs",
    "check_points",
    "location_knobs",
    "register_configs",
]
