"""Motion regions (models/regions.py, edge/stream/motion.py), and a stream's `regions:` (tiles or motion) through
the service's pipeline.

Independent answers: boxes the test placed (every one inside a region), a moving square drawn by the test (the gate
says where it is), and supervision's InferenceSlicer on the same frames for what a served stream finds."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.mosaic import slicer_detections, write_mosaic
from edge_inference.edge.config import ConfigError, MotionConfig, ServiceConfig, StreamConfig
from edge_inference.edge.config.loading import load_config
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.motion import MotionGate
from edge_inference.models.detection import BoxXYXY, Detection
from edge_inference.models.regions import MotionRegions, cluster_regions, region_side, unseen_since
from edge_inference.models.tiles import Region
from tests.conftest import MODELS

YOLOX = MODELS / "onnx" / "yolox_nano.onnx"


@st.composite
def boxes_in_frames(draw: st.DrawFn) -> tuple[tuple[int, int], list[tuple[float, float, float, float]]]:
    width, height = draw(st.integers(800, 4000)), draw(st.integers(600, 2200))
    boxes = []
    for _ in range(draw(st.integers(1, 30))):
        w, h = draw(st.integers(4, 300)), draw(st.integers(4, 500))
        x, y = draw(st.integers(0, width - w)), draw(st.integers(0, height - h))
        boxes.append((float(x), float(y), float(x + w), float(y + h)))
    return (width, height), boxes


@settings(max_examples=150)
@given(boxes_in_frames())
def test_every_candidate_lies_whole_in_a_region_inside_the_frame(case):
    frame, boxes = case
    side = region_side((416, 416))
    regions = cluster_regions(boxes, frame, side)
    assert 1 <= len(regions) <= len(boxes)
    for r in regions:
        assert r.x >= 0 and r.y >= 0 and r.x + r.width <= frame[0] and r.y + r.height <= frame[1]
        assert r.width == r.height or r.height == frame[1] or r.width == frame[0]  # squares, cut to the frame
        assert min(r.width, r.height) >= min(side, *frame)
    for box in boxes:
        assert any(r.x <= box[0] and r.y <= box[1] and box[2] <= r.x + r.width and box[3] <= r.y + r.height
                   for r in regions), box  # fmt: skip


def test_nearby_movers_share_one_region_and_far_ones_have_their_own():
    side = region_side((416, 416))
    walking_together = [(1000.0, 1000.0, 1030.0, 1080.0), (1100.0, 1010.0, 1128.0, 1085.0)]
    far_off = [(3500.0, 200.0, 3520.0, 250.0)]
    regions = cluster_regions([*walking_together, *far_off], (3840, 2160), side)
    assert len(regions) == 2 and all(r.width == side for r in regions)


def test_the_plan_runs_the_whole_frame_first_and_now_and_then_and_regions_between():
    planner = MotionRegions(full_frame_s=5)
    moved = [(2000.0, 1000.0, 2020.0, 1050.0)]
    frame, model = (3840, 2160), (416, 416)
    assert planner.plan(frame, moved, [], 0.0, model) is None  # first: the whole frame, as tiles
    regions = planner.plan(frame, moved, [], 0.1, model)
    assert regions is not None and len(regions) == 1 and not regions[0].whole
    tracked_only = planner.plan(frame, [], [(100.0, 100.0, 130.0, 180.0)], 0.2, model)
    assert tracked_only is not None and tracked_only[0].x <= 100 and tracked_only[0].y <= 100
    assert planner.plan(frame, moved, [], 5.3, model) is None  # full_frame_s later: the whole frame again
    assert planner.plan((640, 480), moved, [], 5.4, model) == (Region(0, 0, 640, 480, whole=True),)


def test_a_person_far_off_walking_is_motion_with_its_place_where_the_whole_frame_gate_sees_nothing():
    """On a 4K frame, a person 20x50 px moves: a thousandth of the frame, under the gate's share; the regions' gate
    says it moved, and where."""
    rng = np.random.default_rng(0)
    background = rng.integers(60, 200, (2160, 3840, 3), dtype=np.uint8)
    background = np.repeat(np.repeat(background[::16, ::16], 16, axis=0), 16, axis=1)  # a scene of flat patches
    plain, regional = MotionGate(MotionConfig()), MotionGate(MotionConfig(), boxes=True)
    verdicts = []
    for step in range(6):
        frame = background.copy()
        x = 2000 + 12 * step
        frame[1000:1050, x : x + 20] = 20  # a dark figure walking right
        plain_verdict, verdict = plain.check(frame, step * 0.1), regional.check(frame, step * 0.1)
        verdicts.append((plain_verdict, verdict))
    for plain_verdict, verdict in verdicts[1:]:
        assert plain_verdict.reason in ("still", "idle", "recheck") or not plain_verdict.run
        assert verdict.run and verdict.reason == "motion"
        assert any(b[0] <= 2100 and b[2] >= 2012 and b[1] <= 1050 and b[3] >= 1000 for b in verdict.boxes)
        assert all(b[2] - b[0] < 300 and b[3] - b[1] < 300 for b in verdict.boxes)  # where it is, not everywhere


def test_objects_no_region_held_whole_keep_their_last_box_without_their_track_id():
    seen = Detection(0, "person", 0.8, BoxXYXY(100, 100, 130, 180), track_id=4)
    unseen = Detection(0, "person", 0.7, BoxXYXY(3000, 100, 3030, 180), track_id=5)
    cut = Detection(2, "car", 0.7, BoxXYXY(600, 100, 700, 160), track_id=6)  # across the region's edge
    carried = unseen_since([seen, unseen, cut], [Region(0, 0, 640, 640)])
    assert [(d.box, d.track_id) for d in carried] == [(unseen.box, None), (cut.box, None)]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{mode: tiles, tiles: 3x0}", "streams.a.regions.tiles: tiles: 3x0: give at least one column"),
        ("{mode: tiles, tiles: 0x2}", "streams.a.regions.tiles: tiles '2': give auto, or columns x rows"),
        ("{mode: tiles, overlap: 0}", "streams.a.regions.overlap"),
        ("tilez", "streams.a.regions.mode"),
    ],
)
def test_a_bad_regions_block_is_one_line_naming_where(tmp_path, value, said):
    (tmp_path / "streams.yaml").write_text(f"streams:\n  a:\n    source: x.mp4\n    regions: {value}\n")
    with pytest.raises(ConfigError, match=re.escape(said)) as raised:
        load_config(tmp_path / "streams.yaml")
    assert "\n" not in str(raised.value).strip(), raised.value


def test_regions_read_as_one_word():
    stream = StreamConfig.model_validate({"id": "a", "source": "x.mp4", "regions": "tiles"})
    assert stream.regions.mode == "tiles" and stream.regions.tiles == "auto"
    assert StreamConfig.model_validate({"id": "a", "source": "x.mp4", "regions": "none"}).regions.mode == "full"


@pytest.fixture(scope="module")
def sparse_clip(tmp_path_factory):
    """1920x1080, six vtest scenes, two of them walking: people a few dozen pixels tall in a few places."""
    path = tmp_path_factory.mktemp("regions") / "sparse.avi"
    write_mosaic(path, 10, size=(1920, 1080), scenes=6, walking=2)
    return path


def _served(clip, mode):
    stream = StreamConfig(
        id="cam", source=str(clip), model=str(YOLOX), backend="onnx", mode="file", pace=False, regions=mode
    )
    manager = StreamManager(ServiceConfig(streams=[stream]))
    pipeline = manager.pipelines["cam"]
    results = {}
    pipeline.add_listener(lambda result: results.__setitem__(result.index, result))
    manager.start()
    try:
        deadline = time.monotonic() + 600
        while pipeline.state != "ended":
            assert time.monotonic() < deadline, pipeline.state
            time.sleep(0.05)
        return results, pipeline.stats.snapshot()
    finally:
        manager.stop()


def test_a_served_stream_on_tiles_and_on_motion_regions_finds_what_an_independent_tiler_finds(sparse_clip):
    """The stream's results are in the frame's pixels for every consumer; tiles find at least 0.8 of what
    supervision's InferenceSlicer finds on the last frame, motion regions as much with fewer inferences a frame,
    and the stats say how many inferences a frame cost."""
    import cv2

    capture = cv2.VideoCapture(str(sparse_clip))
    frames = [capture.read()[1] for _ in range(10)]
    capture.release()
    detector = load_detector(DetectorConfig(str(YOLOX), backend="onnx"))
    try:
        answer = slicer_detections(detector, frames[-1], (640, 640), (128, 128))
    finally:
        detector.close()
    tiled, tiled_stats = _served(sparse_clip, "tiles")
    moving, moving_stats = _served(sparse_clip, "motion")
    assert len(answer) > 10
    assert all(len(r.regions) == tiled_stats.inferences_per_frame for r in tiled.values())
    assert tiled_stats.inferences_per_frame > 1 and moving_stats.inferences < tiled_stats.inferences
    for results in (tiled, moving):
        last = results[max(results)]
        assert last.width == 1920 and all(d.box.x2 <= 1920 and d.box.y2 <= 1080 for d in last.detections)
        found = sum(any(d.class_id == a.class_id and d.box.iou(a.box) >= 0.5 for d in last.detections) for a in answer)
        assert found >= 0.8 * len(answer), (found, len(answer))


def test_the_stats_say_inferences_a_frame_and_a_snapshot_draws_the_regions_on_request(sparse_clip):
    """`/api/v1/stats` beside CPU per frame: the inferences a frame costs; `snapshot.jpg?regions=true` draws the
    tiles the frame ran as (light blue lines along their edges), without it the same frame has none."""
    import cv2

    from tests.inprocess import app_client, service_config, wait_ready

    config = service_config(source=str(sparse_clip), model=str(YOLOX), backend="onnx", regions="tiles")
    with app_client(config) as client:
        wait_ready(client)
        deadline = time.monotonic() + 300
        while not (figures := client.get("/api/v1/stats").json()["streams"]["main"])["inferences"]:
            assert time.monotonic() < deadline, figures
            time.sleep(0.1)
        assert figures["inferences_per_frame"] > 1 and figures["inferences"] >= figures["inferences_per_frame"]
        pictures = {}
        for drawn in (False, True):
            answer = client.get(f"/api/v1/streams/main/snapshot.jpg?boxes=false&regions={str(drawn).lower()}")
            assert answer.status_code == 200
            pictures[drawn] = cv2.imdecode(np.frombuffer(answer.content, np.uint8), cv2.IMREAD_COLOR)
    blue = [(p[..., 0].astype(int) - p[..., 2].astype(int) > 120).sum() for p in (pictures[False], pictures[True])]
    assert blue[1] > blue[0] + 2000, blue  # the tiles' edges: thousands of light blue pixels more


def test_serve_check_says_a_camera_far_above_the_models_input_loses_its_small_people(tmp_path):
    import cv2

    from edge_inference.edge.runtime.check import check_service
    from edge_inference.edge.settings import get_settings

    big = tmp_path / "gate.jpg"
    cv2.imwrite(str(big), np.full((2160, 3840, 3), 114, np.uint8))
    said = {}
    for mode in ("full", "motion"):
        stream = {"id": "gate", "source": str(big), "model": str(YOLOX), "backend": "onnx", "regions": mode}
        findings = check_service(ServiceConfig.model_validate({"streams": [stream]}), get_settings())
        said[mode] = [f for f in findings if f.level == "warning" and "will be missed" in f.text]
    assert len(said["full"]) == 1 and not said["motion"]
    assert "people under about 92 px tall will be missed; consider `regions: motion`" in said["full"][0].text
