"""The detector keeper on its own: a model that fails to load is retried with backoff, a stuck inference gets its
detector given up on (and freed by its own thread), stopping releases what it holds. Real ONNX Runtime detectors;
a hang is made by blocking inside the real engine's run call, as a wedged USB accelerator would."""

from __future__ import annotations

import re
import threading

import cv2
import pytest

from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.keeper import DetectorKeeper
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from tests.conftest import MEDIA
from tests.helpers import wedge_after_warmup
from tests.inprocess import SSD_ONNX
from tests.test_watchdogs import wait_for


class Recorder:
    """What the keeper reported, in order."""

    def __init__(self) -> None:
        self.states: list[tuple[str, str | None]] = []
        self.load_failures = 0
        self.replaced = 0

    def state(self, state: str, error: str | None) -> None:
        self.states.append((state, error))

    def load_failure(self) -> None:
        self.load_failures += 1

    def replace(self) -> None:
        self.replaced += 1


def keeper_for(load, stop: threading.Event, recorder: Recorder, **options) -> DetectorKeeper:
    return DetectorKeeper(
        load,
        stop,
        on_state=recorder.state,
        on_load_failure=recorder.load_failure,
        on_replaced=recorder.replace,
        **options,
    )


def watch_close(detector: Detector, closed: list[Detector]) -> Detector:
    close = detector.close

    def recording_close() -> None:
        closed.append(detector)
        close()

    detector.close = recording_close  # type: ignore[method-assign]
    return detector


@pytest.fixture(scope="module")
def tensor():
    detector = load_detector(DetectorConfig(SSD_ONNX))
    try:
        yield detector.prepare(cv2.imread(str(MEDIA / "cat_720p.jpg"))).tensor.copy()
    finally:
        detector.close()


def test_a_model_that_fails_to_load_is_retried_with_growing_backoff_until_it_loads():
    attempts: list[int] = []

    def load() -> Detector:
        attempts.append(1)
        if len(attempts) <= 3:
            raise RuntimeError("Edge TPU not found")
        return load_detector(DetectorConfig(SSD_ONNX))

    recorder = Recorder()
    keeper = keeper_for(load, threading.Event(), recorder, first_backoff_s=0.01)
    assert keeper.load()
    try:
        assert keeper.state == "ready" and keeper.detector is not None
        assert recorder.load_failures == 3
        failed = [error for state, error in recorder.states if state == "failed"]
        assert [e.split("(retrying in ")[1] for e in failed] == ["0.01 s)", "0.02 s)", "0.04 s)"]
        assert all("cannot load the model: Edge TPU not found" in e for e in failed)
        assert recorder.states[-1] == ("ready", None)
    finally:
        keeper.release()


def test_a_stopped_stream_stops_retrying_and_keeps_no_detector():
    stop = threading.Event()

    def load() -> Detector:
        stop.set()  # the stream is stopped while the model loads
        raise RuntimeError("no such device")

    keeper = keeper_for(load, stop, Recorder(), first_backoff_s=30)
    assert keeper.load() is False  # at once: the 30 s backoff is cut short by the stop
    assert keeper.detector is None


def test_a_detector_loaded_as_the_stream_stops_is_closed_not_kept():
    stop, closed = threading.Event(), []

    def load() -> Detector:
        detector = watch_close(load_detector(DetectorConfig(SSD_ONNX)), closed)
        stop.set()
        return detector

    keeper = keeper_for(load, stop, Recorder())
    assert keeper.load() is False
    assert keeper.detector is None and len(closed) == 1


def test_an_engine_error_goes_to_the_caller_and_the_detector_stays(tensor):
    recorder = Recorder()
    keeper = keeper_for(lambda: load_detector(DetectorConfig(SSD_ONNX)), threading.Event(), recorder)
    assert keeper.load()
    generation, detector = keeper.current()
    assert detector is not None
    with pytest.raises(Exception, match=r"(?i)input|shape|rank|dimension"):
        keeper.infer(generation, detector, tensor[..., :1])  # one channel: the engine refuses it
    assert keeper.is_current(generation) and not keeper.inferring and not keeper.check()
    outputs, inference_ms = keeper.infer(generation, detector, tensor) or ([], -1.0)
    assert outputs and inference_ms >= 0
    keeper.release()


def test_inferences_failing_in_a_row_fail_the_stream_until_one_works(tensor):
    """An engine whose every inference fails (a server away, a device gone) left the stream `ready` and its health
    ok; two failures in a row now say so in the state, with the engine's line, and the next success clears it."""
    recorder = Recorder()
    keeper = keeper_for(lambda: load_detector(DetectorConfig(SSD_ONNX)), threading.Event(), recorder)
    assert keeper.load()
    generation, detector = keeper.current()
    assert detector is not None
    with pytest.raises(Exception, match=r"(?i)input|shape|rank|dimension"):
        keeper.infer(generation, detector, tensor[..., :1])
    assert keeper.state == "ready"  # one failure is not yet a failing engine
    with pytest.raises(Exception, match=r"(?i)input|shape|rank|dimension"):
        keeper.infer(generation, detector, tensor[..., :1])
    assert keeper.state == "failed" and recorder.states[-1][1].startswith("inferences failing: ")
    assert keeper.infer(generation, detector, tensor) is not None
    assert keeper.state == "ready" and recorder.states[-1] == ("ready", None)
    keeper.release()


def test_a_stuck_inference_is_given_up_on_and_its_detector_freed_by_its_own_thread(tensor):
    """The keeper says `loading` with the reason, a new detector takes over, and the wedged call, once it returns,
    closes its detector and tells its loop to end."""
    unblock, loaded, closed = threading.Event(), [], []

    def load() -> Detector:
        detector = watch_close(load_detector(DetectorConfig(SSD_ONNX)), closed)
        if not loaded:  # the first engine wedges on its first call after warm-up
            wedge_after_warmup(detector.backend, unblock)
        loaded.append(detector)
        return detector

    recorder = Recorder()
    keeper = keeper_for(load, threading.Event(), recorder, inference_timeout_s=0.5)
    assert keeper.load()
    generation, first = keeper.current()
    assert first is not None
    answers: list[object] = []
    call = threading.Thread(target=lambda: answers.append(keeper.infer(generation, first, tensor)), daemon=True)
    call.start()
    try:
        wait_for(lambda: keeper.inferring, "the inference to start")
        wait_for(lambda: recorder.replaced == 1 or keeper.check(), "the keeper to give up on the stuck detector")
        assert recorder.replaced == 1 and keeper.detector is None and not keeper.is_current(generation)
        state, reason = recorder.states[-1]
        # the configured 0.5 s, or STUCK_MULTIPLE times the warm-up's time on a slow or loaded machine
        assert state == "loading" and re.search(r"did not return within [0-9.]+ s", reason or "")
        assert keeper.stuck_after_s >= 0.5
        assert not keeper.check()  # given up on once, not again
        assert keeper.load() and keeper.detector is loaded[1] and keeper.state == "ready"
        assert closed == []  # the wedged engine is never closed under its own thread
        unblock.set()
        call.join(60)
        assert answers == [None]  # the caller's loop learns that its detector was given up on...
        assert closed == [first]  # ...and the wedged detector was freed by the thread that held it
        new_generation, second = keeper.current()
        assert second is loaded[1] and keeper.infer(new_generation, second, tensor) is not None
    finally:
        unblock.set()
        keeper.release()


def test_release_closes_an_idle_detector_and_leaves_a_busy_one_to_its_thread(tensor):
    closed: list[Detector] = []
    keeper = keeper_for(
        lambda: watch_close(load_detector(DetectorConfig(SSD_ONNX)), closed), threading.Event(), Recorder()
    )
    assert keeper.load()
    keeper.release()
    assert len(closed) == 1 and keeper.detector is None

    unblock = threading.Event()
    assert keeper.load()
    generation, detector = keeper.current()
    assert detector is not None
    run = detector.backend.run
    detector.backend.run = lambda t: (unblock.wait(60), run(t))[1]  # type: ignore[method-assign]
    answers: list[object] = []
    call = threading.Thread(target=lambda: answers.append(keeper.infer(generation, detector, tensor)), daemon=True)
    call.start()
    wait_for(lambda: keeper.inferring, "the inference to start")
    keeper.release()
    assert len(closed) == 1  # not under the running call
    unblock.set()
    call.join(60)
    assert answers == [None] and closed[-1] is detector and len(closed) == 2


def test_on_a_slow_device_a_normal_inference_is_not_called_stuck(tensor):
    """One inference takes 16-25 s on a Pi Zero or under emulation: a fixed limit reloaded the detector on every
    frame. The keeper learns what an inference takes here (the warm-up, then recent ones) and calls one stuck only
    at STUCK_MULTIPLE times that; a wedge beyond it is still caught."""
    unblock = threading.Event()

    def load() -> Detector:
        detector = load_detector(DetectorConfig(SSD_ONNX))
        run = detector.backend.run

        def slow_run(t):  # this device: every inference takes 0.4 s, twice the configured limit
            unblock.wait(0.4)
            return run(t)

        detector.backend.run = slow_run  # type: ignore[method-assign]
        return detector

    recorder = Recorder()
    keeper = keeper_for(load, threading.Event(), recorder, inference_timeout_s=0.2)
    assert keeper.load()
    assert keeper.normal_s is not None and keeper.normal_s >= 0.4 and keeper.stuck_after_s >= 4
    generation, detector = keeper.current()
    assert detector is not None
    outcome: list[object] = []
    call = threading.Thread(target=lambda: outcome.append(keeper.infer(generation, detector, tensor)), daemon=True)
    call.start()
    while call.is_alive():
        assert not keeper.check()  # 0.4 s is normal here, though over the configured 0.2 s
        call.join(0.05)
    assert outcome and outcome[0] is not None and recorder.replaced == 0
    keeper.release()
