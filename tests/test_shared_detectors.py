"""Several streams on one loaded engine: loaded once, each stream gets its own frames' results, served in turn."""

from __future__ import annotations

import dataclasses
import re
import threading
import weakref
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from edge_inference.backends import Backend, BackendError, BackendOptions, open_backend
from edge_inference.edge.config import DetectorsConfig, ServiceConfig, StreamConfig
from edge_inference.edge.detection import threads as thread_rules
from edge_inference.edge.detection.detector_pool import DetectorPool, describe_engine, lone_engine_threads
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.memory import (
    RESERVE_BYTES,
    available_memory,
    cgroup_memory_headroom,
    meminfo_available,
    shared_lanes_fitting,
)
from edge_inference.edge.detection.scheduler import InferenceScheduler
from edge_inference.edge.detection.threads import (
    FIRST_LOOK_S,
    SETTLED_INFERENCES,
    CameraThreads,
    EnginePlan,
    camera_threads,
    cgroup_cpu_limit,
    plan_engine,
    usable_cores,
)
from edge_inference.edge.runtime.plan import detector_config
from edge_inference.edge.runtime.snapshots import service_stats
from edge_inference.edge.runtime.streams import StreamManager
from tests.conftest import MEDIA, MODELS, VTEST
from tests.test_watchdogs import wait_for

YOLOX = MODELS / "onnx/yolox_nano.onnx"


def _labels(pipeline) -> set[str]:
    return {d.label for d in pipeline.latest.detections} if pipeline.latest else set()


def test_streams_on_one_model_share_one_engine_and_each_gets_its_own_results(tmp_path: Path):
    """A cat photo and the pedestrian video on one shared engine: one engine loaded, serving both; the photo's
    stream finds the cat and the video's stream finds people and never the cat (no frame's outputs are handed to
    the wrong stream)."""
    cat = tmp_path / "cat.jpg"
    cv2.imwrite(str(cat), cv2.imread(str(MEDIA / "cat_720p.jpg")))
    config = ServiceConfig(
        streams=[
            StreamConfig(id="walk", source=str(VTEST), model=str(YOLOX), backend="onnx", mode="file", pace=False),
            StreamConfig(
                id="cat", source=str(cat), model=str(YOLOX), backend="onnx", mode="file", pace=False, loop=True
            ),
        ]
    )
    manager = StreamManager(config)
    seen: dict[str, set[str]] = {"walk": set(), "cat": set()}
    for stream_id, pipeline in manager.pipelines.items():
        pipeline.add_listener(lambda r, s=stream_id: seen[s].update(d.label for d in r.detections))
    manager.start()
    try:
        wait_for(lambda: all(p.stats.frames_processed >= 30 for p in manager.pipelines.values()), "frames on both")
        engines = manager.detectors.engines()
        assert len(engines) == 1
        figures = describe_engine(engines[0])
        assert figures.streams == ["cat", "walk"]
        assert figures.frames_per_stream["cat"] >= 30 and figures.frames_per_stream["walk"] >= 30
        assert figures.inference_ms_p50 and figures.inference_ms_p50 > 0
        stats = service_stats(manager)
        assert [d.streams for d in stats.detectors] == [["cat", "walk"]]
    finally:
        manager.stop()
    assert "cat" in seen["cat"]
    assert "person" in seen["walk"] and "cat" not in seen["walk"]


def test_streams_do_not_share_when_sharing_is_off():
    config = ServiceConfig(
        detectors=DetectorsConfig(share=False),
        streams=[
            StreamConfig(id=f"s{i}", source=str(VTEST), model=str(YOLOX), backend="onnx", mode="file", pace=False)
            for i in range(2)
        ],
    )
    manager = StreamManager(config)
    manager.start()
    try:
        wait_for(lambda: all(p.stats.frames_processed >= 3 for p in manager.pipelines.values()), "frames")
        assert sorted(describe_engine(e).streams[0] for e in manager.detectors.engines()) == ["s0", "s1"]
    finally:
        manager.stop()
    assert manager.detectors.engines() == []  # released with their streams


def test_a_quiet_stream_is_never_starved_by_busy_ones():
    """Two streams submit frames back to back while a third submits one now and then: its frame is served after
    the frames already waiting when it came (one per other stream), never behind a busy stream's next ones. The
    engine is held on its first frame until the others have queued, so the order does not depend on timing."""
    backend = open_backend("onnx", YOLOX, BackendOptions(threads=1))
    tensors = {name: np.zeros(backend.inputs[0].shape, dtype=np.float32) for name in ("a", "b", "quiet")}
    names = {id(tensor): name for name, tensor in tensors.items()}
    release, order = threading.Event(), []
    run_batch = backend.run_batch

    def logged(batch: list[np.ndarray]) -> list[list[np.ndarray]]:
        release.wait(60)  # holds the engine on the first frame until the quiet one has queued
        order.append(names[id(batch[0])])
        return run_batch(batch)

    backend.run_batch = logged  # type: ignore[method-assign]
    scheduler = InferenceScheduler([backend])
    stop = threading.Event()

    def busy(name: str) -> None:
        while not stop.is_set():
            scheduler.run(name, tensors[name])

    workers = [threading.Thread(target=busy, args=(name,), daemon=True) for name in ("a", "b")]
    quiet = threading.Thread(target=scheduler.run, args=("quiet", tensors["quiet"]), daemon=True)
    try:
        workers[0].start()
        wait_for(lambda: scheduler.busy_for() > 0, "the first busy stream to take the engine", timeout=30)
        workers[1].start()
        wait_for(lambda: scheduler.waiting == 1, "the second busy stream to queue", timeout=30)
        quiet.start()
        wait_for(lambda: scheduler.waiting == 2, "the quiet stream to queue", timeout=30)
        release.set()
        quiet.join(60)
    finally:
        release.set()
        stop.set()
        for worker in workers:
            worker.join(10)
        backend.close()
    # its own inference comes right after the one running and the one queued when it arrived
    assert order[:3] == ["a", "b", "quiet"], order


@pytest.fixture(scope="module")
def batchable_model(tmp_path_factory) -> Path:
    """A real ONNX graph with a dynamic batch dimension (none of the shared detectors has one: their exports fix
    the batch in reshapes): each sample's per-channel mean, so every output row belongs to one input."""
    from onnx import TensorProto, helper, save

    node = helper.make_node("ReduceMean", ["images"], ["means"], axes=[2, 3], keepdims=0)
    graph = helper.make_graph(
        [node],
        "per_sample_means",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("means", TensorProto.FLOAT, ["batch", 3])],
    )
    path = tmp_path_factory.mktemp("batch") / "means.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_batched_frames_of_several_streams_get_their_own_outputs(batchable_model: Path):
    """Frames that queue while the engine is busy run next as one batch; each stream gets its own frame's rows."""
    backend = open_backend("onnx", batchable_model, BackendOptions(threads=1))
    assert backend.accepts_batch
    release, batches = threading.Event(), []
    run_batch = backend.run_batch

    def held_first(tensors: list[np.ndarray]) -> list[list[np.ndarray]]:
        release.wait(60)  # the engine is busy with the first frame until the others have queued
        batches.append(len(tensors))
        return run_batch(tensors)

    backend.run_batch = held_first  # type: ignore[method-assign]
    scheduler = InferenceScheduler([backend], max_batch=4)
    base = np.arange(3, dtype=np.float32)[None, :, None, None]
    tensors = [np.full((1, 3, 32, 32), float(i), dtype=np.float32) + base for i in range(4)]
    results: dict[int, np.ndarray] = {}

    def submit(index: int) -> None:
        results[index] = scheduler.run(f"s{index}", tensors[index])[0][0]

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
    threads[0].start()
    wait_for(lambda: scheduler.busy_for() > 0, "the first frame to take the engine", timeout=30)
    for thread in threads[1:]:
        thread.start()
    wait_for(lambda: scheduler.waiting == 3, "three frames to queue", timeout=30)
    release.set()
    for thread in threads:
        thread.join(60)
    backend.close()
    assert batches == [1, 3]
    for index in range(4):
        np.testing.assert_allclose(results[index], [[index, index + 1, index + 2]])  # a batch of one, its own


def test_a_model_with_a_fixed_batch_runs_one_frame_at_a_time():
    backend = open_backend("onnx", YOLOX, BackendOptions(threads=1))
    try:
        assert not backend.accepts_batch  # its export fixes the batch inside the graph
        assert InferenceScheduler([backend], max_batch=8).max_batch == 1
    finally:
        backend.close()


def test_thread_budget_divides_the_cores_among_engines_and_lanes():
    one = plan_engine(requests=1, engines=1, cores=4)
    assert (one.threads, one.lanes) == (4, 1)
    four_on_two = plan_engine(requests=4, engines=1, cores=2)  # a lane each: none waits for a hand-off
    assert (four_on_two.threads, four_on_two.lanes) == (1, 4)
    eight_on_two = plan_engine(requests=8, engines=1, cores=2)  # two one-thread lanes per core at most
    assert (eight_on_two.threads, eight_on_two.lanes) == (1, 4)
    separate = plan_engine(requests=1, engines=4, cores=2)
    assert (separate.threads, separate.lanes) == (1, 1)
    configured = plan_engine(requests=4, engines=1, cores=4, threads=2)
    assert (configured.threads, configured.lanes) == (2, 2)


def test_a_file_gets_a_lane_per_core_and_a_camera_one_frame_at_a_time():
    """A file read to its end wants every frame: on a small CPU two one-thread inferences side by side beat one on
    two threads (BENCHMARKS.md), so its engine gets a lane per usable core and the stream that many inference
    threads; a live source runs its newest frame alone, on all the threads. A file given `threads:` equal to the
    cores runs on one lane: what the README tells a machine short of memory to do (each lane holds its own
    working memory)."""
    two_cores = plan_engine(requests=2, engines=1, cores=2)
    assert (two_cores.threads, two_cores.lanes) == (1, 2)
    cores = usable_cores()
    cases = {  # stream id -> (mode, configured threads, expected plan)
        "file": ("file", None, plan_engine(cores, 1, cores)),
        "live": ("live", None, plan_engine(1, 1, cores)),
        "pinned": ("file", cores, EnginePlan(cores, 1)),
    }
    for name, (mode, threads, plan) in cases.items():
        stream = StreamConfig(
            id=name, source=str(VTEST), model=str(YOLOX), backend="onnx", mode=mode, pace=False, threads=threads
        )
        manager = StreamManager(ServiceConfig(streams=[stream]))
        manager.start()
        try:
            pipeline = manager.pipelines[name]
            wait_for(lambda p=pipeline: p.stats.frames_processed >= 3, f"frames of the {name} stream")
            figures = describe_engine(manager.detectors.engines()[0])
            assert (figures.lanes, figures.threads) == (plan.lanes, plan.threads), name
            alive = [t.name for t in threading.enumerate() if t.name.startswith(f"{name}-infer") and t.is_alive()]
            assert len(alive) == plan.lanes, (name, alive)
        finally:
            manager.stop()


def test_a_lone_camera_moves_its_engine_to_one_thread_where_one_keeps_up(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    """A camera at 1 frame a second: even with no speed-up from its threads, one thread would take at most the
    budget's threads times an inference, far inside 0.7 of the frame interval, so the engine moves to one thread
    (2 threads cost 1.16x the CPU per frame of one at the same fps, BENCHMARKS.md). The new engine is loaded beside
    the old one and swapped in: the stream never stops, nothing is counted as a restart or an error, and the old
    engine is closed. A stream given `threads:` keeps them."""
    cores = usable_cores()
    if cores < 2:
        pytest.skip("one usable core: the budget already gives a lone camera's engine one thread")
    # judged sooner than a service judges (10 s, 16 inferences at the camera's 1 a second): the move is the matter
    monkeypatch.setattr(thread_rules, "FIRST_LOOK_S", 2.0)
    monkeypatch.setattr(thread_rules, "SETTLED_INFERENCES", 4)
    photo = str(MEDIA / "kite_and_cold.jpg")
    camera = StreamConfig(id="cam", source=photo, model=str(YOLOX), backend="onnx", mode="live", fps=1, loop=True)
    manager = StreamManager(ServiceConfig(streams=[camera]))
    pipeline = manager.pipelines["cam"]
    caplog.set_level("INFO", logger="edge.pipeline")
    manager.start()
    try:
        wait_for(lambda: pipeline.stats.frames_processed >= 1, "the camera's first result")
        first = describe_engine(manager.detectors.engines()[0])
        assert (first.threads, first.lanes) == (cores, 1)  # the budget's plan, as before
        on_one = wait_for(
            lambda: [e for e in manager.detectors.engines() if describe_engine(e).threads == 1],
            "the engine on one thread",
            timeout=FIRST_LOOK_S + SETTLED_INFERENCES + 120,
        )
        done = pipeline.stats.frames_processed
        wait_for(lambda: pipeline.stats.frames_processed >= done + 3, "results from the engine on one thread")
        wait_for(lambda: manager.detectors.engines() == on_one, "the engine on the budget's threads closed")
        assert on_one[0].closed is False and "person" in _labels(pipeline)
        assert (pipeline.stats.restarts, pipeline.stats.errors, pipeline.state) == (0, 0, "running")
        moved = [r.getMessage() for r in caplog.records if "its engine now runs on 1 thread" in r.getMessage()]
        assert len(moved) == 1, moved
        # the log says why in the figures the rule weighed: the budget's threads x an inference within 0.7 of the
        # camera's frame interval (no bound on the interval itself: a paced file catches up after a stalled read,
        # so a busy machine can deliver a few frames at once and read the rate higher than 1 a second)
        figures = re.search(r"\((\d+) ms an inference, a frame every (\d+) ms\)", moved[0])
        assert figures, moved
        inference_ms, interval_ms = (int(figures.group(i)) for i in (1, 2))
        assert cores * (inference_ms - 0.5) <= 0.7 * (interval_ms + 0.5), moved  # the figures are rounded to 1 ms
    finally:
        manager.stop()
    pinned = StreamManager(ServiceConfig(streams=[camera.model_copy(update={"threads": cores})]))
    assert pinned.pipelines["cam"].camera_threads is None


def test_a_cameras_threads_follow_what_keeps_up_and_do_not_flip_back_and_forth():
    """One thread where the budget's threads, with no speed-up at all, still fit 0.7 of the frame interval; the
    plan's threads again where one thread takes over 0.9 of it; in between, as it is (a band, so a passing load does
    not flip it)."""
    assert camera_threads(planned=2, threads=2, inference_s=0.026, interval_s=0.100) == 1  # 52 ms at most: fits 70
    assert camera_threads(planned=2, threads=2, inference_s=0.040, interval_s=0.100) == 2  # 80 ms > 70: too close
    assert camera_threads(planned=4, threads=4, inference_s=0.030, interval_s=0.200) == 1  # 4 cores, 5 fps
    assert camera_threads(planned=4, threads=4, inference_s=0.050, interval_s=0.200) == 4  # 200 ms > 140
    assert camera_threads(planned=2, threads=1, inference_s=0.085, interval_s=0.100) == 1  # still keeps up
    assert camera_threads(planned=2, threads=1, inference_s=0.095, interval_s=0.100) == 2  # no longer
    assert camera_threads(planned=1, threads=1, inference_s=0.500, interval_s=0.100) == 1  # nothing to go back to
    engine_threads: dict[str, int | None] = {"threads": 2}
    fit = CameraThreads(lambda: 2, lambda buffers, threads: None, lambda d: engine_threads["threads"])  # type: ignore[arg-type,return-value]
    detector = object()
    assert fit.wanted(detector, 0.02, SETTLED_INFERENCES, 10.0, now=100.0) == 0  # first look: the rate is read first
    assert fit.wanted(detector, 0.02, SETTLED_INFERENCES - 1, 10.0, now=100.0 + FIRST_LOOK_S) == 0  # not settled
    assert fit.wanted(detector, 0.02, SETTLED_INFERENCES, 10.0, now=100.0 + FIRST_LOOK_S) == 1
    assert fit.judged and fit.busy  # at once: a benchmark waiting for a settled camera does not measure the move
    fit.changed(now=200.0)
    assert not fit.busy and fit.wanted(detector, 0.02, SETTLED_INFERENCES, 10.0, now=230.0) == 0  # within a minute
    engine_threads["threads"] = None  # another stream came to share the engine: it is not this camera's to change
    assert fit.wanted(detector, 0.02, SETTLED_INFERENCES, 10.0, now=1000.0) == 0


def test_only_a_cpu_engine_that_one_camera_has_to_itself_is_given_other_threads():
    """An accelerator's engine has no CPU threads to save (and a second load of an Edge TPU or Hailo model fails
    while the first holds the device); an engine another stream shares is not one camera's to change."""
    pool = DetectorPool()
    handle = pool.acquire("cam", "onnx", YOLOX, BackendOptions(threads=2))
    try:
        assert lone_engine_threads(SimpleNamespace(backend=handle)) == 2  # type: ignore[arg-type]
        for device in ("CUDAExecutionProvider:0", "TensorrtExecutionProvider:0"):
            on_gpu = dataclasses.replace(handle, device=device)
            assert lone_engine_threads(SimpleNamespace(backend=on_gpu)) is None, device  # type: ignore[arg-type]
        on_tpu = dataclasses.replace(handle, key="edgetpu", device="edgetpu:usb")
        assert lone_engine_threads(SimpleNamespace(backend=on_tpu)) is None  # type: ignore[arg-type]
        second = pool.acquire("door", "onnx", YOLOX, BackendOptions(threads=2))
        assert lone_engine_threads(SimpleNamespace(backend=handle)) is None  # type: ignore[arg-type]
        second.close()
    finally:
        handle.close()


def test_container_cpu_quota_caps_the_cores(tmp_path: Path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_engines_default_to_every_usable_core():
    """LiteRT's own default is one thread; ONNX Runtime's is every core per session. Both now get the budget (a
    loop running frames back to back starts on one and measures the budget's: tests/test_loop_threads.py)."""
    detector = load_detector(DetectorConfig(str(YOLOX), backend="onnx", back_to_back=False))
    try:
        options = detector.backend.session.get_session_options()  # type: ignore[attr-defined]
        assert options.intra_op_num_threads == usable_cores()
    finally:
        detector.close()


def test_a_shared_litert_engine_gets_an_interpreter_per_lane():
    """An interpreter is not thread-safe: two lanes of a shared LiteRT engine are two interpreters on one file."""
    pool = DetectorPool()
    path = MODELS / "tflite/ssd_mobilenet_v2_coco_quant_postprocess.tflite"
    first = pool.acquire("a", "tflite", path, BackendOptions(threads=1), lanes=2)
    second = pool.acquire("b", "tflite", path, BackendOptions(threads=1), lanes=2)
    try:
        assert first.shared is second.shared
        assert first.shared is not None and first.shared.scheduler.lanes == 2 and len(first.shared.copies) == 1
    finally:
        first.close()
        second.close()
    assert pool.engines() == []


def _run_at_once(handles: list) -> list[list[np.ndarray]]:
    """One inference on each handle, all started together: each lane busy at once."""
    tensor = np.zeros(handles[0].inputs[0].shape, dtype=handles[0].inputs[0].dtype)
    results: list[list[np.ndarray]] = []
    workers = [threading.Thread(target=lambda h=h: results.append(h.run(tensor))) for h in handles]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    return results


def test_a_litert_engine_loads_only_the_lanes_its_memory_holds(caplog: pytest.LogCaptureFixture):
    """Each LiteRT lane is another interpreter holding the model (+26 to +33 MiB): where the memory left would fall
    under the reserve, the engine stops adding lanes, says so with what to do, and its streams share the lanes
    it has. Readings are handed in one per copy, as the machine's would come: plenty, then none."""
    path = MODELS / "tflite/ssd_mobilenet_v2_coco_quant_postprocess.tflite"
    plenty = 8 * 2**30
    cases = {"plenty": ([plenty] * 3, 3), "one more copy": ([plenty, 0], 2), "none": ([RESERVE_BYTES], 1)}
    for name, (readings, lanes) in cases.items():
        left = iter(readings)
        pool = DetectorPool(memory=lambda left=left: next(left))
        caplog.clear()
        handles = [pool.acquire(f"s{i}", "tflite", path, BackendOptions(threads=1), lanes=3) for i in range(3)]
        try:
            shared = handles[0].shared
            assert shared is not None and shared.scheduler.lanes == lanes, name
            assert len(shared.copies) == lanes - 1, name
            assert describe_engine(shared).threads == 1, name  # the user's threads are kept
            warnings = [r.getMessage() for r in caplog.records if "lanes loaded" in r.getMessage()]
            if lanes == 3:
                assert warnings == [], name
            else:
                assert len(warnings) == 1 and f"{lanes} of 3 lanes loaded" in warnings[0], (name, warnings)
                assert "free memory" in warnings[0] and "threads:" in warnings[0]
            outputs = _run_at_once(handles)
            assert len(outputs) == 3 and all(len(o) == 4 for o in outputs), name  # SSD: 4 outputs each
            assert describe_engine(shared).lanes == lanes
        finally:
            for handle in handles:
                handle.close()
        assert pool.engines() == []


@pytest.mark.process
@pytest.mark.parametrize(
    ("engine", "model"), [("onnx", "onnx/yolox_nano.onnx"), ("openvino", "openvino/yolox_nano.xml")]
)
def test_a_shared_engine_runs_only_the_lanes_its_memory_holds(engine: str, model: str, caplog):
    """ONNX Runtime and OpenVINO share one loaded model between lanes, and each lane running at once holds one
    more inference's working memory: with the reserve alone left after the model's first inferences, the engine
    keeps one lane, says so with what to do, and its three streams take turns on it; with plenty, three lanes.
    Where the threads are the thread budget's (not the user's), the lane kept is given the three lanes' threads, never
    more than the cores."""
    cases = {"plenty": (8 * 2**30, False, 3, 1), "reserve": (RESERVE_BYTES, False, 1, 1)}
    cases["reserve, planned threads"] = (RESERVE_BYTES, True, 1, min(3, usable_cores()))  # never more than cores
    for name, (available, planned, lanes, threads) in cases.items():
        pool = DetectorPool(memory=lambda available=available: available)
        caplog.clear()
        options = BackendOptions(threads=1)
        handles = [pool.acquire(f"s{i}", engine, MODELS / model, options, 10.0, 3, planned) for i in range(3)]
        try:
            shared = handles[0].shared
            assert shared is not None and describe_engine(shared).lanes == lanes, name
            assert describe_engine(shared).threads == threads, name
            if engine == "onnx":  # the session itself, not only our figure
                assert shared.backend.session.get_session_options().intra_op_num_threads == threads, name
            warnings = [r.getMessage() for r in caplog.records if "lanes loaded" in r.getMessage()]
            if lanes == 3:
                assert warnings == [], name
            else:
                assert len(warnings) == 1 and "1 of 3 lanes loaded" in warnings[0], warnings
                assert "another lane would take about" in warnings[0] and f"of {threads} thread(s) each" in warnings[0]
                assert ("others' threads" if planned else "threads: equal to the cores") in warnings[0]
            outputs = _run_at_once(handles)
            assert len(outputs) == 3 and all(o[0].shape == (1, 3549, 85) for o in outputs), name
            assert np.array_equal(outputs[0][0], outputs[2][0])  # a turn on one lane gives the same answer
        finally:
            for handle in handles:
                handle.close()
        assert pool.engines() == []


def test_shared_lanes_are_counted_by_one_inferences_memory_over_the_reserve():
    mib = 2**20
    assert shared_lanes_fitting(RESERVE_BYTES + 50 * mib, 20 * mib, 4) == 3  # the first and two more of 20 MiB
    assert shared_lanes_fitting(RESERVE_BYTES + 500 * mib, 20 * mib, 4) == 4  # never more than wanted
    assert shared_lanes_fitting(RESERVE_BYTES - mib, 20 * mib, 4) == 1  # the first lane has already run
    assert shared_lanes_fitting(None, 20 * mib, 4) == 4  # an unknown figure holds no lane back
    assert shared_lanes_fitting(RESERVE_BYTES, 0, 4) == 4  # nor a first inference that added nothing


def test_a_file_whose_memory_holds_one_lane_runs_it_on_the_threads_the_budget_planned():
    """A file gets a lane per core; with only the reserve left, its engine keeps one lane, on every planned thread
    where the stream set no `threads:`, and on the user's one thread where it did (the wiring from the stream)."""
    cores = usable_cores()
    for threads, expected in ((None, cores), (1, 1)):
        stream = StreamConfig(
            id="walk", source=str(VTEST), model=str(YOLOX), backend="onnx", mode="file", pace=False, threads=threads
        )
        manager = StreamManager(ServiceConfig(streams=[stream]))
        manager.detectors = DetectorPool(memory=lambda: RESERVE_BYTES)
        manager.start()
        try:
            pipeline = manager.pipelines["walk"]
            wait_for(lambda p=pipeline: p.stats.frames_processed >= 10, "frames on the one lane")
            figures = describe_engine(manager.detectors.engines()[0])
            assert (figures.lanes, figures.threads) == (1, expected), threads
        finally:
            manager.stop()


def test_litert_lanes_held_back_hand_their_threads_to_the_lanes_kept(caplog: pytest.LogCaptureFixture):
    """Four lanes of one thread planned, memory for two copies: the engine is loaded again as two lanes of two
    threads (the old copies closed first), so the cores the thread budget gave it stay in use."""
    path = MODELS / "tflite/ssd_mobilenet_v2_coco_quant_postprocess.tflite"
    opened: list[weakref.ref[Backend]] = []

    def opener(engine: str, model: Path, options: BackendOptions) -> Backend:
        backend = open_backend(engine, model, options)
        opened.append(weakref.ref(backend))
        return backend

    left = iter([8 * 2**30, 0])
    pool = DetectorPool(memory=lambda: next(left), opener=opener)
    handles = [pool.acquire(f"s{i}", "tflite", path, BackendOptions(threads=1), 10.0, 4, True) for i in range(4)]
    try:
        shared = handles[0].shared
        assert shared is not None and describe_engine(shared).lanes == 2 and describe_engine(shared).threads == 2
        assert len(opened) == 4  # two copies of one thread, then two of two
        assert [ref() for ref in opened[:2]] == [None, None]  # the first load's interpreters freed
        assert "2 of 4 lanes loaded" in caplog.text and "of 2 thread(s) each" in caplog.text
        outputs = _run_at_once(handles)
        assert len(outputs) == 4 and all(len(o) == 4 for o in outputs)
    finally:
        for handle in handles:
            handle.close()


def _cgroup(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text + "\n")


def test_memory_left_is_the_machines_capped_by_the_containers_limit(tmp_path: Path):
    """MemAvailable, capped by the tightest memory cgroup over the process (its own or one above it), page cache
    the kernel reclaims first not counted as used; cgroup v2 (Pi OS, JetPack 6) and v1 (JetPack 5) names."""
    mib = 2**20
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        1000000 kB\nMemFree:          100000 kB\nMemAvailable:     400000 kB\n")
    assert meminfo_available(meminfo) == 400000 * 1024
    assert meminfo_available(tmp_path / "absent") is None

    v2, proc = tmp_path / "v2", tmp_path / "cgroup"
    proc.write_text("0::/system.slice/edge.service\n")
    service = v2 / "system.slice/edge.service"
    _cgroup(v2 / "system.slice", {"memory.max": "max", "memory.current": str(900 * mib)})
    _cgroup(service, {"memory.max": str(256 * mib), "memory.current": str(220 * mib)})
    (service / "memory.stat").write_text(f"anon {180 * mib}\ninactive_file {20 * mib}\nactive_file {20 * mib}\n")
    assert cgroup_memory_headroom(proc, v2) == 56 * mib  # 256 - (220 - 20 reclaimable first)
    _cgroup(v2 / "system.slice", {"memory.max": str(950 * mib)})  # the slice above it is tighter
    assert cgroup_memory_headroom(proc, v2) == 50 * mib

    v1 = tmp_path / "v1"
    proc.write_text("5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n")
    _cgroup(v1 / "memory", {"memory.limit_in_bytes": "9223372036854771712", "memory.usage_in_bytes": "1"})
    _cgroup(
        v1 / "memory/docker/abc", {"memory.limit_in_bytes": str(512 * mib), "memory.usage_in_bytes": str(300 * mib)}
    )
    (v1 / "memory/docker/abc/memory.stat").write_text(f"cache {40 * mib}\ntotal_inactive_file {12 * mib}\n")
    assert cgroup_memory_headroom(proc, v1) == 224 * mib
    proc.write_text("5:memory:/docker/other\n0::/\n")  # inside the container: its own cgroup is the mount's top
    assert cgroup_memory_headroom(proc, v1) is None  # the top here is unlimited
    _cgroup(v1 / "memory", {"memory.limit_in_bytes": str(128 * mib), "memory.usage_in_bytes": str(100 * mib)})
    assert cgroup_memory_headroom(proc, v1) == 28 * mib

    assert cgroup_memory_headroom(tmp_path / "absent", tmp_path / "none") is None
    here = available_memory()
    # never more than the machine has; the two reads are moments apart, and other processes (the suite's other
    # workers) allocate and free between them
    assert here is not None and 0 < here <= (meminfo_available() or here) + 256 * mib


@pytest.mark.parametrize("device", ["AUTO", "CPU"])
def test_a_shared_openvino_engine_runs_its_lanes_as_parallel_cpu_streams_with_the_budgets_threads(device):
    """With the LATENCY hint alone OpenVINO compiles one CPU stream, and lanes would queue on it; on AUTO the
    thread count used to be dropped. Read back from the compiled model: a stream per lane, threads x lanes."""
    pool = DetectorPool()
    handle = pool.acquire("a", "openvino", MODELS / "openvino/yolox_nano.xml", BackendOptions(device, 1), lanes=2)
    try:
        assert handle.shared is not None
        compiled = handle.shared.backend.compiled  # type: ignore[attr-defined]
        cpu = compiled.get_property("DEVICE_PROPERTIES")["CPU"] if device == "AUTO" else None
        read = cpu.__getitem__ if cpu is not None else compiled.get_property
        assert int(read("NUM_STREAMS")) == 2 and int(read("INFERENCE_NUM_THREADS")) == 2
        assert compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS") == 2
    finally:
        handle.close()


@pytest.mark.parametrize("device", ["AUTO", "CPU"])
def test_openvino_precision_reaches_the_cpu_also_on_auto(device):
    """ARM CPUs infer in f16 by default, and a score at the threshold comes or goes (PLATFORMS.md); precision=f32
    gives x86's scores there. AUTO refuses INFERENCE_PRECISION_HINT for itself, so it must go to the CPU."""
    backend = open_backend(
        "openvino", MODELS / "openvino/yolox_nano.xml", BackendOptions(device, 1, engine_options={"precision": "f32"})
    )
    compiled = backend.compiled  # type: ignore[attr-defined]
    read = compiled.get_property("DEVICE_PROPERTIES")["CPU"].__getitem__ if device == "AUTO" else compiled.get_property
    assert str(read("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    with pytest.raises(BackendError, match=r"^engine option openvino.precision: .*'f8'.*allowed: "):
        open_backend(
            "openvino",
            MODELS / "openvino/yolox_nano.xml",
            BackendOptions(device, 1, engine_options={"precision": "f8"}),
        )


def _session_entry(backend: Backend, key: str) -> str | None:
    """A config entry of the ONNX Runtime session as the engine itself reads it back; None where never set."""
    try:
        return backend.session.get_session_options().get_session_config_entry(key)  # type: ignore[attr-defined]
    except Exception as exc:  # ONNX Runtime raises its own type for an entry never set
        assert "does not have configuration" in str(exc)
        return None


def test_onnx_runtime_threads_never_spin_unless_asked():
    """A spinning ONNX Runtime thread keeps its core busy while it waits: a camera at 10 fps paid 3.3x the CPU per
    frame, and a back-to-back loop twice the CPU for less fps as soon as anything else ran (issue 62). So nothing
    spins by default, in the service or in a detect loop (which measures its threads instead); the engine option
    overrides it. Read back from the session's own options."""
    allow, stop = "session.intra_op.allow_spinning", "session.force_spinning_stop"
    default = open_backend("onnx", YOLOX, BackendOptions("cpu", 2))
    always, runs = (
        open_backend("onnx", YOLOX, BackendOptions("cpu", 2, engine_options={"spinning": asked}))
        for asked in ("on", "runs")
    )
    try:
        assert (_session_entry(default, allow), _session_entry(default, stop)) == ("0", None)
        assert default.session.get_session_options().intra_op_num_threads == 2  # type: ignore[attr-defined]
        assert (_session_entry(always, allow), _session_entry(always, stop)) == (None, None)  # ORT's default: it spins
        assert (_session_entry(runs, allow), _session_entry(runs, stop)) == (None, "1")
    finally:
        for backend in (default, always, runs):
            backend.close()


def test_a_detect_loop_and_a_served_stream_never_spin():
    """`load_detector`'s default is a caller running frames back to back (`edge detect`, a library loop); a stream
    of the service (and the engine timings `auto` and `edge bench` make, which stand for it) is not. Neither
    spins; the loop's threads are measured (tests/test_loop_threads.py), the stream's are the budget's."""
    loop = load_detector(DetectorConfig(str(YOLOX), backend="onnx", threads=2))
    stream = StreamConfig(id="cam", source="rtsp://127.0.0.1:1/x", model=str(YOLOX), backend="onnx", threads=2)
    served = load_detector(detector_config(stream))
    try:
        for detector in (loop, served):
            assert _session_entry(detector.backend, "session.intra_op.allow_spinning") == "0"
        assert loop.loop_threads is None and served.loop_threads is None  # threads given: nothing to measure
    finally:
        loop.close()
        served.close()


def test_a_hung_shared_engine_is_replaced_for_the_streams_that_reload():
    """An engine whose inference never returns is left to its thread; the next stream to load gets a fresh one,
    and the hung one is closed once its call finally returns and its last stream lets go."""
    unblock, closed, opened = threading.Event(), [], []

    def opener(engine: str, path: Path, options: BackendOptions):
        backend = open_backend(engine, path, options)
        if not opened:  # the first engine wedges on its first run, like an unplugged USB accelerator
            run = backend.run

            def hanging_run(tensor: np.ndarray) -> list[np.ndarray]:
                unblock.wait(120)
                return run(tensor)

            backend.run = hanging_run  # type: ignore[method-assign]
            close = backend.close
            backend.close = lambda: (closed.append("first"), close())  # type: ignore[method-assign]
        opened.append(backend)
        return backend

    pool = DetectorPool(opener=opener)
    options = BackendOptions(threads=1)
    first = pool.acquire("a", "onnx", YOLOX, options, stuck_after_s=0.5)
    tensor = np.zeros(first.inputs[0].shape, dtype=np.float32)
    stuck = threading.Thread(target=first.run, args=(tensor,), daemon=True)
    stuck.start()
    assert first.shared is not None
    wait_for(lambda: first.shared.scheduler.busy_for() > 0.5, "the first engine to hang")
    second = pool.acquire("a", "onnx", YOLOX, options, stuck_after_s=0.5)
    try:
        assert second.shared is not first.shared and describe_engine(first.shared).hung
        assert second.run(tensor)[0].shape == (1, 3549, 85)  # the fresh engine works
        first.close()  # the stream let go of the hung one while its inference is still running
        assert closed == []
        unblock.set()
        stuck.join(60)
        assert closed == ["first"]  # freed by its own thread, once its call returned
    finally:
        second.close()
    assert pool.engines() == []


def test_the_api_and_metrics_report_each_shared_engine():
    from tests.inprocess import SSD_ONNX, app_client, service_config, wait_ready

    config = service_config(backend="onnx", model=SSD_ONNX)
    streams = [config.streams[0], config.streams[0].model_copy(update={"id": "second"})]
    with app_client(config.model_copy(update={"streams": streams})) as client:
        wait_ready(client)
        wait_for(lambda: client.get("/api/v1/stats").json()["detectors"][0]["frames"] >= 10, "frames on the engine")
        detectors = client.get("/api/v1/stats").json()["detectors"]
        metrics = client.get("/metrics").text
    assert len(detectors) == 1 and detectors[0]["streams"] == ["main", "second"]
    assert detectors[0]["backend"] == "onnx" and detectors[0]["inference_ms_p50"] > 0
    assert 'edge_detector_streams{backend="onnx"' in metrics and "edge_detector_queue_wait_ms" in metrics
