"""The built wheel as a user installs it: one top-level import name that is ours, and `edge detect` still works from a
folder that has its own `models/` and `service/` (names that shadowed ours when they were top-level packages)."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import cv2
import pytest

from tests.conftest import REPO, skimage_photo

pytestmark = pytest.mark.system

DECOY = "raise ImportError('the user folder {name}/ was imported instead of edge_inference.{name}')\n"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy: an in-tree build leaves build/ and egg-info behind in the checkout
    source = out / "source"
    junk = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "*-out")
    shutil.copytree(REPO, source, symlinks=True, ignore=junk)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("edge_inference-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    """A new venv with the wheel installed; its dependencies come from the site-packages of the interpreter running
    the tests (a download of onnxruntime and OpenCV per test run would be slow), and `pip check` proves they satisfy
    the wheel's metadata. Not `system_site_packages`: inside a venv that would be the base interpreter's folder,
    which lacks what the venv installed. A .pth line adds the folder without running its own .pth files, so the
    checkout's editable install stays out."""
    home = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(with_pip=False).create(home)
    python = home / "bin" / "python"
    ours = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(ours) / "test-runner-site.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    # the venv has no pip of its own: this interpreter's pip installs into it (`--python`, pip >= 22.3)
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet", str(wheel)]
    proc = subprocess.run(install, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return home


def test_the_wheel_installs_one_top_level_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert top_level == {"edge_inference"}
    assert "edge_inference/service/static/index.html" in names  # the dashboard ships with it
    assert "edge = edge_inference.cli:main" in entry_points
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)  # ready to publish


def test_edge_detect_from_a_folder_with_its_own_models_and_service(fresh_venv, tmp_path):
    workdir = tmp_path / "project"
    for name in ("models", "service", "edge", "backends", "cli"):
        (workdir / name).mkdir(parents=True)
        (workdir / name / "__init__.py").write_text(DECOY.format(name=name))
    cv2.imwrite(str(workdir / "cat.png"), skimage_photo("chelsea"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    bin_dir = fresh_venv / "bin"

    for command in ([str(bin_dir / "edge")], [str(bin_dir / "python"), "-m", "edge_inference"]):
        proc = subprocess.run(
            [*command, "detect", "cat.png", "--json"],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        (record,) = [json.loads(line) for line in proc.stdout.splitlines()]
        # the default model (the measured engine's file of it), resolved through the mirror the suite sets
        assert record["model"].startswith("yolox-nano")
        assert "cat" in [d["label"] for d in record["detections"]]

    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import edge_inference; print(edge_inference.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(fresh_venv), "the venv's own copy ran, not the checkout"
    check = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "edge-inference" not in check.stdout, check.stdout  # every dependency the wheel declares is satisfied


def test_the_installed_command_says_its_version_and_lists_every_command(wheel, fresh_venv):
    """Each command's module is imported only when it runs (all of them at start cost 2.2 s before `edge serve`
    could name a mistake in its config): the list, the help of each, and the version must not depend on that."""
    edge = str(fresh_venv / "bin" / "edge")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*args: str) -> str:
        proc = subprocess.run([edge, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert run("--version").strip() == f"edge, version {wheel.name.split('-')[1]}"  # the wheel's own number
    listed = [line.split()[0] for line in run("--help").split("Commands:")[1].splitlines() if line.strip()]
    commands = ["backends", "bench", "detect", "doctor", "models", "serve"]
    assert listed == commands
    for command in commands:
        assert f"Usage: edge {command}" in run(command, "--help")
