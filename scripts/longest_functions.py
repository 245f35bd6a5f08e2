#!/usr/bin/env python
"""The longest functions (source lines, decorators and docstring included) under the given
paths: ``python scripts/longest_functions.py judge/server --max 120`` exits 1 if any is longer."""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def lengths(root: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for path in sorted(root.rglob("*.py") if root.is_dir() else [root]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                found.append(
                    (int(node.end_lineno or node.lineno) - start + 1, f"{path}:{node.lineno} {node.name}")
                )
    return sorted(found, reverse=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--max", type=int, default=120, help="longest allowed (default 120 lines)")
    ap.add_argument("--top", type=int, default=5, help="how many to list (default 5)")
    args = ap.parse_args(argv)
    found = sorted((x for p in args.paths for x in lengths(p)), reverse=True)
    for n, where in found[: args.top]:
        print(f"{n:5d}  {where}")
    return 1 if found and found[0][0] > args.max else 0


if __name__ == "__main__":
    sys.exit(main())
