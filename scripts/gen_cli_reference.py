"""Reference pages generated from the code when the docs site is built (an MkDocs hook).

``mkdocs.yml`` names this file under ``hooks:``; on every build it adds three pages that are
never committed, so they cannot go stale:

* ``reference/cli.md``: the help of ``judge`` and of every subcommand (``judge labels
  import`` ...), rendered by the argparse parsers themselves (``judge.cli.build_parser``);
* ``reference/http-api.md``: every route of ``judge serve`` with its parameters, request body
  and responses, and every schema, from the OpenAPI document ``create_app(...).openapi()``
  (no Swagger UI, nothing fetched);
* ``getting-started.md``: README.md with its links made relative to ``docs/`` (a link to a page
  that does not exist yet becomes plain text).

Run as a script it prints a page: ``python scripts/gen_cli_reference.py cli|http``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # document this checkout, not another installed copy
    sys.path.insert(0, str(ROOT))

#: argparse wraps every help at this many columns: the width of a code block on the page.
HELP_WIDTH = "80"


# --- the CLI ---------------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases share one parser
                    seen.add(id(sub))
                    found.append((name, sub))
    return found


def _walk(
    parser: argparse.ArgumentParser, path: list[str]
) -> list[tuple[list[str], argparse.ArgumentParser]]:
    out = [(path, parser)]
    for name, sub in _subcommands(parser):
        out.extend(_walk(sub, [*path, name]))
    return out


def cli_markdown() -> str:
    """Every command's ``--help``, as argparse prints it, one section per command."""
    from judge.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH  # argparse wraps to the terminal: fix the width
    try:
        parser = build_parser()
        lines = [
            "# Command line reference",
            "",
            "Generated from the `judge` command's argparse parsers when this site is built: each",
            "section is exactly what `judge ... --help` prints. Exit codes:",
            "[Exit codes](exit-codes.md).",
            "",
        ]
        for path, sub in _walk(parser, ["judge"]):
            name = " ".join(path)
            lines += [f"## `{name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
        return "\n".join(lines)
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


# --- the HTTP API ----------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """``create_app(...).openapi()`` for a server on a throwaway database (nothing is served)."""
    from judge.backends import make_backend
    from judge.server import KeyRing, Runtime, ServerConfig, create_app

    with tempfile.TemporaryDirectory(prefix="judge-openapi-") as tmp:
        home = Path(tmp)
        runtime = Runtime(
            backend=make_backend(f"qrels:{ROOT / 'datasets' / 'sample.qrels'}"),
            store=None,
            jobs_dir=home / "jobs",
            concurrency=1,
        )
        config = ServerConfig(
            db_path=home / "server.sqlite",
            jobs_dir=home / "jobs",
            runtime=runtime,
            defaults={},
            keys=KeyRing([]),
        )
        app = create_app(config)
        document: dict[str, Any] = app.openapi()
        lock = getattr(config, "db_lock", None)
        if lock is not None:
            lock.release()
        return document


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|") if text not in (None, "") else ""


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(_type(s) for s in schema[key])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return f"{kind}: " + ", ".join(f"`{v}`" for v in schema["enum"])
    return str(kind)


def _anchor(name: str) -> str:
    return "schema-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def http_markdown() -> str:
    """The routes and schemas of the OpenAPI document as Markdown tables."""
    doc = openapi_document()
    info = doc.get("info", {})
    lines = [
        "# HTTP API reference",
        "",
        f"Generated from the OpenAPI document of `judge serve` ({_cell(info.get('title'))} "
        f"{_cell(info.get('version'))}) when this site is built. A running server also serves it as",
        "JSON at `/openapi.json`. How to start the server, auth, bounds and errors:",
        "[Run the service](../guides/service.md).",
        "",
        "## Routes",
        "",
    ]
    for route, methods in doc.get("paths", {}).items():
        for method, op in methods.items():
            lines += [f"### `{method.upper()} {route}`", ""]
            for key in ("summary", "description"):
                if op.get(key):
                    lines += [str(op[key]).strip(), ""]
            params = op.get("parameters", [])
            if params:
                lines += ["| parameter | in | required | type | description |", "|---|---|---|---|---|"]
                for p in params:
                    lines.append(
                        f"| `{p['name']}` | {p.get('in', '')} | {'yes' if p.get('required') else 'no'} "
                        f"| {_type(p.get('schema', {}))} | {_cell(p.get('description'))} |"
                    )
                lines.append("")
            body = op.get("requestBody")
            if body:
                kinds = ", ".join(
                    f"`{ctype}` ({_type(media.get('schema', {}))})"
                    for ctype, media in body.get("content", {}).items()
                )
                lines += [f"Request body{' (required)' if body.get('required') else ''}: {kinds}", ""]
            responses = op.get("responses", {})
            if responses:
                lines += ["| status | description |", "|---|---|"]
                lines += [f"| {code} | {_cell(r.get('description'))} |" for code, r in responses.items()]
                lines.append("")
    schemas = doc.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", ""]
    for name, schema in schemas.items():
        lines += [f"### {name} {{ #{_anchor(name)} }}", ""]
        if schema.get("description"):
            lines += [_cell(schema["description"]), ""]
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        if props:
            lines += ["| field | type | required | default | description |", "|---|---|---|---|---|"]
            for field, sub in props.items():
                default = f"`{sub['default']}`" if "default" in sub else ""
                lines.append(
                    f"| `{field}` | {_type(sub)} | {'yes' if field in required else 'no'} | {_cell(default)} "
                    f"| {_cell(sub.get('description') or sub.get('title'))} |"
                )
            lines.append("")
        elif "enum" in schema:
            lines += [_type(schema), ""]
    return "\n".join(lines)


# --- README as the site's getting-started page --------------------------------------------------

_LINK = re.compile(r"\]\((docs/)?([^)#\s]+\.(?:md|svg|png))(#[^)]*)?\)")


def getting_started_markdown(docs_dir: Path) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")

    def relink(match: re.Match[str]) -> str:
        target = match.group(2)
        if match.group(1) is None or not (docs_dir / target).is_file():
            return f"]({match.group(0)[2:-1]})" if match.group(1) is None else "]"
        return f"]({target}{match.group(3) or ''})"

    text = _LINK.sub(relink, text)
    # "[text]" left by a link to a page not written yet: keep the text only.
    text = re.sub(r"\[([^\]]+)\](?!\()", r"\1", text)
    return text.replace("# judge\n", "# Getting started\n", 1)


# --- the MkDocs hook -------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    docs_dir = Path(config["docs_dir"])
    pages = {
        "reference/cli.md": cli_markdown(),
        "reference/http-api.md": http_markdown(),
        "getting-started.md": getting_started_markdown(docs_dir),
    }
    for name, content in pages.items():
        files.append(File.generated(config, name, content=content))
    return files


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "cli"
    print(cli_markdown() if which == "cli" else http_markdown())
