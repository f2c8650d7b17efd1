"""The map in ARCHITECTURE.md holds: dependencies point one way and no package's modules import each other in a ring."""

from __future__ import annotations

import shutil
import subprocess

from tests.conftest import REPO


def test_dependencies_point_one_way_without_cycles():
    """service -> edge -> backends | models (independent of each other), checked by import-linter (pyproject)."""
    linter = shutil.which("lint-imports")
    assert linter, "import-linter is part of the test extras: pip install -e '.[test]'"
    proc = subprocess.run([linter], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kept, 0 broken" in proc.stdout
