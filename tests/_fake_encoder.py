"""A tiny deterministic encoder for the dense-retrieval tests (no model): a text's vector is
its characters' and character bigrams' counts hashed into 16 buckets (CRC32), plus a
seed-dependent offset, L2-normalised. Texts sharing characters score higher; a different
``seed`` is "another encoder" with the same name. ``calls`` counts passages encoded."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

DIM = 16


class FakeEncoder:
    name = "fake-hash"
    version = "1"
    dim = DIM

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.calls = 0

    def _vector(self, text: str) -> npt.NDArray[np.float32]:
        v = np.zeros(DIM, dtype=np.float64)
        grams = [*text.lower(), *(text[i : i + 2].lower() for i in range(len(text) - 1))]
        for g in grams:
            if g.strip():
                v[zlib.crc32(g.encode("utf-8")) % DIM] += 1.0
        v += 0.05 * (1 + np.arange(DIM) * self.seed)
        return (v / np.linalg.norm(v)).astype(np.float32)

    def queries(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, DIM), np.float32)

    def passages(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += len(texts)
        return self.queries(texts)
