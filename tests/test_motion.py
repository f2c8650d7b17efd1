"""Motion gating: a still scene skips the detector, movement runs it, objects in view keep being checked."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from edge_inference.cli.serve import _config
from edge_inference.edge.config import MotionConfig, ServiceConfig, StreamConfig, TrackingConfig
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.motion import MotionGate
from tests.conftest import MODELS, VTEST
from tests.test_watchdogs import wait_for

FPS = 10.0


def vtest_frames(count: int, start: int = 0) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(VTEST))
    capture.set(cv2.CAP_PROP_POS_FRAMES, start)
    frames = []
    while len(frames) < count:
        ok, frame = capture.read()
        assert ok
        frames.append(frame)
    capture.release()
    return frames


@pytest.fixture(scope="module")
def empty_scene() -> np.ndarray:
    """The street without anyone on it: the per-pixel median of frames spread over the video (people move on)."""
    frames = vtest_frames(795)[::15]
    return np.median(np.stack(frames), axis=0).astype(np.uint8)


def noisy(image: np.ndarray, rng: np.random.Generator, sigma: float = 2.0) -> np.ndarray:
    """A camera's sensor noise on a still scene."""
    return np.clip(image + rng.normal(0, sigma, image.shape), 0, 255).astype(np.uint8)


def with_clock(image: np.ndarray, second: int) -> np.ndarray:
    stamped = image.copy()
    cv2.putText(stamped, f"10:{second // 60:02d}:{second % 60:02d}", (10, 50), 0, 2, (255, 255, 255), 4)
    return stamped


def test_a_still_scene_skips_and_people_walking_run_the_detector(empty_scene: np.ndarray):
    rng = np.random.default_rng(1)
    gate = MotionGate(MotionConfig(max_idle_s=1000))
    verdicts = [gate.check(noisy(empty_scene, rng), t / FPS) for t in range(50)]
    assert verdicts[0].reason == "first"
    assert not any(v.run for v in verdicts[1:]), [v.moving for v in verdicts]
    walking = [gate.check(frame, (50 + t) / FPS) for t, frame in enumerate(vtest_frames(20, start=100))]
    assert sum(v.run for v in walking) >= 19, [v.moving for v in walking]


def test_changes_inside_an_ignored_region_do_not_count(empty_scene: np.ndarray):
    """A clock burnt into the picture changes every second; ignored, it never wakes the detector."""
    rng = np.random.default_rng(2)
    ignored = MotionGate(MotionConfig(ignore=[[(0.0, 0.0), (0.6, 0.0), (0.6, 0.1), (0.0, 0.1)]], max_idle_s=1000))
    counted = MotionGate(MotionConfig(max_idle_s=1000))
    frames = [noisy(with_clock(empty_scene, t), rng) for t in range(40)]
    ran_ignored = [ignored.check(frame, t).run for t, frame in enumerate(frames)]
    ran_counted = [counted.check(frame, t).run for t, frame in enumerate(frames)]
    assert not any(ran_ignored[1:])
    assert any(ran_counted[1:])  # the same clock, not ignored, is motion


def test_objects_in_view_are_rechecked_and_an_empty_scene_gets_a_heartbeat(empty_scene: np.ndarray):
    rng = np.random.default_rng(3)
    gate = MotionGate(MotionConfig(recheck_s=1.0, max_idle_s=5.0, stationary_max_s=1.0))
    gate.check(noisy(empty_scene, rng), 0.0)
    gate.found([CAR])  # a parked car, say: it does not move but it is there
    runs = []
    for t in range(1, 31):
        if gate.check(noisy(empty_scene, rng), t / FPS).run:
            runs.append(t / FPS)
            gate.found([CAR])  # the run's answer, as the pipeline gives it once the frame is decoded
    assert runs == [1.0, 2.0, 3.0]
    gate.found([])
    runs = [t / FPS for t in range(31, 120) if gate.check(noisy(empty_scene, rng), t / FPS).run]
    assert runs == [8.0]  # five seconds after the last run


def test_a_recheck_waits_for_the_last_runs_answer_unless_it_never_comes(empty_scene: np.ndarray):
    """25 regions of a 4K frame take a second to answer: the gate asked again at every recheck_s meanwhile, so a
    still street ran twice as often as it should. An answer that never comes (its frame lost) holds it back no
    longer than max_idle_s."""
    rng = np.random.default_rng(3)
    frames = [noisy(empty_scene, rng) for _ in range(8)]  # sensor noise, made once: eight seconds of frames reuse it
    gate = MotionGate(MotionConfig(recheck_s=1.0, max_idle_s=5.0, stationary_max_s=1.0))
    gate.check(frames[0], 0.0)
    gate.found([CAR])
    runs = [t / FPS for t in range(1, 80) if gate.check(frames[t % len(frames)], t / FPS).run]
    assert runs == [1.0, 6.0]  # the recheck, then nothing until its answer is max_idle_s late


CAR = (100.0, 200.0, 260.0, 300.0)


def test_objects_that_stay_put_are_rechecked_less_and_less_often_until_something_changes(empty_scene: np.ndarray):
    """Frigate's stationary objects: a parked car found where it was doubles the interval to its next check, up
    to stationary_max_s; a car that moved (or motion) brings the interval back to recheck_s."""
    rng = np.random.default_rng(5)
    frames = [noisy(empty_scene, rng) for _ in range(8)]  # sensor noise, made once: a minute of frames reuses it
    gate = MotionGate(MotionConfig(recheck_s=1.0, max_idle_s=1000, stationary_max_s=8.0))
    gate.check(frames[0], 0.0)
    gate.found([CAR])
    runs = []
    for t in range(1, int(60 * FPS)):
        if gate.check(frames[t % len(frames)], t / FPS).run:
            runs.append(t / FPS)
            gate.found([CAR])  # still there, in the same place
    assert runs[:6] == [1.0, 3.0, 7.0, 15.0, 23.0, 31.0]  # 1, 2, 4, 8, then capped at 8 s
    moved = (140.0, 200.0, 300.0, 300.0)
    gate.found([moved])  # the car drove off a little: checked at recheck_s again
    assert gate.recheck_s == 1.0


def test_a_street_of_parked_objects_is_stationary_though_one_box_near_the_threshold_comes_and_goes(
    empty_scene: np.ndarray,
):
    """Forty parked cars, one of them found every other check (its score at the threshold): the street was never
    "the same places", so it was rechecked every second for ever; one moved car in forty still counts as moved
    only where it is more than a tenth of them."""
    rng = np.random.default_rng(6)
    frames = [noisy(empty_scene, rng) for _ in range(8)]
    cars = [(float(10 * i), 0.0, float(10 * i + 8), 8.0) for i in range(40)]
    gate = MotionGate(MotionConfig(recheck_s=1.0, max_idle_s=1000, stationary_max_s=8.0))
    gate.check(frames[0], 0.0)
    gate.found(cars)
    runs = []
    for t in range(1, int(30 * FPS)):
        if gate.check(frames[t % len(frames)], t / FPS).run:
            runs.append(t / FPS)
            gate.found(cars if len(runs) % 2 else cars[:-1])  # the last car flickers
    assert runs[:4] == [1.0, 3.0, 7.0, 15.0]
    few = [(0.0, 0.0, 8.0, 8.0), (20.0, 0.0, 28.0, 8.0)]
    gate.found(few)
    gate.check(frames[0], 100.0)
    gate.found([few[0], (60.0, 0.0, 68.0, 8.0)])  # one of two moved: not stationary
    assert gate.recheck_s == 1.0


def test_a_gated_stream_skips_still_frames_and_detects_the_walkers(tmp_path: Path, empty_scene: np.ndarray):
    """A clip of 40 still frames then 40 of people walking: the still part is skipped (counted), the walking
    part is all detected and tracked (the tracker told how long the scene was still before it)."""
    rng = np.random.default_rng(4)
    clip = tmp_path / "still-then-walk.avi"
    height, width = empty_scene.shape[:2]
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter.fourcc(*"MJPG"), FPS, (width, height))
    for _ in range(40):
        writer.write(noisy(empty_scene, rng))
    for frame in vtest_frames(40, start=200):
        writer.write(frame)
    writer.release()
    stream = StreamConfig(
        id="gated",
        source=str(clip),
        model=str(MODELS / "onnx/yolox_nano.onnx"),
        backend="onnx",
        mode="file",
        pace=False,
        motion=MotionConfig(),
        tracking=TrackingConfig(labels=["person"]),
    )
    manager = StreamManager(ServiceConfig(streams=[stream]))
    people: list[int] = []
    tracked: set[int] = set()
    pipeline = manager.pipelines["gated"]
    pipeline.add_listener(lambda r: people.append(r.index) if any(d.label == "person" for d in r.detections) else None)
    pipeline.add_listener(lambda r: tracked.update(d.track_id for d in r.detections if d.track_id is not None))
    manager.start()
    try:
        wait_for(lambda: pipeline.state == "ended", "the clip to end")
    finally:
        manager.stop()
    figures = pipeline.stats.snapshot()
    assert figures.frames_still >= 35  # the first frame and the heartbeat may run
    assert figures.frames_processed + figures.frames_still == 80
    assert len([i for i in people if i >= 40]) >= 38
    assert len(tracked) >= 3 and figures.errors == 0  # a few people, each with a track; no tracking failed


def test_motion_is_off_unless_asked_and_the_flag_turns_it_on():
    assert StreamConfig(id="a", source="0").motion is None
    flags = {
        "compare": None,
        "stream_id": "main",
        "no_pace": False,
        "motion": True,
        "model": "yolox-nano",
    }
    config = _config(None, "0", {}, flags)
    assert config.streams[0].motion == MotionConfig()
