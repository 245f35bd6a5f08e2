"""The search package's errors: a bad query set, configuration or engine answer is a
:class:`SearchError` (an :class:`~judge.io.InputError`: it names the file and the field, and
the CLI exits 2 before anything is judged); a run that fails part way (an engine that stops
answering after the probe) is :class:`SearchFailed` (the lines written so far are kept and a
re-run resumes)."""

from __future__ import annotations

from judge.io import InputError


class SearchError(InputError):
    """A query set, configuration, template or engine answer that cannot be used. ``path`` is
    the configuration (or query) file, ``field`` the offending key (``url``, ``body``,
    ``response.ids``...)."""


class SearchFailed(RuntimeError):
    """The engine failed for a query after the retries, part way through a run."""


class TransientSearchError(RuntimeError):
    """A failure worth retrying (a timeout, a refused connection, HTTP 429 or 5xx);
    ``field`` is the configuration key to blame when it persists (``url``, ``dsn``...)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
