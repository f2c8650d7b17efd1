"""Every `edge` command on the README's install (`pip install .`, no extras), in a venv of its own (its dependencies
from a layer made once per machine, tests/venvs.py).

On that install `edge bench` ended in "unexpected ModuleNotFoundError: No module named 'tqdm'", even with
--no-progress: the suite only ever ran with every extra. Here each command's common path runs in a fresh venv that
holds the base install alone (the test extra's packages are out of its reach), and works, or says in one line which
extra to add.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import cv2
import pytest

from tests.conftest import MEDIA, MODELS, REPO, VTEST
from tests.server import free_port
from tests.venvs import basic_install

pytestmark = pytest.mark.system

CAT = str(MEDIA / "cat_720p.jpg")


BASIC_SOURCE: list[str] = []  # the folder the basic install came from, once the fixture made it


class BasicInstall:
    def __init__(self, venv: Path, home: Path) -> None:
        self.edge = str(venv / "bin" / "edge")
        self.python = str(venv / "bin" / "python")
        # nothing of this process's environment that would reach other packages: no PYTHONPATH, its own caches
        self.env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "EDGE_"))}
        self.env.update(
            {
                "HOME": str(home),
                "EDGE_MODEL_MIRROR": str(MODELS),
                "EDGE_MODEL_CACHE": str(home / "models"),
                "EDGE_AUTO_CACHE": str(home / "auto.json"),
                "EDGE_DATA_DIR": str(home / "data"),
                "EDGE_AUTO_ROUND_S": "0.25",
            }
        )

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.edge, *args], capture_output=True, text=True, env=self.env, timeout=timeout, check=False, cwd="/"
        )


@pytest.fixture(scope="module")
def basic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BasicInstall]:
    root = tmp_path_factory.mktemp("basic")
    venv = root / "venv"
    source = root / "source"  # the checkout's files as a clone has them: no build folders, caches or egg-info
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__"))
    install = basic_install(venv, source)  # the dependencies from a layer made once per machine (tests/venvs.py)
    BASIC_SOURCE[:] = [str(source)]
    if install.returncode != 0 and "No matching distribution" in install.stderr + install.stdout:
        pytest.skip(f"the package index cannot be reached here: {install.stderr.strip().splitlines()[-1]}")
    assert install.returncode == 0, install.stderr
    installed = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.util as u; print([m for m in "
            "('ai_edge_litert', 'openvino', 'paho', 'matplotlib', 'pytest') if u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert installed.stdout.strip() == "[]"  # the basic install: no extra, nothing of the test environment
    yield BasicInstall(venv, root / "home")


def _clean(proc: subprocess.CompletedProcess[str]) -> None:
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said and "unexpected" not in said, said[-2000:]


def _adding(extra: str) -> str:
    """The one wording of an extra's install line, for this install: its venv's Python, the folder it came from
    (the copy of the checkout `pip install` was given, as a user's clone)."""
    return f"-m pip install '{BASIC_SOURCE[0]}[{extra}]'"


def _one_line_naming(proc: subprocess.CompletedProcess[str], extra: str) -> None:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-2000:]
    assert _adding(extra) in errors[0] and "/bin/python" in errors[0], errors[0]
    _clean(proc)


def test_the_inspecting_commands_work(basic: BasicInstall):
    for args in (
        ("--help",),
        ("backends",),
        ("doctor",),
        ("models", "list"),
        ("models", "pull", "yolox-nano"),
        ("models", "verify"),
        ("models", "describe", "yolox-nano"),
    ):
        proc = basic.run(*args)
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        _clean(proc)
    described = basic.run("models", "describe", "yolox-nano")
    assert '"backend": "onnx"' in described.stdout


def test_detect_on_a_photo_and_a_video(basic: BasicInstall, tmp_path: Path):
    photo = basic.run("detect", CAT, "-m", "yolox-nano", "--json")
    assert photo.returncode == 0 and '"label": "cat"' in photo.stdout, photo.stderr[-2000:]
    _clean(photo)
    clip = tmp_path / "clip.avi"
    capture, writer = (
        cv2.VideoCapture(str(VTEST)),
        cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"MJPG"), 10, (768, 576)),
    )
    for _ in range(8):
        writer.write(capture.read()[1])
    writer.release()
    capture.release()
    video = basic.run("detect", str(clip), "-m", "yolox-nano")
    assert video.returncode == 0 and "8 frames" in video.stdout and "person" in video.stdout, video.stderr[-2000:]
    _clean(video)


def test_bench_runs_and_says_the_chart_needs_the_bench_extra(basic: BasicInstall, tmp_path: Path):
    for progress in ((), ("--no-progress",)):
        out = tmp_path / f"bench{len(progress)}"
        args = ("bench", "-s", str(VTEST), "--models", "yolox-nano", "--backends", "onnx", "--frames", "4")
        proc = basic.run(*args, "--warmup", "1", "--out", str(out), *progress)
        assert proc.returncode == 0, proc.stderr[-2000:]
        _clean(proc)
        assert "yolox-nano" in proc.stdout and (out / "bench.json").exists() and (out / "bench.csv").exists()
        assert not (out / "bench.png").exists()
        assert _adding("bench") in proc.stderr


def test_serve_checks_and_serves(basic: BasicInstall):
    checked = basic.run("serve", "--source", str(VTEST), "-m", "yolox-nano", "--check")
    assert checked.returncode == 0 and "check passed" in checked.stdout, checked.stdout + checked.stderr
    _clean(checked)
    port = free_port()
    serving = subprocess.Popen(
        [basic.edge, "serve", "--source", str(VTEST), "-m", "yolox-nano", "--loop", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=basic.env,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert serving.poll() is None and time.monotonic() < deadline, "the service did not become ready"
            time.sleep(0.5)
    finally:
        serving.send_signal(signal.SIGTERM)
        log = serving.communicate(timeout=60)[0]
    assert "Traceback" not in log, log[-3000:]


def test_what_needs_an_extra_says_which_in_one_line(basic: BasicInstall, tmp_path: Path):
    _one_line_naming(basic.run("detect", CAT, "-m", "yolox-nano", "-b", "tflite"), "tflite")
    _one_line_naming(basic.run("detect", CAT, "-m", "yolox-nano", "-b", "openvino"), "openvino")
    _one_line_naming(basic.run("detect", CAT, "-m", f"triton+grpc://127.0.0.1:{free_port()}/yolox_nano"), "triton")
    _one_line_naming(basic.run("models", "export-triton", "yolox-nano", str(tmp_path / "repository")), "triton")
    config = tmp_path / "events.yaml"
    config.write_text(
        f"mqtt:\n  url: mqtt://127.0.0.1:{free_port()}\nstreams:\n  - id: door\n    source: {VTEST}\n"
        "    model: yolox-nano\n    events: {labels: [person]}\n"
    )
    _one_line_naming(basic.run("serve", "--config", str(config), "--port", str(free_port())), "events")
