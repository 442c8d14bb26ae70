"""The packages' import graph (docs/architecture.md, "Layout and dependency direction"), read from
the sources with `ast` (nothing is imported).

The direction, as the code has it (pinned here; the package docstrings say the same)::

    vocabulary problems display    stdlib only (vocabulary: the shared value types, from the
                                   referee's Verdict to the job events; problems: parsed, never
                                   run; display: formats)
       ↑
    harness                        the referee; torch only inside its sandboxes (harness.sandboxed,
                                   which no other package imports, nor the rest of the harness)
       ↑         ↑        ↑
    agent      store    config     store: vocabulary only; config: `harness.options` (a value
       ↑         ↑                 module) for the one default cache folder; the agent also
       ↑         ↑                 types its default evaluator with `harness.Referee`
    worker ──────┘                 composes agent + harness + store (+ config, problems)
    api                            store, config, problems, display, vocabulary; of the agent
                                   only its scripted LLM's table; never the harness
    cli                            on top: everything (its client commands: no server package)

An import counts wherever it is written, at module level or inside a function; imports under
``if TYPE_CHECKING:`` are left out (they run nothing). A *value module* of the harness is one
that, with everything it imports from the harness at module level, imports none of `_RUNS`
(subprocesses, threads, signals, torch …): `harness.options`, … Within a package, module-level
imports have no cycle (a function-level import is how a package breaks one, on purpose).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vocabulary", "problems", "display", "harness", "config", "store", "agent", "worker", "api", "cli")

#: Which packages each package may import.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "vocabulary": frozenset(),
    "problems": frozenset(),
    "display": frozenset(),
    "harness": frozenset({"problems", "vocabulary"}),
    # `harness.options.default_cache_dir`: the one default both the harness and the service use.
    "config": frozenset({"harness", "vocabulary"}),
    "store": frozenset({"vocabulary"}),
    "agent": frozenset({"harness", "problems", "config", "vocabulary"}),
    "worker": frozenset({"agent", "harness", "store", "problems", "config", "vocabulary"}),
    "api": frozenset({"store", "config", "problems", "display", "agent", "vocabulary"}),
    "cli": frozenset(set(PACKAGES) - {"cli"}),
}
#: Packages that may take only the harness's value modules.
HARNESS_VALUES_ONLY = ("config",)
#: The API checks a scripted LLM's job has a script before queueing it (a 422, not a failed job); that
#: table is all it takes of the agent, which it never runs.
API_AGENT_MODULES = frozenset({"agent.providers.scripted"})
#: The client commands run on a user's machine against the API: no server package.
CLIENT_PACKAGE = "cli.client"
CLIENT_NEVER = frozenset({"api", "store", "worker", "agent"})
#: The referee's sandbox side (runs inside sandboxes, imports torch): no module of the packages
#: outside it imports it (tests and benchmarks do), the rest of the harness (the driver side)
#: included, which imports torch only inside functions (`harness.buildcache`'s, run in sandboxes).
SANDBOXED = "harness.sandboxed"
#: Importing one of these (directly, or through the harness modules imported) runs or starts
#: something: a value module imports none.
_RUNS = frozenset({"subprocess", "multiprocessing", "threading", "signal", "socket", "ctypes", "torch"})


@dataclass(frozen=True)
class Import:
    importer: str
    #: The module imported: for ``from a.b import c``, ``a.b.c`` if that is a module, else ``a.b``.
    target: str
    line: int
    top_level: bool

    @property
    def where(self) -> str:
        return f"{self.importer}:{self.line} imports {self.target}" + ("" if self.top_level else " (in a function)")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the packages (bundled problem files are data, not modules of the service)."""
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "bundled" not in path.relative_to(ROOT).parts
    }


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports_of(name: str, path: Path) -> Iterator[Import]:
    known = modules()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def absolute(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])

    def walk(node: ast.AST, top_level: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    yield from walk_one(other, top_level)
                continue
            yield from walk_one(child, top_level)

    def walk_one(node: ast.AST, top_level: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, node.lineno, top_level)
        elif isinstance(node, ast.ImportFrom):
            module = absolute(node)
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                yield Import(name, submodule if submodule in known else module, node.lineno, top_level)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from walk(node, False)
        else:
            yield from walk(node, top_level)

    yield from walk(ast.parse(path.read_text()), True)


@cache
def imports() -> tuple[Import, ...]:
    return tuple(i for name, path in modules().items() for i in _imports_of(name, path))


def _package(module: str) -> str:
    return module.split(".")[0]


def _known(module: str) -> str | None:
    """The module of ours that ``module`` names (``a.b.c`` may be a name inside module ``a.b``)."""
    known = modules()
    while module and module not in known:
        module = module.rpartition(".")[0]
    return module or None


def _across(importer_package: str) -> list[Import]:
    return [i for i in imports() if _package(i.importer) == importer_package
            and _package(i.target) in PACKAGES and _package(i.target) != importer_package]


@cache
def _runs(module: str) -> frozenset[str]:
    """What of `_RUNS` importing ``module`` brings in (through the harness's modules too)."""
    found: set[str] = set()
    for i in imports():
        if i.importer != module or not i.top_level:
            continue
        if _package(i.target) in _RUNS:
            found.add(_package(i.target))
        target = _known(i.target)
        if target is not None and _package(target) == "harness" and target != module:
            found |= _runs(target)
    return frozenset(found)


def test_every_package_has_its_rule() -> None:
    packaged = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    installed = {pattern.rstrip("*") for pattern in packaged["include"]} - {"migrations"}
    assert installed == set(MAY_IMPORT) == set(PACKAGES)


def test_packages_import_only_in_the_allowed_direction() -> None:
    wrong = [i.where for package in PACKAGES for i in _across(package)
             if _package(i.target) not in MAY_IMPORT[package]]
    assert wrong == [], "\n".join(wrong)


def test_the_allowed_direction_has_no_cycle() -> None:
    order: list[str] = []
    left = dict(MAY_IMPORT)
    while left:
        ready = sorted(p for p, needs in left.items() if needs <= set(order))
        assert ready, f"a cycle among {sorted(left)}"
        order.extend(ready)
        for p in ready:
            del left[p]


def test_service_packages_take_only_the_harness_value_modules() -> None:
    wrong = [f"{i.where}, which brings in {sorted(_runs(target))}"
             for package in HARNESS_VALUES_ONLY for i in _across(package)
             if _package(i.target) == "harness" and (target := _known(i.target) or "harness")
             and (target == "harness" or _runs(target))]
    assert wrong == [], "\n".join(wrong)


def test_value_modules_of_the_harness_exist() -> None:
    # The rule above would pass vacuously if the classification broke.
    assert not _runs("harness.options") and not _runs("harness.progress")
    assert "subprocess" in _runs("harness.sandbox") and "torch" in _runs("harness.sandboxed.meter")


def _sandboxed(module: str) -> bool:
    return module == SANDBOXED or module.startswith(f"{SANDBOXED}.")


def test_nothing_outside_the_sandbox_side_imports_it() -> None:
    """The driver side (harness/ outside harness/sandboxed/) starts sandboxes and speaks to them: it
    never imports their code; nor does any other package."""
    wrong = [i.where for i in imports() if _sandboxed(i.target) and not _sandboxed(i.importer)]
    assert wrong == [], "\n".join(wrong)
    # Not vacuous: the sandbox side is there, and imports itself.
    assert any(i.importer == "harness.sandboxed.roles.candidate" and i.target == "harness.sandboxed.meter"
               for i in imports())


def test_the_harness_driver_side_imports_torch_only_inside_functions() -> None:
    wrong = [i.where for i in imports() if _package(i.importer) == "harness" and not _sandboxed(i.importer)
             and i.top_level and _package(i.target) == "torch"]
    assert wrong == [], "\n".join(wrong)
    assert "torch" in _runs("harness.sandboxed.contract")


def test_the_api_takes_of_the_agent_only_the_scripted_llms_table() -> None:
    wrong = [i.where for i in _across("api") if _package(i.target) == "agent" and i.target not in API_AGENT_MODULES]
    assert wrong == [], "\n".join(wrong)


def test_the_client_commands_import_no_server_package() -> None:
    wrong = [i.where for i in _across("cli")
             if i.importer.startswith(CLIENT_PACKAGE) and _package(i.target) in CLIENT_NEVER]
    assert wrong == [], "\n".join(wrong)


def test_no_module_level_import_cycle_within_a_package() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for i in imports():
        target = _known(i.target)
        if i.top_level and target is not None and target != i.importer and _package(target) == _package(i.importer):
            graph[i.importer].add(target)
    cycles = _cycles(graph)
    assert cycles == [], "module-level import cycles: " + "; ".join(" → ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# -- the tests' own layout: a folder per package, their helpers in tests/support --------------------

TESTS = ROOT / "tests"
SUPPORT = "tests.support"
#: Test folders that are no package's, and why.
FOLDERS_BEYOND_PACKAGES = {
    "support": "the builders and helpers every test folder shares",
    "gpu": "`make test-gpu`: a GPU host with torch and pytest",
    "tenancy": "hostile tenants, through every package at once",
    "examples": "the bundled examples through the referee",
    "benchmarks": "smoke runs of benchmarks/",
}
#: Subfolders named after a subject of their package rather than a subpackage of it.
SUBJECT_FOLDERS = {"harness/integrity": "the adversarial suite",
                   "harness/corpus": "honest kernels in the styles models write, and the test that runs them"}
#: What a GPU host imports of tests/support: the standard library only (and each other).
GPU_HOST_SUPPORT = frozenset({"paths", "gpu", "network", "processes", "waiting", "cli"})
#: ``from tests.x import y`` / ``import tests.x`` in a script a test runs (``python -c``).
_SCRIPT_IMPORT = re.compile(r"^\s*(?:from|import)\s+(tests(?:\.\w+)+)", re.MULTILINE)


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _tests_imports(path: Path, *, top_level_only: bool = False) -> Iterator[tuple[int, str]]:
    """The modules ``path`` imports (``from a.b import c``: ``a.b``, and ``a.b.c`` when that is a
    module of tests/), with those of the scripts in its strings; not those under TYPE_CHECKING."""

    def walk(node: ast.AST, top_level: bool) -> Iterator[tuple[int, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    yield from walk(other, top_level)
                continue
            if isinstance(child, ast.Import) and (top_level or not top_level_only):
                yield from ((child.lineno, alias.name) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and (top_level or not top_level_only):
                assert not child.level, f"{path}:{child.lineno}: a relative import"
                module = child.module or ""
                yield child.lineno, module
                for alias in child.names:
                    if (TESTS.parent / f"{module}.{alias.name}".replace(".", "/")).with_suffix(".py").exists():
                        yield child.lineno, f"{module}.{alias.name}"
            elif isinstance(child, ast.Constant) and isinstance(child.value, str) and not top_level_only:
                yield from ((child.lineno, m) for m in _SCRIPT_IMPORT.findall(child.value))
            is_function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from walk(child, top_level and not is_function)

    yield from walk(ast.parse(path.read_text()), True)


def test_tests_take_their_helpers_from_tests_support_only() -> None:
    """No test module imports another test module or a conftest: what tests share is in tests/support."""
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in _test_files() for line, module in _tests_imports(path)
             if module.split(".")[0] == "tests" and module != SUPPORT and not module.startswith(f"{SUPPORT}.")]
    assert wrong == [], "\n".join(wrong)


def test_the_import_check_of_the_tests_sees_imports_everywhere(tmp_path: Path) -> None:
    # The rule above would pass vacuously if the walker missed function-level or scripted imports.
    probe = tmp_path / "probe.py"
    tests = "tests"  # spelled apart, or this file would break its own rule
    probe.write_text(f'def f():\n    from {tests}.api.conftest import Key\n\n'
                     f'SCRIPT = """\nfrom {tests}.x.test_y import z\n"""\n')
    assert [m for _, m in _tests_imports(probe)] == ["tests.api.conftest", "tests.x.test_y"]


def test_only_the_root_conftest_registers_plugins() -> None:
    # pytest refuses ``pytest_plugins`` in a conftest below the rootdir's.
    registering = [path.relative_to(ROOT).as_posix() for path in _test_files()
                   if any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytest_plugins"
                                                               for t in node.targets)
                          for node in ast.parse(path.read_text()).body)]
    assert registering == ["tests/conftest.py"]


def test_test_folders_mirror_the_packages() -> None:
    # Folders with a module (one left with only a __pycache__ by an older layout is no test folder).
    folders = sorted({p.parent.relative_to(TESTS).as_posix() for p in _test_files()} - {"."})
    wrong = [folder for folder in folders
             if folder.split("/")[0] not in (*PACKAGES, *FOLDERS_BEYOND_PACKAGES)
             or ("/" in folder and folder.split("/")[0] in PACKAGES and folder not in SUBJECT_FOLDERS
                 and not (ROOT / folder / "__init__.py").is_file())]
    assert wrong == [], f"test folders that are no package's: {wrong}"


def test_the_vocabulary_imports_the_standard_library_only() -> None:
    # A leaf the client commands import on a user's machine: no torch, no pydantic, no SQLAlchemy.
    wrong = [i.where for i in imports() if _package(i.importer) == "vocabulary"
             and _package(i.target) not in sys.stdlib_module_names and _package(i.target) != "vocabulary"]
    assert wrong == [], "\n".join(wrong)


def test_what_a_gpu_host_imports_of_tests_support_is_stdlib_only() -> None:
    wrong = [f"tests/support/{name}.py:{line} imports {module}"
             for name in sorted(GPU_HOST_SUPPORT)
             for line, module in _tests_imports(TESTS / "support" / f"{name}.py", top_level_only=True)
             if module.split(".")[0] not in sys.stdlib_module_names
             and module.removeprefix(f"{SUPPORT}.") not in GPU_HOST_SUPPORT]
    assert wrong == [], "\n".join(wrong)


def test_the_gpu_tests_collect_where_only_torch_is_installed() -> None:
    """A GPU host has torch and pytest, not the service's packages: ``pytest -m gpu tests/gpu`` must
    collect there as is (the databases plugin once imported sqlalchemy for every run)."""
    blocked = ("sqlalchemy", "alembic", "fastapi", "celery", "redis", "pydantic", "pydantic_settings", "store",
               "api", "worker")
    script = (f"import sys\nsys.modules.update(dict.fromkeys({blocked!r}))\nimport pytest\n"
              "sys.exit(pytest.main(['-q', '--collect-only', '-m', 'gpu', '-p', 'no:cacheprovider', 'tests/gpu']))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collected = re.search(r"(\d+) tests? collected", done.stdout)
    assert collected is not None and int(collected.group(1)) > 0, done.stdout[-2000:]
