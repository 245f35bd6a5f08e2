"""Command-line flags shared by several subcommands (not a subcommand itself)."""

from __future__ import annotations

import argparse


def add_judge_flags(p: argparse.ArgumentParser) -> None:
    """``--backend``, ``--base-url``, ``--mode``, ``--language``, ``--template``, ``--probability``."""
    p.add_argument("--backend", default=None, help="backend spec, e.g. qwen:qwen-plus (default: auto)")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible server URL for openai:* backends")
    p.add_argument(
        "--mode", choices=("binary", "graded"), default="binary", help="verdict kind (default binary)"
    )
    p.add_argument("--language", choices=("zh", "en"), default="zh", help="template language (default zh)")
    p.add_argument("--template", default=None, help="template id or .toml path")
    p.add_argument("--probability", action="store_true", help="verdicts from answer-token probabilities")
