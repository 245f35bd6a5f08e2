"""Every ```bash and ```python block of README.md and docs/**/*.md runs as written.

How the blocks run (one mechanism for every page):

* Each Markdown file gets a fresh temporary copy of the checkout's files (``git ls-files``:
  tracked files and new ones not ignored), so what the examples write (outputs, reports,
  caches) never touches the checkout. The copy is the working directory, and the copied
  package is the one imported (``PYTHONPATH``), with this venv's ``judge`` on ``PATH``.
* A file's blocks run in document order: every ``bash`` block in one ``bash`` process
  (``set -e``; variables, ``cd`` and background jobs carry over from block to block) and
  every ``python`` block in one interpreter (names carry over). Each block has a time
  limit (``BLOCK_TIMEOUT_S``); whatever a file's blocks left running (a server started with
  ``&``) is ended with the file's process group.
* A block preceded, on the line right above its fence, by ``<!-- skip: REASON -->`` is not
  run: its test is skipped with that reason (a paid key, an install, the embedded model).
* The environment is a newcomer's: no provider key, no ``OPENAI_BASE_URL``, a private
  ``JUDGE_HOME``, and ``JUDGE_BACKEND`` unset, except for README.md, which runs with
  ``JUDGE_BACKEND=qrels:datasets/sample.qrels``: its first command uses the default judge (the
  embedded model, minutes on 2 cores), and here the qrels-backed judge on the sample's own
  hand labels stands in for it (seconds, same outputs' shape). Pages set ``JUDGE_BACKEND``
  themselves, visibly, where they want it.
* Loopback ports written in a file (``127.0.0.1:8000``, ``--port 8000``) are replaced by free
  ones, the same replacement for every block of the file, so parallel runs cannot collide.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _docs_runner import ROOT, Block, FileSession, Sessions, all_blocks, blocks_of


@pytest.fixture(scope="module")
def sessions() -> Iterator[Sessions]:
    held = Sessions()
    try:
        yield held
    finally:
        held.close()


@pytest.mark.parametrize("block", all_blocks(), ids=lambda b: b.id)
def test_doc_block_runs_as_written(block: Block, sessions: Sessions) -> None:
    if block.skip is not None:
        pytest.skip(f"{block.id}: {block.skip}")
    sessions.run_through(block)


# --- the mechanism itself ------------------------------------------------------------------


def test_blocks_are_found_with_their_skip_reasons(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n```bash\necho one\n```\n\n<!-- skip: needs a key -->\n```python\nprint(2)\n```\n\n"
        "<!-- skip: not right above -->\n\n```bash\necho three\n```\n```text\nnot code\n```\n"
        "```console\n$ not run\n```\n",
        encoding="utf-8",
    )
    found = blocks_of(page)
    assert [(b.line, b.lang, b.code, b.skip) for b in found] == [
        (3, "bash", "echo one\n", None),
        (8, "python", "print(2)\n", "needs a key"),
        (14, "bash", "echo three\n", None),
    ]


def test_state_carries_over_and_a_failure_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nexport GREETING=hi\ncd datasets\n```\n"
        '```bash\necho "$GREETING from $(basename "$PWD")"\n```\n'
        "```python\nx = 41\n```\n```python\nprint(x + 1)\n```\n"
        "```bash\nfalse\necho never\n```\n"
        "```bash\necho after\n```\n",
        encoding="utf-8",
    )
    session = FileSession(page, tmp_path / "run")
    try:
        found = blocks_of(page)
        session.run(found[0])
        assert session.run(found[1]).strip() == "hi from datasets"
        session.run(found[2])
        assert session.run(found[3]).strip() == "42"
        with pytest.raises(AssertionError, match="failed"):
            session.run(found[4])
        assert "never" not in session.outputs[found[4].line]
        assert session.run(found[5]).strip() == "after"  # a new shell for what follows
    finally:
        session.close()


def test_ports_are_swapped_for_free_ones_consistently(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\njudge serve --port 8000 &\ncurl http://127.0.0.1:8000/healthz\n```\n", encoding="utf-8"
    )
    session = FileSession(page, tmp_path / "run")
    try:
        code = session.localize(blocks_of(page)[0].code)
        new = session.ports["8000"]
        assert new != "8000" and code == f"judge serve --port {new} &\ncurl http://127.0.0.1:{new}/healthz\n"
    finally:
        session.close()


def test_the_copy_is_isolated_from_the_checkout(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\ntouch written-by-an-example\ntest -f datasets/sample.jsonl\n```\n", encoding="utf-8"
    )
    session = FileSession(page, tmp_path / "run")
    try:
        session.run(blocks_of(page)[0])
        assert (session.repo / "written-by-an-example").is_file()
        assert not (ROOT / "written-by-an-example").exists()
        assert session.env["PYTHONPATH"] == str(session.repo) and "JUDGE_BACKEND" not in session.env
    finally:
        session.close()
