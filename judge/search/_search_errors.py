"""The search package's errors: a bad query set, configuration or engine answer is a
:class:`SearchError` (an :class:`~judge.io.InputError`: it names the file and the field, and
the CLI exits 2 before anything is judged); a run that fails part way (an engine that stops
answering after the probe) is :class:`SearchFailed` (the lines written so far are kept and a
re-run resumes). Every message passes through :func:`judge.io.redact` when the error is
made: an engine's answer or an HTTP library's text that quotes a header token or a DSN
never reaches a terminal or a log."""

from __future__ import annotations

from judge.io import InputError, redact


class SearchError(InputError):
    """A query set, configuration, template or engine answer that cannot be used. ``path`` is
    the configuration (or query) file, ``field`` the offending key (``url``, ``body``,
    ``response.ids``...). Its message is redacted as every :class:`~judge.io.InputError`'s."""


class SearchFailed(RuntimeError):
    """The engine failed for a query after the retries, part way through a run."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class TransientSearchError(RuntimeError):
    """A failure worth retrying (a timeout, a refused connection, HTTP 429 or 5xx);
    ``field`` is the configuration key to blame when it persists (``url``, ``dsn``...)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(redact(message))
        self.field = field
