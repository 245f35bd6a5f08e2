"""The package floors, public seams and import circles of judge/, read from the import statements.

Floors, each importing only from floors at or below its own: ``metrics`` and ``io``;
``backends``; ``judging`` and ``store``; ``batch``, ``stability`` and ``search``;
``systems`` (comparisons and experiments, over the runs of batch, stability and search);
``cli``, ``server`` and the public API (``judge/__init__.py``, ``judge/_api.py``). Packages
of one floor import each other one way only. Packages meet through public names: a module
imports another package's names from the package (``from judge.batch import X``), never
from its private modules (``judge.batch._runner``) and never a private name (``_x``).
Inside a package modules import each other's names freely, but not in a circle.

No import circles between modules either: every import counts, at the top of a module,
inside a function, or under ``if TYPE_CHECKING:`` (a function-level import only hides a
circle, and an annotation-only import still ties the two modules into one). ``from
judge.server import _bounds`` is an import of the module ``judge.server._bounds``;
``from judge.batch import X`` (a name, not a module) imports the package ``judge.batch``,
so a module of ``judge.batch`` that imports its own package is in a circle with it. A
circle is broken by moving the code to the module it belongs in.

``judge/_env.py`` (the environment deepeval needs before it is imported) is the one module
every floor may import. Tests and scripts are not checked: they may test private units.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FLOORS: dict[str, int] = {
    "metrics": 0,
    "io": 0,
    "backends": 1,
    "judging": 2,
    "store": 2,
    "batch": 3,
    "stability": 3,
    "search": 3,
    "systems": 4,
    "cli": 5,
    "server": 5,
    "top": 5,
    "entry": 6,  # judge/__main__.py: ``python -m judge`` runs the CLI
}
PLANNED = {"search"}  # has its floor before its first module lands
SHARED = {"judge._env"}


@dataclass(frozen=True)
class Import:
    source: str  # file, relative to the repository
    line: int
    importer: str  # dotted module that imports
    target: str  # dotted module imported from
    names: tuple[str, ...]  # names imported from target (empty for ``import x``)


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "judge":
        return None
    if module == "judge.__main__":
        return "entry"
    if len(parts) > 1 and parts[1] in FLOORS:
        return parts[1]
    return "top"


def imports_of(source: str, module: str, is_package: bool, where: str) -> list[Import]:
    """Every import of one module (top level, functions, ``TYPE_CHECKING`` blocks alike)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(where, node.lineno, module, a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            found.append(Import(where, node.lineno, module, target, tuple(a.name for a in node.names)))
    return found


def private_parts(target: str) -> list[str]:
    parts = target.split(".")
    inside = parts[1:] if package_of(target) == "top" else parts[2:]
    return [p for p in inside if p.startswith("_")]


def violations(imports: list[Import]) -> list[str]:
    """What breaks the rules: private modules or names across packages, imports upward."""
    problems = []
    for imp in imports:
        own, other = package_of(imp.importer), package_of(imp.target)
        if other is None or other == own or imp.target in SHARED:
            continue
        at = f"{imp.source}:{imp.line}"
        if private_parts(imp.target):
            problems.append(f"{at}: {own} imports the private module {imp.target}")
        private_names = [n for n in imp.names if n.startswith("_")]
        if private_names:
            problems.append(f"{at}: {own} imports private {', '.join(private_names)} of {imp.target}")
        assert own is not None
        if FLOORS[other] > FLOORS[own]:
            problems.append(f"{at}: {own} (floor {FLOORS[own]}) imports {other} (floor {FLOORS[other]})")
    return problems


def cycles(imports: list[Import]) -> list[list[str]]:
    """Package-level import cycles (packages of one floor may import each other, one way)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        own, other = package_of(imp.importer), package_of(imp.target)
        if own is not None and other is not None and other != own and imp.target not in SHARED:
            graph[own].add(other)
    found: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in path:
                found.append([*path[path.index(nxt) :], nxt])
            elif len(path) < len(FLOORS):
                visit(nxt, [*path, nxt])

    for start in sorted(graph):
        visit(start, [start])
    return found


def module_graph(imports: list[Import], modules: set[str]) -> dict[str, dict[str, str]]:
    """importer -> {imported module of ``modules``: where (``file:line``)}: ``from P import
    m`` imports the module ``P.m`` when there is one, else the package ``P``."""
    graph: dict[str, dict[str, str]] = defaultdict(dict)
    for imp in imports:
        submodules = [f"{imp.target}.{n}" for n in imp.names if f"{imp.target}.{n}" in modules]
        targets = submodules + ([imp.target] if len(submodules) < max(1, len(imp.names)) else [])
        for target in targets:
            if target in modules and target != imp.importer:
                graph[imp.importer].setdefault(target, f"{imp.source}:{imp.line}")
    return graph


def module_cycles(imports: list[Import], modules: set[str]) -> list[list[str]]:
    """Every group of modules that import each other in a circle (the strongly connected
    components of more than one module, Tarjan's algorithm), each sorted, with the imports
    that close it as ``a -> b (file:line)``."""
    graph = module_graph(imports, modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, {})):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [
        [f"{a} -> {b} ({where})" for a in group for b, where in sorted(graph[a].items()) if b in group]
        for group in sorted(groups)
    ]


def judge_modules() -> set[str]:
    found = set()
    for path in (ROOT / "judge").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def judge_imports() -> list[Import]:
    result = []
    for path in sorted((ROOT / "judge").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        where = str(path.relative_to(ROOT))
        result += imports_of(path.read_text(encoding="utf-8"), module, is_package, where)
    return result


def lazy_table_targets() -> list[tuple[str, str]]:
    """``judge/__init__.py`` imports its public names lazily from a table of module names."""
    tree = ast.parse((ROOT / "judge" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets
        ):
            value = node.value  # type: ignore[union-attr]
            assert isinstance(value, ast.Dict)
            return [
                (str(k.value), str(v.value))
                for k, v in zip(value.keys, value.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
            ]
    return []


def test_packages_meet_through_public_names_and_import_only_downward() -> None:
    problems = violations(judge_imports())
    assert not problems, "\n".join(problems)


def test_packages_import_each_other_without_cycles() -> None:
    assert cycles(judge_imports()) == []


def test_modules_import_each_other_without_circles() -> None:
    found = module_cycles(judge_imports(), judge_modules())
    assert found == [], "\n\n".join("\n".join(group) for group in found)


def test_public_api_table_names_public_modules() -> None:
    table = lazy_table_targets()
    assert table, "judge/__init__.py has no _LAZY table"
    private = [(n, m) for n, m in table if package_of(m) != "top" and private_parts(m)]
    assert private == []


def test_every_package_has_a_floor() -> None:
    packages = {p.name for p in (ROOT / "judge").iterdir() if (p / "__init__.py").is_file()}
    assert packages - set(FLOORS) == set()
    assert set(FLOORS) - {"top", "entry"} - packages <= PLANNED


# The checks themselves, on made-up modules: each rule must be able to fail.


def _check(module: str, source: str, is_package: bool = False) -> list[str]:
    return violations(imports_of(source, module, is_package, module))


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("judge.cli._x", "from judge.batch._runner import run_batch\n", "private module judge.batch._runner"),
        ("judge.cli._x", "from judge.batch import _runner\n", "private _runner of judge.batch"),
        ("judge.server._x", "from judge.systems import _helper\n", "private _helper"),
        ("judge._api", "from judge.judging._core import judge_query\n", "private module judge.judging._core"),
        ("judge.cli._x", "def f():\n    import judge.io._trec\n", "private module judge.io._trec"),
        ("judge.cli._x", "if TYPE_CHECKING:\n    from judge.io._trec import Qrels\n", "judge.io._trec"),
        (
            "judge.metrics._x",
            "from judge.judging import PassageVerdict\n",
            "metrics (floor 0) imports judging",
        ),
        ("judge.backends._x", "from judge.store import open_sqlite\n", "backends (floor 1) imports store"),
        ("judge.batch._x", "from judge.server import create_app\n", "batch (floor 3) imports server"),
        (
            "judge.batch._x",
            "from judge.systems import PoolRun\n",
            "batch (floor 3) imports systems (floor 4)",
        ),
        (
            "judge.stability._x",
            "def f():\n    from judge.systems import ComparisonReport\n",
            "stability (floor 3) imports systems (floor 4)",
        ),
        (
            "judge.search._x",
            "from judge.systems import PoolRun\n",
            "search (floor 3) imports systems (floor 4)",
        ),
        ("judge.search._x", "from judge.cli import main\n", "search (floor 3) imports cli (floor 5)"),
        ("judge.systems._x", "from judge.server import ServerConfig\n", "systems (floor 4) imports server"),
        ("judge.judging", "from ..batch import BatchDriver\n", "judging (floor 2) imports batch"),
    ],
)
def test_each_rule_catches_its_case(module: str, source: str, expected: str) -> None:
    problems = _check(module, source, is_package=module.count(".") == 1)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("judge.cli._x", "from judge.batch import run_batch\n"),
        ("judge.batch._x", "from judge.batch._runner import run_batch\n"),
        ("judge.batch._x", "from ._runner import _private\n"),
        ("judge.judging._x", "import judge._env\n"),
        ("judge.store._x", "from judge.judging import PassageVerdict\n"),
        ("judge.systems._x", "from judge.search import run_search\n"),
        ("judge.systems._x", "from judge.batch import score_dataset\n"),
        ("judge.cli._x", "import json\nfrom pathlib import Path\n"),
    ],
)
def test_allowed_imports_pass(module: str, source: str) -> None:
    assert _check(module, source) == []


def test_a_cycle_between_packages_of_one_floor_is_found() -> None:
    imports = [
        Import("a", 1, "judge.batch._x", "judge.stability", ("A",)),
        Import("b", 1, "judge.stability._y", "judge.batch", ("B",)),
    ]
    assert cycles(imports) == [["batch", "stability", "batch"], ["stability", "batch", "stability"]]
    assert cycles(imports[:1]) == []


def test_search_knows_no_backend_and_no_judge() -> None:
    """The search floor runs engines, not LLMs: not even a secret helper comes from the
    backends (secrets live in judge.io, below both)."""
    found = [
        f"{imp.source}:{imp.line}: {imp.importer} imports {imp.target}"
        for imp in judge_imports()
        if package_of(imp.importer) == "search" and package_of(imp.target) in ("backends", "judging")
    ]
    assert found == []


def test_module_names_are_unique_across_packages() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "judge").glob("*/*.py")):
        if path.name != "__init__.py":
            where[path.stem].append(path.parent.name)
    assert {name: pkgs for name, pkgs in where.items() if len(pkgs) > 1} == {}


def _imports(module: str, source: str, is_package: bool = False) -> list[Import]:
    return imports_of(source, module, is_package, module)


def test_a_circle_between_modules_is_found_however_the_import_is_written() -> None:
    modules = {"judge.batch", "judge.batch._a", "judge.batch._b", "judge.batch._c"}
    a_to_b = _imports("judge.batch._a", "from judge.batch._b import x\n")
    for back in [
        "from judge.batch._a import y\n",  # at the top
        "def f():\n    from judge.batch._a import y\n",  # hidden in a function
        "if TYPE_CHECKING:\n    from judge.batch._a import Y\n",  # for annotations only
        "from . import _a\n",  # relative, the module by name
    ]:
        found = module_cycles(a_to_b + _imports("judge.batch._b", back), modules)
        assert [[line.split(" (")[0] for line in group] for group in found] == [
            ["judge.batch._a -> judge.batch._b", "judge.batch._b -> judge.batch._a"]
        ], back
    assert module_cycles(a_to_b, modules) == []
    # three modules in a ring, reported as one circle with the line that closes each step
    ring = (
        a_to_b
        + _imports("judge.batch._b", "from ._c import z\n")
        + _imports("judge.batch._c", "\n\nfrom judge.batch._a import y\n")
    )
    assert module_cycles(ring, modules) == [
        [
            "judge.batch._a -> judge.batch._b (judge.batch._a:1)",
            "judge.batch._b -> judge.batch._c (judge.batch._b:1)",
            "judge.batch._c -> judge.batch._a (judge.batch._c:3)",
        ]
    ]


def test_a_module_importing_a_name_from_its_own_package_is_a_circle() -> None:
    modules = {"judge.batch", "judge.batch._a", "judge.batch._b"}
    package = _imports("judge.batch", "from ._a import A\nfrom ._b import B\n", is_package=True)
    # a name from the package: the package's __init__, which imports this module
    own = _imports("judge.batch._a", "from judge.batch import B\n")
    assert [len(g) for g in module_cycles(package + own, modules)] == [2]
    # a submodule named through the package is that module, not the package
    sub = _imports("judge.batch._a", "from judge.batch import _b\n")
    assert module_cycles(package + sub, modules) == []
    # a plain ``import judge.batch`` is the package too
    plain = _imports("judge.batch._a", "def f():\n    import judge.batch as package\n")
    assert [len(g) for g in module_cycles(package + plain, modules)] == [2]


# A module a reader can hold in mind: none in judge/ over 800 lines, none of the service over
# 700 (the service's engine is split by kind of job, so a new kind adds a module, not lines).
MAX_MODULE_LINES = 800
MAX_SERVER_MODULE_LINES = 700


def _too_long(paths: list[Path], limit: int, root: Path = ROOT) -> list[str]:
    out = []
    for path in paths:
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > limit:
            out.append(f"{path.relative_to(root)}: {count} lines")
    return out


def test_no_module_is_over_its_line_limit() -> None:
    modules = sorted((ROOT / "judge").rglob("*.py"))
    assert len(modules) > 100
    assert _too_long(modules, MAX_MODULE_LINES) == []
    assert _too_long(sorted((ROOT / "judge" / "server").glob("*.py")), MAX_SERVER_MODULE_LINES) == []


def test_the_line_limit_finds_a_long_module(tmp_path: Path) -> None:
    long, short = tmp_path / "long.py", tmp_path / "short.py"
    long.write_text("x = 1\n" * 701, encoding="utf-8")
    short.write_text("x = 1\n" * 700, encoding="utf-8")
    assert _too_long([long, short], MAX_SERVER_MODULE_LINES, tmp_path) == ["long.py: 701 lines"]


# Comments and docstrings say what and why; which issue asked for a change is history, and
# git keeps it. A citation is the word "issue" or "issues" followed by a number (with or
# without "#") in a comment, a docstring or any other bare string statement (an attribute's
# docstring); strings that are data (assigned, passed, returned) are not looked at.
ISSUE_CITATION = re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE)


def issue_citations(source: str) -> list[int]:
    """The lines of ``source`` whose comments or docstrings cite an issue by its number."""
    lines = {
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT and ISSUE_CITATION.search(token.string)
    }
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            text = ast.get_source_segment(source, node) or ""
            lines.update(
                node.lineno + i for i, line in enumerate(text.splitlines()) if ISSUE_CITATION.search(line)
            )
    return sorted(lines)


def test_no_comment_or_docstring_cites_an_issue() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in ("judge", "tests", "scripts")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in issue_citations(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_an_issue_citation_is_found_in_comments_and_docstrings_only() -> None:
    source = (
        '"""A module (issue 12)."""\n'
        'x = "issue 7 is data"  # see Issue #8\n'
        "def f() -> str:\n"
        '    """Fixed for the two\n'
        '    issues 3 and 4."""\n'
        '    return "issues 5 and 6 are data too"\n'
        "y = 1\n"
        '"""An attribute\'s docstring: issue#9."""\n'
        "# the tissue 5 and the reissue 6 are words, and an issue without a number is no citation\n"
    )
    assert issue_citations(source) == [1, 2, 5, 8]
