"""The embedded model is named one way, and the concurrency a run over it records is the one
its help states: the reasons it decodes together."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from judge.backends import (
    EMBEDDED_CONCURRENCY,
    EMBEDDED_MODEL_NAME,
    describe_backend,
    make_backend,
)
from judge.batch import RunSpec
from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
# A prose name of a Qwen2.5 1.5B model ("Qwen2.5 1.5B", "Qwen2.5-1.5B", "Qwen2.5-Coder-1.5B
# Q4_K_M", ...); specs and file names (``local:qwen2.5-coder-1.5b-q4km``) are lower case.
PROSE_NAME = re.compile(r"Qwen\s?2\.5[\w.\- ]{0,12}?1\.5B(?:-Instruct)?")


def test_the_name_is_qwen25_coder_15b_instruct() -> None:
    assert EMBEDDED_MODEL_NAME == "Qwen2.5-Coder-1.5B-Instruct"
    assert PROSE_NAME.fullmatch("Qwen2.5 1.5B") and PROSE_NAME.fullmatch("Qwen2.5-1.5B")
    assert PROSE_NAME.search("the Qwen2.5-Coder-1.5B Q4_K_M model").group() == "Qwen2.5-Coder-1.5B"  # type: ignore[union-attr]


def test_code_prompts_scripts_and_docs_spell_it_one_way() -> None:
    others = []
    for folder in ("judge", "prompts", "scripts", "docs", "tests"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".toml", ".md", ".js", ".html") or path == Path(__file__):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            others += [
                f"{path.relative_to(ROOT)}: {m.group()!r}"
                for m in PROSE_NAME.finditer(text)
                if m.group() != EMBEDDED_MODEL_NAME
            ]
    assert others == []


def test_cli_help_names_the_model_and_its_concurrency(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"the embedded model {EMBEDDED_MODEL_NAME}" in help_text
    assert f"{EMBEDDED_CONCURRENCY} for the embedded model" in help_text
    assert "1 for the embedded model" not in help_text


def test_recorded_concurrency_is_the_one_the_help_states() -> None:
    pytest.importorskip("numpy")
    from judge.backends._local import LocalBackend  # the model loads at its first call only

    backend = make_backend(LocalBackend())
    assert EMBEDDED_CONCURRENCY == 4
    # what ``judge score`` records in the summary (BatchOptions.concurrency) and enforces
    assert RunSpec().concurrency_for(backend) == EMBEDDED_CONCURRENCY == backend.max_concurrency
    assert describe_backend(backend) == (
        f"judge: using judge local:qwen2.5-coder-1.5b-q4km (the embedded model {EMBEDDED_MODEL_NAME}; "
        "backend object passed)"
    )
