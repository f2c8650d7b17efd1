"""Shared fixtures: real models and media from one setting, EDGE_SHARED_DIR (default ../shared)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from edge_inference.edge.detection.memory import available_memory
from tests.video_detections import VideoDetections

pytest_plugins = ["tests.tiers"]

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("EDGE_SHARED_DIR", REPO.parent / "shared")).resolve()
MODELS = SHARED / "models"
MEDIA = SHARED / "media"
VTEST = MEDIA / "vtest.avi"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "minutes: takes minutes on a 2-core machine (a toolchain's conversion, a conversion's memory at 640 or 4K); "
        "left out of the suite (pyproject's addopts), run by `deploy/platform-check conversions` or `-m minutes`",
    )
    if not MODELS.is_dir():
        raise pytest.UsageError(f"real models not found at {MODELS}; set EDGE_SHARED_DIR to the shared folder")
    # Registry pulls in tests come from the shared folder used as a mirror, never from the internet.
    os.environ["EDGE_MODEL_MIRROR"] = str(MODELS)
    os.environ.setdefault("EDGE_MODEL_CACHE", str(Path(config.rootpath) / ".pytest_cache" / "model-cache"))
    # `--backend auto` measures each model once on this machine; tests share those measurements
    os.environ.setdefault("EDGE_AUTO_CACHE", str(Path(config.rootpath) / ".pytest_cache" / "auto-backend.json"))
    # ... in rounds of a quarter second, not 1 s: the tests check how `auto` measures and picks, never which engine
    # is fastest, and 3 engines x 3 rounds of 1 s made each measuring test 7 s longer
    os.environ.setdefault("EDGE_AUTO_ROUND_S", "0.25")


# Property tests draw their examples from a fixed seed in CI (the same examples on every run, no database carried
# between runs); elsewhere from a new one each run, so a developer's runs explore further. Neither has a deadline per
# example or the health checks that time input generation: on a busy 2-core machine both failed passing tests.
_SLOW_MACHINE = hypothesis_settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example]
)
hypothesis_settings.register_profile("ci", _SLOW_MACHINE, derandomize=True, database=None, print_blob=True)
hypothesis_settings.register_profile("dev", _SLOW_MACHINE, print_blob=True)
hypothesis_settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

GIB_PER_WORKER = 1.5  # a worker's servers, engines and browser at their peak, with room for the kernel's caches


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two test workers per usable core (a container's CPU set, not the host's), at most 4, and no more
    than the memory holds (a 2 GiB Pi runs one). Much of the process and system tiers' time is waiting with a core
    free (a service starting, a broker kept down, a page settling, a camera's read timeout): on 2 cores the suite
    took 374 s on 3 workers against 411 s on 2, and 645 s on 4 against 698 s on 3 (issue 80; the in-process tier,
    all CPU, the same on either). PYTEST_XDIST_AUTO_NUM_WORKERS overrides it, as in pytest-xdist."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").isdigit():
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    cores = len(os.sched_getaffinity(0))
    available = available_memory()  # the machine's, capped by a container's limit
    by_memory = 4 if available is None else int(available / 2**30 / GIB_PER_WORKER)
    return max(1, min(2 * cores, 4, by_memory))


def skimage_photo(name: str) -> np.ndarray:
    import skimage.data

    return cv2.cvtColor(getattr(skimage.data, name)(), cv2.COLOR_RGB2BGR)


def video_frame(index: int) -> np.ndarray:
    capture = cv2.VideoCapture(str(VTEST))
    capture.set(cv2.CAP_PROP_POS_FRAMES, index)
    ok, frame = capture.read()
    capture.release()
    assert ok, f"cannot read frame {index} of {VTEST}"
    return frame


@pytest.fixture(scope="session")
def photos() -> dict[str, np.ndarray]:
    return {name: skimage_photo(name) for name in ("astronaut", "chelsea", "coffee")}


@pytest.fixture(scope="session")
def vtest_frames() -> dict[int, np.ndarray]:
    return {index: video_frame(index) for index in (0, 100)}


@pytest.fixture(scope="session", autouse=True)
def auto_measured(request: pytest.FixtureRequest) -> None:
    """`--backend auto` timed once per run for the models the servers in these tests run on, before any starts: a
    service otherwise serves on the ranking's choice while it measures and moves to the pick mid-test (which
    test_autoselect checks on its own). A plain `pytest` (the in-process tier) needs it too on a machine that never
    measured: its app and pipeline tests load `auto`, which would start the timing children there, and that tier
    may start no process (a fresh clone's first `pytest` failed three of them); once stored, it is read."""
    from tests.tiers import session_setup

    if os.environ.get("EDGE_AUTO_MEASURE", "1") == "0":
        return
    from edge_inference.edge.detection.auto.candidates import candidates
    from edge_inference.edge.detection.auto.choice import stored_results
    from edge_inference.edge.detection.auto.store import cache_key
    from edge_inference.edge.detection.model_files import every_engine
    from edge_inference.edge.settings import get_settings

    settings = get_settings()
    with session_setup():
        for model in ("yolox-nano", str(MODELS / "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx")):
            found = candidates(every_engine(model, settings), settings)
            if len(found) > 1:
                stored_results(cache_key(found), found, model, settings)


@functools.cache
def example_detections() -> VideoDetections:
    """yolox-nano's boxes on every frame of vtest.avi, at the shipped events example's threshold."""
    config = yaml.safe_load((REPO / "deploy/events.example.yaml").read_text())
    stream = config["streams"][0]
    return VideoDetections(stream["model"], VTEST, float(stream["conf"]))


@pytest.fixture(scope="session", autouse=True)
def video_detections_started(auto_measured: None, request: pytest.FixtureRequest) -> Iterator[None]:
    """Made beside the tests that come before the tracking tests (a minute of CPU on a fresh, loaded machine),
    when those are in this run; finished before the session ends (an engine killed mid-run aborts the process)."""
    users = ("tests/test_tracking.py", "tests/test_tracker_library.py")
    if not any(item.nodeid.startswith(users) for item in request.session.items):
        yield
        return
    detections = example_detections()
    detections.start()
    yield
    detections.wait()
