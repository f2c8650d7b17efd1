"""A loop running frames back to back (`edge detect`, the `Detector` API) measures its engine threads on its own
frames instead of taking the budget's spinning threads (issue 62): one thread, or more where they pay, said in
`--json`'s record. Real engines throughout; the decision itself on given figures."""

from __future__ import annotations

import json

import cv2
import pytest

from edge_inference.backends import BackendError, BackendOptions, open_backend
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.threads import (
    LOOP_AGAIN_S,
    LOOP_BLOCK,
    LOOP_TRIAL_FRAMES,
    LOOP_WARM_FRAMES,
    LoopThreads,
    usable_cores,
)
from tests.conftest import MODELS, VTEST
from tests.helpers import run_edge

YOLOX = MODELS / "onnx/yolox_nano.onnx"
ENOUGH = LOOP_WARM_FRAMES + 2 * (LOOP_TRIAL_FRAMES + LOOP_BLOCK) + 2  # frames until the first trial has ended
two_cores = pytest.mark.skipif(usable_cores() < 2, reason="one usable core: the loop has no threads to choose")


def _session(backend):
    """The ONNX Runtime session's threads and spinning, as the engine itself reads them back."""
    options = backend.session.get_session_options()
    return options.intra_op_num_threads, options.get_session_config_entry("session.intra_op.allow_spinning")


def _frames(count: int):
    capture = cv2.VideoCapture(str(VTEST))
    frames = [capture.read()[1] for _ in range(count)]
    capture.release()
    return frames


@two_cores
def test_a_detect_loop_measures_its_threads_and_runs_on_the_one_it_says():
    """The loop starts on one thread, times one and the budget's on alternate blocks of its own frames, keeps one
    engine and says which and why; nothing spins. Which wins depends on the machine's load: not asserted."""
    detector = load_detector(DetectorConfig(str(YOLOX), backend="onnx", device="cpu"))
    judge = detector.loop_threads
    assert judge is not None and judge.planned == usable_cores()
    try:
        assert _session(detector.backend) == (1, "0")
        assert judge.record is None and "until" in judge.why  # nothing chosen yet: on one thread
        ran = []
        for frame in _frames(ENOUGH):
            result = detector.detect(frame)
            assert any(d.label == "person" for d in result.detections)  # every engine on the way detects
            ran.append(_session(detector.backend)[0])
        record = judge.record
        assert record is not None and set(ran) == {1, judge.planned}
        assert str(record["why"]).startswith(f"measured: {judge.planned} threads ran ")
        assert judge.loaded == [record["threads"]]  # the other engine closed
        assert _session(detector.backend) == (record["threads"], "0")
    finally:
        detector.close()


def _open(threads: int):
    return open_backend("onnx", YOLOX, BackendOptions("cpu", threads))


def _run(judge: LoopThreads, frames: int, seconds: dict[int, float]) -> list[int]:
    """`frames` turns, each taking the wall time given for its threads (CPU: wall x threads); the threads used."""
    used = []
    for _ in range(frames):
        turn = judge.turn()
        used.append(turn.threads)
        judge.took(turn, seconds[turn.threads], seconds[turn.threads] * turn.threads)
    return used


def test_more_threads_are_kept_only_where_they_pay_and_measured_again_as_the_load_changes():
    now = [0.0]
    judge = LoopThreads(_open(1), 2, _open, clock=lambda: now[0])
    used = _run(judge, ENOUGH, {1: 0.030, 2: 0.020})  # two threads 1.5x the frames a second
    trial = used[LOOP_WARM_FRAMES:]
    assert trial[: 2 * LOOP_BLOCK] == [1] * LOOP_BLOCK + [2] * LOOP_BLOCK  # alternated blocks, not one then the other
    assert judge.threads == 2 and judge.loaded == [2]
    assert "2 threads ran 1.50x the frames a second of 1 thread at 1.33x the CPU per frame" in judge.why
    assert set(_run(judge, 10, {1: 0.030, 2: 0.020})) == {2}  # kept, no trial before LOOP_AGAIN_S
    now[0] += LOOP_AGAIN_S  # the machine got busy: two threads now barely faster
    _run(judge, 2 * (LOOP_TRIAL_FRAMES + LOOP_BLOCK) + 2, {1: 0.030, 2: 0.028})
    assert judge.threads == 1 and judge.loaded == [1]
    assert "1.07x the frames a second" in judge.why and "1 thread kept" in judge.why
    judge.close()
    assert judge.loaded == []


def test_a_second_engine_that_cannot_load_leaves_the_loop_on_one_thread_with_the_reason():
    def refuse(threads: int):
        raise BackendError("not enough memory for a second copy of the model")

    judge = LoopThreads(_open(1), 2, refuse)
    assert set(_run(judge, ENOUGH, {1: 0.03})) == {1}
    assert (
        judge.why
        == "1 thread: 2 threads could not be loaded to compare (not enough memory for a second copy of the model)"
    )
    judge.close()


def test_calls_from_several_threads_at_once_run_on_the_engine_in_place_untimed():
    judge = LoopThreads(_open(1), 2, _open)
    _run(judge, LOOP_WARM_FRAMES, {1: 0.03})
    first = judge.turn()  # the trial's first frame, on the engine in place
    second = judge.turn()  # another thread's frame meanwhile
    assert judge.loaded == [1, 2] and first.timed and not second.timed and second.threads == judge.threads
    judge.took(second, 0.5, 1.0)
    judge.took(first, 0.03, 0.03)
    _run(judge, 2 * (LOOP_TRIAL_FRAMES + LOOP_BLOCK) + 2, {1: 0.03, 2: 0.02})
    assert judge.threads == 2  # the untimed 0.5 s frame did not count against the engine in place
    judge.close()


@pytest.mark.process
@two_cores
def test_edge_detect_says_its_engine_threads_in_each_json_record_once_chosen(tmp_path):
    """Frames before the choice run on one thread and say nothing of it (a photo's record is POST /detect's); from
    the frame the choice is made, every record says the threads and why. The summary table says it too."""
    clip = tmp_path / "walkway.mp4"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter.fourcc(*"mp4v"), 10, (768, 576))
    for frame in _frames(ENOUGH):
        writer.write(frame)
    writer.release()
    proc = run_edge("detect", str(clip), "-m", str(YOLOX), "-b", "onnx", "--json")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line).get("engine_threads") for line in proc.stdout.splitlines()]
    said = [r for r in records if r is not None]
    assert records[0] is None and said and records[-len(said) :] == said  # once said, said on every later frame
    assert said[-1]["threads"] in (1, 2) and said[-1]["why"].startswith("measured: 2 threads ran ")
    table = run_edge("detect", str(clip), "-m", str(YOLOX), "-b", "onnx")
    assert "  engine threads: measured: 2 threads ran " in table.stdout, table.stdout
    pinned = run_edge("detect", str(clip), "-m", str(YOLOX), "-b", "onnx", "--threads", "2", "--json")
    assert all("engine_threads" not in json.loads(line) for line in pinned.stdout.splitlines())  # the user's threads
