"""Request bodies and options of the HTTP API (pydantic: a malformed body is a 422 whose
``detail[].loc`` names the field)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from judge.io._jsonl import DEFAULT_MAX_PASSAGE_CHARS


def builtin_template_ids() -> set[str]:
    from judge.judging import list_templates

    return {t.id for t in list_templates()}


def _check_template(value: str | None) -> str | None:
    # Built-in ids only: a request must not make the server read a file by path.
    if value is not None and value not in builtin_template_ids():
        raise ValueError(f"unknown template {value!r}; GET /v1/info lists the built-in ones")
    return value


class JudgeOptions(BaseModel):
    """How passages are judged (the ``judge score`` flags); unset fields take the server's defaults."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["binary", "graded"] | None = None
    language: Literal["zh", "en"] | None = None
    template: str | None = None
    probability: bool | None = None
    p_yes_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    explain: bool | None = None

    @field_validator("template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        return _check_template(value)


class JobOptions(JudgeOptions):
    """Options of a scoring job: ``POST /v1/jobs?mode=graded&k=5&k=10`` or ``{"options": {...}}``."""

    k: list[int] | None = Field(default=None, min_length=1, max_length=20)
    listwise: bool = False
    listwise_template: str | None = None
    max_passage_chars: int = Field(default=DEFAULT_MAX_PASSAGE_CHARS, ge=1, le=1_000_000)
    map: dict[str, str] = Field(default_factory=dict)

    @field_validator("k")
    @classmethod
    def _k(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(c < 1 or c > 10_000 for c in value):
            raise ValueError("cutoffs must be integers in 1..10000")
        return None if value is None else list(dict.fromkeys(value))

    @field_validator("listwise_template")
    @classmethod
    def _listwise_template(cls, value: str | None) -> str | None:
        return _check_template(value)

    @field_validator("map")
    @classmethod
    def _map(cls, value: dict[str, str]) -> dict[str, str]:
        from judge.io._jsonl import parse_field_map

        return parse_field_map([f"{a}={b}" for a, b in value.items()]) if value else {}


class JobRequest(BaseModel):
    """``POST /v1/jobs`` as JSON: the records ``judge score`` reads, and the options."""

    model_config = ConfigDict(extra="forbid")

    records: list[dict[str, Any]] = Field(min_length=1)
    options: JobOptions = Field(default_factory=JobOptions)


class PassageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    text: str


class EvaluateRequest(BaseModel):
    """``POST /v1/evaluate``: one query and its ranked passages."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1)
    retrieval_context: list[str | PassageIn]
    mode: Literal["binary", "graded"] | None = None
    k: list[int] = Field(default_factory=lambda: [5, 10], min_length=1, max_length=20)
    summary: bool = False
    config: JudgeOptions | None = None

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query is blank")
        return value

    @field_validator("k")
    @classmethod
    def _k(cls, value: list[int]) -> list[int]:
        if any(c < 1 or c > 10_000 for c in value):
            raise ValueError("cutoffs must be integers in 1..10000")
        return list(dict.fromkeys(value))
