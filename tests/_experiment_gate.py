"""A qrels-backed judge for ``judge serve --backend-factory _experiment_gate:gated_qrels``:
it answers from the labels of ``JUDGE_TEST_QRELS``, appends every answered (query, passage)
to ``JUDGE_TEST_CALL_LOG`` (fsynced), and with ``JUDGE_TEST_GATE_AFTER=N`` holds every call
after the N-th answered one until the process dies (a job stays in the middle, deterministically)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from judge.backends import ChatRequest, Completion, QrelsBackend


class GatedQrels(QrelsBackend):
    def __init__(self, path: Path, log: Path, after: int | None) -> None:
        super().__init__(path)
        self.log = log
        self.after = after
        self.answered = 0

    async def complete(self, request: ChatRequest) -> Completion:
        if self.after is not None and self.answered >= self.after:
            await asyncio.Event().wait()  # held until the server is killed
        out = await super().complete(request)  # no await inside: the count and the answer are one step
        self.answered += 1
        meta: Any = request.meta or {}
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps([meta.get("query_id"), meta.get("passage_id")], ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return out


def gated_qrels() -> GatedQrels:
    after = os.environ.get("JUDGE_TEST_GATE_AFTER")
    return GatedQrels(
        Path(os.environ["JUDGE_TEST_QRELS"]),
        Path(os.environ["JUDGE_TEST_CALL_LOG"]),
        int(after) if after else None,
    )
