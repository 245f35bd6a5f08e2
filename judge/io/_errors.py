"""The one exception type for bad input files: it names the file, the line and the field, and
its message passes through the secrets redaction (it may quote a request or an answer)."""

from __future__ import annotations

from pathlib import Path

from judge.io._secrets import redact


class InputError(ValueError):
    """Bad input at a known place. ``line`` is 1-based; ``field`` the offending field/column."""

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        self.message = redact(message)  # a message quoting a request or an answer carries no secret
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        field = f"field '{self.field}': " if self.field else ""
        return f"{where}{field}{self.message}"
