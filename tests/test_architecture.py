"""The map in ARCHITECTURE.md holds: dependencies point one way, sub-packages keep their order, no import rings."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

MAX_COMPLEXITY = 15
PARTS = ("cli", "edge", "backends", "models", "service")
EDGE_SUBPACKAGES = ("config", "detection", "stream", "events", "runtime", "tools")
EDGE_SHARED_MODULES = {"__init__.py", "errors.py", "secrets.py", "settings.py"}
MAX_MODULES_PER_SUBPACKAGE = 12
CONTRACTS = 4
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """import-linter on the contracts in `cwd`'s pyproject.toml, run by this interpreter (not whatever is on PATH)."""
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.process
def test_dependencies_point_one_way_without_cycles():
    """cli -> service -> edge -> backends | models, and inside edge tools | runtime -> events -> stream ->
    detection -> the shared modules, with no exception listed anywhere."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert "ignore_imports" not in pyproject, "a contract with exceptions does not say where the layers are"
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{CONTRACTS} kept, 0 broken" in proc.stdout


def test_every_engine_module_is_one_edge_may_not_import():
    """`edge` reaches an engine through its declaration (`Engine`) and the modules of `backends/` made for it; the
    contract lists each engine's module, and a new engine's module is listed with it."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    listed = set(re.findall(r'"edge_inference\.backends\.(\w+_backend)"', pyproject))
    assert listed == {path.stem for path in (REPO / "backends").glob("*_backend.py")}


def _copy_of_the_package(tmp_path: Path) -> Path:
    """The package as the wheel lays it out (links followed) with the contracts, in a folder of its own."""
    package = tmp_path / "edge_inference"
    package.mkdir()
    shutil.copy2(REPO / "edge_inference" / "__init__.py", package)
    for part in PARTS:
        shutil.copytree(REPO / part, package / part, ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copy2(REPO / "pyproject.toml", tmp_path)
    return tmp_path


WRONG_IMPORTS = {
    # file in the copy: (the import added, the contract it breaks)
    "edge/stream/pipeline.py": ("edge_inference.edge.events.builder", "inside edge"),
    "edge/detection/detector.py": ("edge_inference.edge.stream.sources", "inside edge"),
    "edge/tools/doctor.py": ("edge_inference.edge.runtime.health", "inside edge"),
    "service/limits.py": ("edge_inference.cli.app", "cli -> service"),
    "backends/base.py": ("edge_inference.models.spec", "cli -> service"),
    "edge/tools/bench.py": ("edge_inference.backends.openvino_backend", "reaches an engine through its declaration"),
}


@pytest.mark.process
def test_a_wrong_import_breaks_the_contracts(tmp_path):
    """The contracts are not vacuous: in a copy of the package, each import against the map is reported."""
    root = _copy_of_the_package(tmp_path)
    for relative, (module, _) in WRONG_IMPORTS.items():
        path = root / "edge_inference" / relative
        path.write_text(path.read_text(encoding="utf-8") + f"\nimport {module}  # deliberately wrong\n")
    proc = lint_imports(root, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HOME": str(tmp_path)})
    report = proc.stdout + proc.stderr
    assert proc.returncode == 1, report
    assert f"Contracts: 0 kept, {CONTRACTS} broken" in report, report  # the rings they make break the third
    for relative, (module, contract) in WRONG_IMPORTS.items():
        importer = "edge_inference." + relative.removesuffix(".py").replace("/", ".")
        assert f"{importer} -> {module}" in report, (importer, module, report)
        assert contract in report


def test_edge_is_sub_packages_and_a_few_shared_modules():
    """A newcomer finds "events" or "a frame's path" as one folder: no loose module in edge/ beyond the shared ones,
    no folder too big to take in, and each says what it holds and what it may import."""
    loose = {p.name for p in (REPO / "edge").glob("*.py")}
    assert loose == EDGE_SHARED_MODULES
    folders = {p.name for p in (REPO / "edge").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(EDGE_SUBPACKAGES)
    for name in EDGE_SUBPACKAGES:
        modules = [p for p in (REPO / "edge" / name).glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= MAX_MODULES_PER_SUBPACKAGE, (name, len(modules))
        doc = ast.get_docstring(ast.parse((REPO / "edge" / name / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "import" in doc, f"edge/{name}/__init__.py must say what it holds and what it may import"


def test_no_function_is_too_tangled_to_read():
    """Cyclomatic complexity at most 15 (radon's count, which sees more branches than ruff's C901)."""
    from radon.complexity import cc_visit

    too_complex = []
    modules = [path for package in (*PARTS, "benchmarks") for path in (REPO / package).rglob("*.py")]
    scripts = [path for path in (REPO / "deploy").rglob("*") if path.is_file() and _is_python(path)]
    assert REPO / "deploy" / "platform-check" in scripts
    for path in sorted(modules + scripts):
        for block in cc_visit(path.read_text(encoding="utf-8")):
            if block.complexity > MAX_COMPLEXITY:
                too_complex.append(f"{path.relative_to(REPO)}:{block.lineno} {block.name} ({block.complexity})")
    assert not too_complex, too_complex


def _is_python(path: Path) -> bool:
    """A Python file, or a script whose first line runs Python (`deploy/platform-check`)."""
    if path.suffix == ".py":
        return True
    with path.open("rb") as script:
        first = script.readline()
    return first.startswith(b"#!") and b"python" in first


@pytest.mark.parametrize("folder", [*PARTS, "tests", "benchmarks"])
def test_every_import_goes_through_the_one_package_name(folder):
    """`edge_inference.edge`, never a bare `edge`: a bare name imports a second copy of the module from a checkout
    and, once installed, whatever folder of that name the user has on sys.path."""
    bare = []
    for path in sorted((REPO / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            bare += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.split(".")[0] in PARTS]
    assert not bare, bare


# `python -m edge_inference ...` or `-m edge_inference.cli...`, or the `edge` program itself, as a process's argv
STARTS_THE_COMMAND = re.compile(
    r"""["']-m["']\s*,\s*["']edge_inference(?:\.cli[\w.]*)?["']"""
    r"""|\[\s*["'](?:[\w./~-]*/)?edge["']\s*,\s*["'](?:backends|serve|detect|bench|doctor|models)["']"""
)


def test_no_module_of_edge_starts_the_edge_command():
    """auto's timing children ran `python -m edge_inference backends --bench ... --candidate JSON`: the lowest layer
    called the command line through a process, where import-linter could not see it. A child runs a module of its
    own layer (`edge/detection/auto/worker.py`); nothing under edge/ starts the command."""
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in (REPO / "edge").rglob("*.py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if STARTS_THE_COMMAND.search(line)
    ]
    assert not found, f"modules of edge/ that start the edge command: {found}"
    assert STARTS_THE_COMMAND.search('[sys.executable, "-m", "edge_inference", "backends", "--bench"]')  # the old
    assert STARTS_THE_COMMAND.search("['edge', 'serve', '--check']")


def test_the_benchmarks_import_each_other_in_no_ring():
    """Imports inside functions included (`faults.py` imported its cases lazily, and they imported it back)."""
    graph: dict[str, set[str]] = {}
    for path in (REPO / "benchmarks").glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchmarks."):
                imported.add(node.module.removeprefix("benchmarks."))
            elif isinstance(node, ast.Import):
                imported |= {a.name.removeprefix("benchmarks.") for a in node.names if a.name.startswith("benchmarks.")}
        graph[path.stem] = imported
    import graphlib

    try:
        graphlib.TopologicalSorter(graph).prepare()
        ring = None
    except graphlib.CycleError as exc:
        ring = exc.args[1]
    assert ring is None, f"benchmarks import each other in a ring: {ring}"


def test_where_to_add_names_files_that_exist_and_tests_that_check_them():
    """ARCHITECTURE.md's table: each row's folders are there, and its test exists under that name."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows = [line for line in text.split("## Where to add", 1)[1].splitlines() if line.startswith("| ")][1:]
    assert len(rows) >= 6
    for row in rows:
        _, files, test = (cell.strip() for cell in row.strip("|").split("|"))
        for path in re.findall(r"`([\w/<>.-]+\.py|[\w/]+/)`", files):
            there = (REPO / path).parent.is_dir() if "<" in path else (REPO / path).exists()  # a pattern: its folder
            assert there, f"{row[:40]}: {path}"
        module, name = test.strip("`").split("::")
        assert f"def {name}(" in (REPO / module).read_text(encoding="utf-8"), test
