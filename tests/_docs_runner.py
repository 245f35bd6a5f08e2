"""The docs runner: how tests/test_docs_examples.py and tests/test_readme.py run Markdown blocks.

See tests/test_docs_examples.py for the rules."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK_TIMEOUT_S = 240.0
README_BACKEND = "qrels:datasets/sample.qrels"
_SENTINEL = "__judge_docs_block_end__"

_FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
_SKIP = re.compile(r"<!--\s*skip:\s*(.*?)\s*-->\s*$")
_PORT = re.compile(r"(?:127\.0\.0\.1:|localhost:|--port[ =])(\d{4,5})\b")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None

    @property
    def id(self) -> str:
        name = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{name}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    """The ``bash`` and ``python`` blocks of one Markdown file, in order, with their skip reason."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        lang = match.group(1).lower()
        if lang not in {"bash", "python"}:
            continue
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()]
        above = before[:-1].rsplit("\n", 1)[-1] if before.endswith("\n") else ""
        skip = _SKIP.search(above)
        found.append(Block(path, line, lang, match.group(2), skip.group(1) if skip else None))
    return found


def all_blocks() -> list[Block]:
    return [block for path in doc_files() for block in blocks_of(path)]


def checkout_copy(dest: Path) -> Path:
    """The checkout's files (tracked and new, not ignored) copied under ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if not source.is_file():  # deleted in the work tree but still in the index
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def docs_env(home: Path, copy: Path, backend: str | None) -> dict[str, str]:
    drop = {"DASHSCOPE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "JUDGE_BACKEND"}
    drop |= {"JUDGE_API_KEYS", "PYTEST_CURRENT_TEST"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(copy)
    env["JUDGE_HOME"] = str(home)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    if backend is not None:
        env["JUDGE_BACKEND"] = backend
    return env


_PY_DRIVER = f"""
import sys, traceback
scope = {{"__name__": "__main__"}}
for name in sys.stdin:
    name = name.strip()
    code = open(name, encoding="utf-8").read()
    status = 0
    try:
        exec(compile(code, name, "exec"), scope)
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush(); sys.stderr.flush()
    print("\\n{_SENTINEL}", status, flush=True)
"""


class _Process:
    """One long-lived bash or python process fed one block at a time."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, command: str, timeout: float) -> tuple[int | None, str]:
        """Send ``command``; the block's status (None: timed out) and its output."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return 1, "(the shell had exited)"
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None, "".join(out)
            if line is None:  # the process ended: `set -e` stopped at a failing command
                return self.proc.wait(), "".join(out)
            if line.startswith(_SENTINEL):
                return int(line.split()[1]), "".join(out)
            out.append(line)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@dataclass
class FileSession:
    """The copy, the shell and the interpreter one Markdown file's blocks share."""

    path: Path
    base: Path
    ports: dict[str, str] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    failed: str | None = None
    outputs: dict[int, str] = field(default_factory=dict)
    _bash: _Process | None = None
    _python: _Process | None = None
    shell_at_start: tuple[dict[str, str], str] | None = None  # the bash's env and cwd, first block

    def __post_init__(self) -> None:
        self.repo = checkout_copy(self.base / "repo")
        backend = README_BACKEND if self.path == ROOT / "README.md" else None
        self.env = docs_env(self.base / "home", self.repo, backend)
        text = self.path.read_text(encoding="utf-8")
        for port in sorted(set(_PORT.findall(text))):
            self.ports[port] = str(free_port())

    def localize(self, code: str) -> str:
        if not self.ports:
            return code
        return _PORT.sub(lambda m: m.group(0)[: -len(m.group(1))] + self.ports[m.group(1)], code)

    def run(self, block: Block) -> str:
        script = self.base / f"block-{block.line}.{'sh' if block.lang == 'bash' else 'py'}"
        script.write_text(self.localize(block.code), encoding="utf-8")
        if block.lang == "bash":
            if self._bash is None:
                self._bash = _Process(["bash", "--noprofile", "--norc"], self.repo, self.env)
                self._bash.run(f"set -e\nprintf '\\n{_SENTINEL} 0\\n'\n", 30)
                if self.shell_at_start is None:
                    self.shell_at_start = self.shell_state()
            # Sourced with stdin from /dev/null, so no command of the block can read the next one.
            command = f". {script} </dev/null\nprintf '\\n{_SENTINEL} %s\\n' \"$?\"\n"
            status, out = self._bash.run(command, BLOCK_TIMEOUT_S)
            if status != 0:  # the shell is gone (set -e) or stuck: start over for later blocks
                self._bash.close()
                self._bash = None
        else:
            if self._python is None:
                self._python = _Process([sys.executable, "-u", "-c", _PY_DRIVER], self.repo, self.env)
            status, out = self._python.run(f"{script}\n", BLOCK_TIMEOUT_S)
            if status is None:
                self._python.close()
                self._python = None
        self.done.add(block.line)
        self.outputs[block.line] = out
        if status is None:
            self.failed = f"{block.id} ran over {BLOCK_TIMEOUT_S:.0f} s"
            raise AssertionError(f"{self.failed}; its output so far:\n{out}")
        if status != 0:
            self.failed = f"{block.id} failed (status {status})"
            raise AssertionError(f"{self.failed}; its output:\n{out}")
        return out

    def shell_state(self) -> tuple[dict[str, str], str] | None:
        """The bash process's exported variables (less ``_``, the last command's argument)
        and working directory, or None when no bash runs (not started, or restarted after a
        failing block)."""
        if self._bash is None:
            return None
        status, out = self._bash.run(f"env -0; printf '\\0'; pwd\nprintf '\\n{_SENTINEL} %s\\n' \"$?\"\n", 30)
        if status != 0:
            return None
        *pairs, cwd = out.rstrip("\n").split("\0")
        env = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
        env.pop("_", None)
        return env, cwd.strip()

    def close(self) -> None:
        for process in (self._bash, self._python):
            if process is not None:
                process.close()
        shutil.rmtree(self.base, ignore_errors=True)


class Sessions:
    def __init__(self) -> None:
        self.by_path: dict[Path, FileSession] = {}

    def run_through(self, block: Block) -> str:
        """Run ``block``, first running every earlier runnable block of its file not yet run
        (so one block selected alone still sees the state the page builds up)."""
        session = self.by_path.get(block.path)
        if session is None:
            session = FileSession(block.path, Path(tempfile.mkdtemp(prefix="judge-docs-")))
            self.by_path[block.path] = session
        for earlier in blocks_of(block.path):
            if earlier.line >= block.line:
                break
            if earlier.skip is None and earlier.line not in session.done:
                session.run(earlier)
        if session.failed is not None:
            pytest.fail(f"not run: an earlier block failed ({session.failed})")
        return session.run(block)

    def close(self) -> None:
        for session in self.by_path.values():
            session.close()
