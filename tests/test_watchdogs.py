"""Nobody is watching: a stalled camera is reopened, a missing model is retried, a stuck detector is reloaded.

Every wait is for a condition with a generous deadline; nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import functools
import itertools
import shutil
import threading
import time

import pytest

from benchmarks.hostile import serve_flapping_camera, serve_stalling_camera
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.runtime.watchdog import Watchdog
from edge_inference.edge.stream.pipeline import StreamPipeline
from edge_inference.edge.stream.sources import open_source
from edge_inference.edge.stream.stats import QuietRepeats
from tests.conftest import MODELS, VTEST
from tests.helpers import wedge_after_warmup
from tests.inprocess import SSD_ONNX
from tests.server import running_server


def wait_for(condition, what: str, timeout: float = 90, every: float = 0.1, seen=None):
    """`condition()` once it is true; past `timeout`, an assertion naming `what`, and what `seen()` says was seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}" + (f": {seen()}" if seen else "")
        time.sleep(every)


@pytest.fixture()
def stalling_camera():
    address, camera, server = serve_stalling_camera(VTEST)
    yield address, camera
    camera.hold.set()
    server.shutdown()


@pytest.mark.process
def test_a_camera_that_goes_silent_is_declared_stalled_reopened_and_reported(tmp_path, stalling_camera):
    address, camera = stalling_camera
    config = tmp_path / "streams.yaml"
    config.write_text(
        f"streams:\n  - id: door\n    source: http://viewer:s3cr3tpw@{address}/cam.avi\n    stall_timeout_s: 2\n"
        f"    model: {SSD_ONNX}\n    backend: onnx\n"  # named: this is not about which engine `auto` measures fastest
    )
    with running_server(["--config", str(config)], tmp_path / "log") as server:
        server.wait_until("/health/live")
        streams = "/api/v1/streams"
        wait_for(lambda: server.client.get(streams).json()[0]["frame_age_s"] is not None, "first frames")

        def stalled():
            stream = server.client.get(streams).json()[0]
            return stream if stream["state"] == "reconnecting" and "stalled" in (stream["error"] or "") else None

        stream = wait_for(stalled, "the stall to be declared")
        assert "no frame for" in stream["error"] and stream["last_error_at"] is not None
        latest = server.client.get("/api/v1/streams/door/detections/latest")
        assert latest.status_code == 503 and "reconnecting" in latest.json()["detail"]  # no stale frame as news
        ready = server.client.get("/health/ready")
        # its only camera delivers nothing: down (503) though the model is loaded, so a probe reading only the
        # status code is told the truth (issue 22)
        assert ready.status_code == 503 and ready.json()["status"] == "down"
        door = ready.json()["streams"]["door"]
        assert door["up"] is False and door["stalls"] >= 1 and door["frame_age_s"] > 0
        assert 'edge_stream_up{backend="onnx' in server.client.get("/metrics").text
        camera.hold.set()  # the camera answers again

        def recovered():
            stream = server.client.get(streams).json()[0]
            return stream if stream["state"] == "running" and stream["error"] is None else None

        stream = wait_for(recovered, "frames to flow again")
        assert "stalled" in stream["last_error"]  # kept, with its time, for whoever looks later
        wait_for(lambda: server.client.get("/api/v1/streams/door/detections/latest").status_code == 200, "fresh")
        assert wait_for(lambda: server.client.get("/health/ready").json()["status"] == "ok", "ok again")
        stats = server.client.get("/api/v1/stats").json()["streams"]["door"]
        texts = [server.client.get(p).text for p in (streams, "/api/v1/stats", "/metrics", "/health/ready")]
    assert stats["stalls"] >= 1 and stats["reconnects"] >= 1 and camera.requests >= 2
    for text in [*texts, server.log]:
        assert "s3cr3tpw" not in text


@pytest.mark.process
def test_a_camera_that_flaps_is_degraded_and_no_delivering_stream_is_down(tmp_path):
    """Each reopen of a flapping camera succeeds, so it reads `running` most of the time: the reconnects in the last
    minute make it degraded. A service whose only camera delivers nothing is down (503) though its model is loaded."""
    address, camera, http = serve_flapping_camera(VTEST)
    config = tmp_path / "streams.yaml"
    config.write_text(
        f"streams:\n  - id: door\n    source: http://{address}/video.avi\n    mode: live\n"
        f"    stall_timeout_s: 1\n    model: {SSD_ONNX}\n"
    )
    try:
        with running_server(["--config", str(config)], tmp_path / "log") as server:
            server.wait_until("/health/live")

            def flapping():  # delivering between two stalls, and known to flap (while reconnecting it is down)
                body = server.client.get("/health/ready").json()
                unstable = (body["streams"]["door"]["unstable"] or "").startswith("unstable: ")
                return body if unstable and body["streams"]["door"]["up"] else None

            body = wait_for(flapping, "the camera to be seen flapping", timeout=180)
            assert body["status"] == "degraded" and body["streams"]["door"]["unstable"].endswith("reconnects in 60 s")
            assert camera.requests >= 3
        only_dead = tmp_path / "dead.yaml"
        only_dead.write_text(
            f"streams:\n  - id: dead\n    source: http://127.0.0.1:9/none.avi\n    mode: live\n    model: {SSD_ONNX}\n"
        )
        with running_server(["--config", str(only_dead)], tmp_path / "dead.log") as server:
            server.wait_until("/health/live")

            def loaded_but_dark():
                answer = server.client.get("/health/ready")
                stream = answer.json()["streams"]["dead"]
                return (
                    answer
                    if stream["state"] in ("connecting", "reconnecting") and answer.json()["status"] != "starting"
                    else None
                )

            answer = wait_for(loaded_but_dark, "the model to load while the camera stays dark", timeout=120)
            assert answer.status_code == 503 and answer.json()["status"] == "down"
    finally:
        camera.stop.set()
        http.shutdown()


@pytest.mark.process
def test_a_camera_that_is_switched_off_is_no_flapping_camera_and_health_says_why():
    """A camera that is simply off read "unstable: 5 reconnects in 60 s" (its own open retries counted as a
    camera that keeps dropping), and the service was degraded with `problems` empty. Its retries are the backoff's,
    not reconnects; the service's problems name the stream and what its source says."""
    from edge_inference.edge.config import ServiceConfig, StreamConfig
    from edge_inference.edge.runtime.health import service_health
    from edge_inference.edge.runtime.streams import StreamManager

    off = StreamConfig(id="porch", source="http://127.0.0.1:9/video.mjpg", mode="live", model=str(SSD_ONNX))
    photo = StreamConfig(id="desk", source=str(VTEST), model=str(SSD_ONNX), backend="onnx", loop=True)
    manager = StreamManager(ServiceConfig(streams=[off, photo]))
    porch = manager.pipelines["porch"]
    assert porch.capture is not None
    opens: list[float] = []
    source = porch.capture.source
    real_open = source.open
    source.open = lambda: (opens.append(time.monotonic()), real_open())[1]  # type: ignore[method-assign]
    manager.start()
    try:
        wait_for(lambda: len(opens) >= 6, "six tries to open the camera", timeout=120)  # 0.5 + 1 + 2 + 4 + 8 s apart
        porch_health = porch.health()
        health = service_health(manager, strict=False)
    finally:
        manager.stop()
    assert porch_health.state == "reconnecting" and porch_health.unstable is None, porch_health
    assert porch.stats.snapshot().reconnects == 0
    assert health.status == "degraded"
    (problem,) = health.problems
    assert problem.startswith("stream porch: reconnecting: ") and "127.0.0.1:9" in problem, problem


@pytest.mark.process
def test_a_model_that_cannot_load_is_retried_until_it_can(tmp_path):
    mirror, cache = tmp_path / "mirror", tmp_path / "cache"
    (mirror / "onnx").mkdir(parents=True)  # the mirror is empty: like an accelerator not yet plugged in
    env = {"EDGE_MODEL_MIRROR": str(mirror), "EDGE_MODEL_CACHE": str(cache)}
    args = ["--source", str(VTEST), "--loop", "--model", "yolox-nano"]
    photo = (MODELS.parent / "media" / "cat_720p.jpg").read_bytes()
    with running_server(args, tmp_path / "log", env) as server:
        server.wait_until("/health/live")

        def failed():
            body = server.client.get("/health/ready").json()
            return body if body["streams"]["main"]["state"] == "failed" else None

        body = wait_for(failed, "the load to fail")
        assert body["status"] == "down" and "mirror has no" in body["streams"]["main"]["error"]
        assert server.client.get("/health/ready").status_code == 503  # its only model is missing: nothing works
        upload = server.client.post("/api/v1/detect", content=photo)
        assert upload.status_code == 503 and "not loaded" in upload.json()["detail"]  # not a 500, no traceback
        assert "retrying" in body["streams"]["main"]["error"]
        shutil.copy(MODELS / "onnx" / "yolox_nano.onnx", mirror / "onnx" / "yolox_nano.onnx")  # it comes back
        wait_for(lambda: server.client.get("/health/ready").json()["status"] == "ok", "the model to load", 120)
        server.wait_for_frames("main", 1)
        stats = server.client.get("/api/v1/stats").json()["streams"]["main"]
        answer = server.client.post("/api/v1/detect", content=photo)
        metrics = server.client.get("/metrics").text
    assert stats["load_failures"] >= 1 and stats["frames_processed"] > 0
    assert answer.status_code == 200 and any(d["label"] == "cat" for d in answer.json()["detections"])
    assert "edge_model_load_failures_total" in metrics


def test_a_stuck_inference_gets_the_detector_reloaded():
    """A hung accelerator cannot be made here: the first real detector's engine blocks inside its run call."""
    loaded, unblock = [], threading.Event()

    def loader(buffers: int):
        detector = load_detector(DetectorConfig(SSD_ONNX, buffers=buffers))
        if not loaded:  # the first detector hangs on its first frame after warm-up, like a wedged USB device
            wedge_after_warmup(detector.backend, unblock)
            detector.backend.close = functools.partial(closed.append, "first")  # type: ignore[method-assign]
        loaded.append(detector)
        return detector

    closed: list[str] = []
    pipeline = StreamPipeline("stuck", open_source(str(VTEST)), loader, pace=False, loop=True, inference_timeout_s=1.0)
    watchdog = Watchdog(lambda: [pipeline], period_s=0.2)
    pipeline.start()
    watchdog.start()
    try:
        wait_for(lambda: pipeline.stats.restarts >= 1, "the watchdog to give up on the stuck detector")
        assert "detector is stuck" in (pipeline.last_error or "")
        processed = wait_for(lambda: pipeline.stats.frames_processed, "frames from the reloaded detector")
        wait_for(lambda: pipeline.stats.frames_processed > processed + 5, "frames to keep flowing")
        assert len(loaded) == 2 and pipeline.state == "running" and pipeline.error is None
        assert closed == []  # the stuck engine is never closed under its own thread
        unblock.set()  # the wedged call finally returns: its thread frees that detector and leaves
        wait_for(lambda: closed == ["first"], "the abandoned detector to be closed by its own thread")
    finally:
        watchdog.stop()
        pipeline.stop()


def test_the_same_failure_again_and_again_is_logged_less_and_less_often():
    """A camera off for the night fails its reopen every 10 s: once a line each time, 8640 lines a day."""
    repeats = QuietRepeats()
    failure = "camera rtsp://cam/ cannot be opened"
    lines = [(t, line) for t in range(0, 3 * 3600, 10) if (line := repeats.line(failure, float(t)))]
    assert lines[0] == (0, failure) and len(lines) <= 10  # 1080 failures in three hours
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(lines)]
    assert gaps == sorted(gaps) and gaps[0] >= 60 and gaps[-1] <= 3600
    counts = [int(line.split("(again, ")[1].split(" times")[0]) for _, line in lines[1:]]
    assert sum(counts) == lines[-1][0] // 10  # every failure counted in a line that follows it
    assert repeats.line("another failure", 10800.0) == "another failure"  # something new: said at once
    repeats.reset()  # it worked in between: the next failure is news
    assert repeats.line("another failure", 10810.0) == "another failure"


@pytest.mark.process
def test_a_source_that_keeps_failing_is_said_once_not_at_every_reopen(caplog, monkeypatch):
    monkeypatch.setattr(QuietRepeats, "FIRST_S", 3600.0)  # however slow the machine, four failures come within it
    detector = functools.partial(load_detector, DetectorConfig(model=SSD_ONNX, backend="onnx"))
    source, opens = open_source("/dev/null"), []
    real_open = source.open
    source.open = lambda: (opens.append(1), real_open())[1]  # type: ignore[method-assign]
    pipeline = StreamPipeline("door", source, lambda _buffers: detector())
    with caplog.at_level("INFO", logger="edge"):
        pipeline.start()
        try:
            wait_for(lambda: len(opens) >= 4, "four failed opens")
        finally:
            pipeline.stop()
    said = [r for r in caplog.records if "/dev/null cannot be opened" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "INFO", [r.getMessage() for r in said]
    assert pipeline.health().error is not None and "/dev/null cannot be opened" in pipeline.health().last_error
