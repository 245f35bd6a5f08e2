"""The docs site builds with `mkdocs build --strict`, loads nothing from another host, and its
reference pages are generated from the code (every CLI command, every HTTP route)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="the docs site needs the [docs] extra: pip install -e '.[docs]'",
)

# An element that makes the browser fetch from elsewhere: a script, stylesheet, font, image or
# frame whose address has a scheme or starts with //.
_EXTERNAL = re.compile(
    r"<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)\s*=\s*[\"'](?:[a-z]+:)?//", re.I
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield out


def test_external_pattern_catches_what_it_must() -> None:
    assert _EXTERNAL.search('<script src="https://cdn.example/x.js"></script>')
    assert _EXTERNAL.search("<link rel=stylesheet href='//fonts.example/css'>")
    assert _EXTERNAL.search('<img alt="" src="http://x/y.png">')
    assert not _EXTERNAL.search('<script src="../assets/javascripts/bundle.js"></script>')
    assert not _EXTERNAL.search('<a href="https://squidfunk.github.io/mkdocs-material/">Material</a>')


def test_no_page_loads_anything_from_another_host(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert not _EXTERNAL.search(html), page
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html, page
        # Material fetches mermaid from a CDN only for a diagram: there must be none.
        assert 'class="mermaid"' not in html, page
    for css in site.rglob("*.css"):
        assert not re.search(r"@import\s+url\(\s*[\"']?(?:https?:)?//", css.read_text(encoding="utf-8")), css


def _commands(parser: argparse.ArgumentParser, path: list[str]) -> Iterator[list[str]]:
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, [*path, name])


def test_cli_reference_has_every_command_help(site: Path) -> None:
    from judge.cli import build_parser

    html = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    commands = [" ".join(path) for path in _commands(build_parser(), ["judge"])]
    assert {"judge score", "judge compare-systems", "judge serve", "judge labels import"} <= set(commands)
    for command in commands:
        assert f"<code>{command}</code>" in html, command
    assert "--backend" in html and "--until-decided" in html


def test_http_reference_has_every_route(site: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gen_cli_reference import openapi_document
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    html = (site / "reference" / "http-api.html").read_text(encoding="utf-8")
    paths = openapi_document()["paths"]
    assert "/v1/jobs/{job_id}/labels" in paths and "/healthz" in paths
    for route, methods in paths.items():
        for method in methods:
            assert f"<code>{method.upper()} {route}</code>" in html, (method, route)


def test_python_reference_and_getting_started_are_rendered(site: Path) -> None:
    api = (site / "reference" / "python-api.html").read_text(encoding="utf-8")
    assert "Judge every passage of" in api  # judge.evaluate's docstring
    assert "make_backend" in api and "RunSpec" in api
    started = (site / "getting-started.html").read_text(encoding="utf-8")
    assert "judge compare-systems" in started and "judge-overview.svg" in started


def test_the_home_page_lists_every_guide() -> None:
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    guides = sorted(p.name for p in (ROOT / "docs" / "guides").glob("*.md"))
    assert guides and [g for g in guides if f"(guides/{g})" not in home] == []


def test_the_cli_reference_wraps_at_the_page_width() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gen_cli_reference import cli_markdown
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    inside, longest = False, ""
    for line in cli_markdown().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and len(line) > len(longest):
            longest = line
    assert 0 < len(longest) <= 80, longest


def test_the_site_works_from_disk(site: Path) -> None:
    # file:// has no directory index and no fetch: pages are NAME.html and link to NAME.html,
    # and the search index ships as a script (Material's offline plugin).
    assert (site / "guides" / "experiments.html").is_file()
    assert not (site / "guides" / "experiments").exists()
    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="guides/experiments.html"' in home
    assert (site / "search" / "search_index.js").is_file()


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium (apt-get)")
def test_search_works_on_the_site_opened_from_disk(site: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            fetched: list[str] = []
            page.on("request", lambda r: fetched.append(r.url))
            page.goto((site / "guides" / "experiments.html").as_uri())
            page.locator("input[data-md-component=search-query]").click()
            page.keyboard.type("pooling")
            page.wait_for_selector(".md-search-result__item", timeout=60_000)
            assert "matching document" in page.locator(".md-search-result__meta").inner_text()
            assert [u for u in fetched if not u.startswith("file:")] == []
        finally:
            browser.close()
