"""The executor seam of the batch driver: who actually asks the LLM.

The batch driver (``judge score``, ``--retry-unjudged``, listwise, stability, pooled
comparison, the HTTP service) works in three steps:

1. **plan**: decide which passages need a verdict (fresh, resumed, retry-unjudged, pooled)
   and look each one up in the verdict store; hits never reach an executor;
2. **execute**: hand the misses, one query at a time, to an :class:`Executor`;
3. **commit**: write the verdicts the executor returned into the verdict store (judged ones
   only), the output file and the summary.

An executor therefore never sees the store: it judges what it is given and returns one
:class:`~judge.judging.PassageVerdict` per job, in the order of ``jobs``. That is what lets
an executor run on other machines (Ray workers cannot share one SQLite file): workers
return verdicts, the driver commits them.

Executors: :class:`LocalExecutor` (asyncio tasks over one resilient backend, the default)
and the Ray executor (``judge score --engine ray``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from judge.judging import JudgeConfig, Passage
from judge.judging._models import PassageVerdict


@dataclass(frozen=True)
class PassageJob:
    """One passage to judge: ``index`` is its rank position in the query's list."""

    index: int
    passage: Passage


@runtime_checkable
class Executor(Protocol):
    """Judges the passages of one query; the store is the driver's business, not its own."""

    @property
    def name(self) -> str:
        """Short label for logs and the summary (``local``, ``ray``)."""
        ...

    async def judge(
        self,
        query: str,
        jobs: Sequence[PassageJob],
        config: JudgeConfig,
        *,
        listwise: bool = False,
        listwise_template: str | None = None,
    ) -> list[PassageVerdict]:
        """One verdict per job, in job order (unjudged verdicts carry their error)."""
        ...

    async def aclose(self) -> None:
        """Release workers, pools and connections."""
        ...
