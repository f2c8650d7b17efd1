"""The map in ARCHITECTURE.md holds: dependencies point one way and no package's modules import each other in a ring."""

from __future__ import annotations

import ast
import shutil
import subprocess

from tests.conftest import REPO

MAX_COMPLEXITY = 15
PARTS = ("edge", "backends", "models", "service")


def test_dependencies_point_one_way_without_cycles():
    """service -> edge -> backends | models (independent of each other), checked by import-linter (pyproject)."""
    linter = shutil.which("lint-imports")
    assert linter, "import-linter is part of the test extras: pip install -e '.[test]'"
    proc = subprocess.run([linter], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kept, 0 broken" in proc.stdout


def test_no_function_is_too_tangled_to_read():
    """Cyclomatic complexity at most 15 (radon's count, which sees more branches than ruff's C901)."""
    from radon.complexity import cc_visit

    too_complex = []
    for package in (*PARTS, "benchmarks"):
        for path in sorted((REPO / package).rglob("*.py")):
            for block in cc_visit(path.read_text(encoding="utf-8")):
                if block.complexity > MAX_COMPLEXITY:
                    too_complex.append(f"{path.relative_to(REPO)}:{block.lineno} {block.name} ({block.complexity})")
    assert not too_complex, too_complex


def test_every_import_goes_through_the_one_package_name():
    """`edge_inference.edge`, never a bare `edge`: a bare name imports a second copy of the module from a checkout
    and, once installed, whatever folder of that name the user has on sys.path."""
    bare = []
    for folder in (*PARTS, "tests", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                bare += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.split(".")[0] in PARTS]
    assert not bare, bare
