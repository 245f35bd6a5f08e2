"""The ``judge`` command line: one module per subcommand, dispatched from here.

Exit codes (documented in the README):
  0  success (for ``stability``/``nightly``: the run passed its threshold)
  1  the run completed but failed its check (stability breach; nightly search: a significant drop)
  2  bad input or bad usage (an error names the file, line and field); nothing was judged
  3  the judge backend failed in a way that dooms every request (auth, unknown model, lost
     cluster); a pair the backend cannot judge only becomes unjudged
  130 interrupted (Ctrl-C); work done so far is kept
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from judge._env import configure_deepeval_env

configure_deepeval_env()

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_BACKEND = 3
EXIT_INTERRUPTED = 130

# Each module defines ``register(subparsers) -> None`` that adds its subparser and sets
# ``func=<callable(args) -> int>`` as the parser default.
_COMMAND_MODULES: tuple[str, ...] = (
    "judge.cli._trec_commands",
    "judge.cli._score",
    "judge.cli._eval",
    "judge.cli._stability",
    "judge.cli._agree",
    "judge.cli._geneval",
    "judge.cli._systems",
    "judge.cli._experiment",
    "judge.cli._serve",
    "judge.cli._label_commands",
    "judge.cli._exchange",
    "judge.cli._search_commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="judge",
        description="LLM relevance judging and trec_eval-exact retrieval metrics.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from judge.io import InputError, redact

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except InputError as exc:
        print(f"judge: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("judge: interrupted; work done so far is kept", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        # Imported only on failure: commands such as ``judge trec`` never load the backends.
        from judge.backends import BackendError, ConfigurationError

        if isinstance(exc, ConfigurationError):
            print(f"judge: configuration error: {redact(str(exc))}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(exc, BackendError):
            print(f"judge: backend error: {redact(str(exc))}", file=sys.stderr)
            if "same command again" not in str(exc) and not getattr(args, "no_cache", False):
                print(f"judge: {_resume_hint(exc)}", file=sys.stderr)
            return EXIT_BACKEND
        raise
    return code


def _resume_hint(exc: Exception) -> str:
    """What to do after a backend error that stopped a run (every verdict judged before it
    is in the verdict cache, so a re-run asks only for the rest)."""
    if getattr(exc, "resume_helps", False):
        return "the verdicts judged so far are kept: run the same command again to resume"
    return (
        "the verdicts judged so far are kept: fix the cause above, then run the same command again to resume"
    )


def run() -> None:
    sys.exit(main())
