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

import re
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


def _pages_with_shell_blocks() -> list[Path]:
    pages = {b.path for b in all_blocks() if b.lang == "bash" and b.skip is None}
    return sorted(pages)


@pytest.mark.parametrize("page", _pages_with_shell_blocks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_page_leaves_the_shell_as_it_found_it(page: Path, sessions: Sessions) -> None:
    """After a page's blocks, its shell has the variables and the directory it started with:
    a reader who goes on in the same terminal (the README's first command next) sends it to
    the same judge, the same ``JUDGE_HOME`` and its cache. Free after the page's blocks ran
    above (one ``env`` call); run alone, it runs them first."""
    last = [b for b in blocks_of(page) if b.skip is None][-1]
    session = sessions.by_path.get(page)
    if session is None or last.line not in session.done:
        sessions.run_through(last)
        session = sessions.by_path[page]
    if session.failed is not None:
        pytest.skip(f"a block failed ({session.failed}): its own test reports it")
    before, after = session.shell_at_start, session.shell_state()
    assert before is not None and after is not None
    changed = {k: (before[0].get(k), after[0].get(k)) for k in before[0].keys() | after[0].keys()
               if before[0].get(k) != after[0].get(k)}  # fmt: skip
    assert not changed, f"{page.name} leaves these variables changed (before, after): {changed}"
    assert after[1] == before[1], f"{page.name} leaves the shell in {after[1]}, not {before[1]}"


_SHELL_STATE = re.compile(
    r"^\s*(export\s|cd(\s|$)|pushd\s|popd\b|unset\s|source\s|\.\s|"
    r"(JUDGE_\w+|DASHSCOPE_\w+|OPENAI_\w+|PYTHONPATH|PATH)=\S*\s*(#.*)?$)"
)


def _top_level_state_changes(code: str) -> list[str]:
    """Lines of a bash block that change the shell for later commands (``export``, ``cd``,
    ``unset``, a sourced file, a judge variable assigned alone), outside ``( ... )``
    subshells (a line opening with ``(`` to one opening with ``)``) and here-documents."""
    found, depth, heredoc = [], 0, None
    for line in code.splitlines():
        stripped = line.strip()
        if heredoc is not None:
            heredoc = None if stripped == heredoc else heredoc
            continue
        if stripped.startswith(")"):
            depth = max(0, depth - 1)
        elif stripped.startswith("(") and stripped.count("(") > stripped.count(")"):
            depth += 1
        elif depth == 0 and _SHELL_STATE.match(line):
            found.append(stripped)
        opened = re.search(r"<<-?\s*['\"]?(\w+)", line)
        if opened:
            heredoc = opened.group(1)
    return found


def test_no_block_changes_the_shell_for_later_commands() -> None:
    """Every bash block of the guides and the README, runnable or skipped, leaves the reader's
    shell as it was: a judge, a key or a home for one command goes on the command line
    (``--backend``, ``--store``, ``--cache``, ``VAR=... judge ...``), a ``cd`` in a subshell.
    The README's first two blocks are the install (``.venv`` activated and the build flags
    set for the rest of the shell: what an install is for) and are not held to it."""
    install = blocks_of(ROOT / "README.md")[:2]
    offending = {
        block.id: lines
        for block in all_blocks()
        if block.lang == "bash" and block not in install
        and (lines := _top_level_state_changes(block.code))
    }  # fmt: skip
    assert not offending, offending
    assert _top_level_state_changes("export JUDGE_HOME=x\ncd /tmp\nJUDGE_BACKEND=q\n") == [
        "export JUDGE_HOME=x", "cd /tmp", "JUDGE_BACKEND=q"
    ]  # fmt: skip
    assert _top_level_state_changes("(\n  cd /tmp\n)\nJUDGE_BACKEND=q judge score x\nSERVER_PID=$!\n") == []
    assert _top_level_state_changes("cat > f <<'EOF'\nexport X=1\nEOF\n") == []


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
