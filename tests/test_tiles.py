"""Small objects in big frames: tiles at the model's scale, merged back (models/tiles.py, Detector.prepare/decode).

The independent answers: each scene's own detections (a frame of fifteen real vtest scenes on a 4K canvas, where
the whole frame letterboxed finds almost nothing), supervision's `InferenceSlicer` run with the same model on the
same frame, and, for the merge's geometry, objects placed by the test and seen by an exact detector."""

from __future__ import annotations

import itertools
from pathlib import Path

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.mosaic import GREY, SCENE, scene_places, slicer_detections, vtest_scenes
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.models.detection import BoxXYXY, Detection
from edge_inference.models.tiles import (
    MAX_TILES,
    Region,
    RegionBoxes,
    Tiling,
    TilingError,
    merge_regions,
    parse_tiles,
    tile_layout,
)
from tests.conftest import MODELS, VTEST
from tests.helpers import run_edge

YOLOX = MODELS / "onnx" / "yolox_nano.onnx"


# -- the merge's geometry, against objects the test placed ------------------------------------------------------
def _seen_by(region: Region, objects: list[tuple[int, BoxXYXY]]) -> RegionBoxes:
    """What an exact detector reports in a region: each object's visible part, cut where the region cuts it (a
    sliver under a fifth of the object is not recognised)."""
    boxes, classes = [], []
    for class_id, box in objects:
        x1, y1 = max(box.x1, region.x), max(box.y1, region.y)
        x2, y2 = min(box.x2, region.x + region.width), min(box.y2, region.y + region.height)
        if x2 <= x1 or y2 <= y1 or (x2 - x1) * (y2 - y1) < 0.2 * box.area:
            continue
        boxes.append([x1, y1, x2, y2])
        classes.append(class_id)
    count = len(boxes)
    scores = np.linspace(0.9, 0.5, count, dtype=np.float32) if count else np.empty(0, np.float32)
    return RegionBoxes(region, np.array(boxes, np.float32).reshape(-1, 4), scores, np.array(classes, np.int64))


@st.composite
def scenes(draw: st.DrawFn) -> tuple[tuple[int, int], Tiling, list[tuple[int, BoxXYXY]]]:
    """A frame, a tiling of it, and objects apart from each other, each no wider or taller than the tiles' overlap
    (so each lies whole in some tile); some placed on the seams on purpose."""
    width, height = draw(st.integers(700, 4000)), draw(st.integers(500, 2200))
    cols, rows = draw(st.integers(2, 6)), draw(st.integers(1, 4))
    tiling = Tiling((cols, rows), draw(st.sampled_from([0.15, 0.2, 0.3])), full_frame=False)
    layout = tile_layout(width, height, 416, 416, tiling)
    seam_x = sorted({r.x for r in layout.regions} | {r.x + r.width for r in layout.regions})
    seam_y = sorted({r.y for r in layout.regions} | {r.y + r.height for r in layout.regions})
    size = int(min(layout.tile) * tiling.overlap) - 4
    objects: list[tuple[int, BoxXYXY]] = []
    for _ in range(draw(st.integers(1, 12))):
        w, h = draw(st.integers(8, max(8, size))), draw(st.integers(8, max(8, size)))
        on_seam = draw(st.booleans())
        cx = draw(st.sampled_from(seam_x)) if on_seam else draw(st.integers(0, width))
        cy = draw(st.sampled_from(seam_y)) if on_seam else draw(st.integers(0, height))
        x1, y1 = min(max(0, cx - w // 2), width - w), min(max(0, cy - h // 2), height - h)
        box = BoxXYXY(x1, y1, x1 + w, y1 + h)
        if all(box.iou(other) == 0 and _apart(box, other) for _, other in objects):
            objects.append((draw(st.integers(0, 2)), box))
    return (width, height), tiling, objects


def _apart(a: BoxXYXY, b: BoxXYXY) -> bool:
    """Not touching: two objects side by side on one seam are two objects."""
    return a.x2 + 2 < b.x1 or b.x2 + 2 < a.x1 or a.y2 + 2 < b.y1 or b.y2 + 2 < a.y1


@settings(max_examples=150)
@given(scenes())
def test_objects_on_tile_seams_are_found_once_never_twice(scene):
    frame, tiling, objects = scene
    layout = tile_layout(*frame, 416, 416, tiling)
    parts = [_seen_by(region, objects) for region in layout.regions]
    boxes, _, class_ids, _ = merge_regions(parts, frame, 0.45, 1000)
    assert len(boxes) == len(objects), (layout.describe(), objects, boxes)
    for class_id, box in objects:
        matches = [i for i, b in enumerate(boxes) if BoxXYXY(*b).iou(box) > 0.95 and class_ids[i] == class_id]
        assert len(matches) == 1, (box, boxes)


@settings(max_examples=100)
@given(st.integers(700, 4000), st.integers(500, 2200), st.integers(2, 5), st.integers(1, 3), st.data())
def test_an_object_bigger_than_the_overlap_cut_in_two_tiles_is_joined_into_one_box(width, height, cols, rows, data):
    """No full-frame pass: a person wider than the overlap is cut by the seam in both tiles; both parts are one."""
    layout = tile_layout(width, height, 416, 416, Tiling((cols, rows), 0.2, full_frame=False))
    left, right = layout.regions[0], layout.regions[1]
    seam = (right.x + left.x + left.width) // 2
    w = data.draw(st.integers(int(left.width * 0.25) + 4, int(left.width * 0.5)))
    h = data.draw(st.integers(20, max(20, left.height // 2)))
    box = BoxXYXY(seam - w // 2, 4, seam - w // 2 + w, 4 + h)
    parts = [_seen_by(region, [(0, box)]) for region in layout.regions]
    boxes, _, _, _ = merge_regions(parts, (width, height), 0.45, 100)
    assert len(boxes) == 1 and BoxXYXY(*boxes[0]).iou(box) > 0.95, (layout.describe(), box, boxes)


def test_a_tiles_part_of_an_object_the_full_frame_saw_whole_is_dropped():
    """A cat's head called a cat in one tile, where the full frame saw the whole cat beyond that tile."""
    frame = (1280, 720)
    layout = tile_layout(*frame, 416, 416, Tiling())
    whole = layout.regions[-1]
    assert whole.whole and layout.tiled
    tile = layout.regions[1]
    head = np.array([[tile.x + 100, 150, tile.x + 400, 500]], np.float32)  # whole in its tile: not cut
    cat = np.array([[100, 105, 949, 712]], np.float32)
    parts = [
        RegionBoxes(tile, head, np.array([0.72], np.float32), np.array([15])),
        RegionBoxes(whole, cat, np.array([0.79], np.float32), np.array([15])),
    ]
    boxes, scores, _, _ = merge_regions(parts, frame, 0.45, 100)
    assert boxes.tolist() == cat.tolist() and scores.tolist() == pytest.approx([0.79])


# -- what a user can ask for ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "overlap", "said"),
    [
        ("0x3", 0.2, "at least one column"),
        ("3x2", 0.0, "above 0"),
        ("3x2", -0.1, "above 0"),
        ("3x2", 0.7, "above 0.5"),
        ("9x9", 0.2, f"more than {MAX_TILES}"),
        ("three", 0.2, "columns x rows"),
    ],
)
def test_a_grid_or_overlap_that_cannot_be_cut_is_one_line(text, overlap, said):
    with pytest.raises(TilingError, match=said):
        parse_tiles(text, overlap)


def test_tiles_smaller_than_an_object_can_be_are_refused_for_the_frame_they_would_cut():
    with pytest.raises(TilingError, match="smaller than"):
        tile_layout(200, 150, 416, 416, Tiling((8, 8)))


@settings(max_examples=60)
@given(st.integers(300, 7680), st.integers(200, 4320), st.sampled_from([(416, 416), (640, 640), (300, 300)]))
def test_auto_tiles_cover_the_frame_at_the_overlap_asked(width, height, model):
    try:
        layout = tile_layout(width, height, *model, Tiling())
    except TilingError as exc:  # past MAX_TILES: said, never a silent fallback
        assert f"more than {MAX_TILES}" in str(exc)
        return
    tiles = [r for r in layout.regions if not r.whole]
    if not layout.tiled:
        assert layout.regions[0].box == (0, 0, width, height)
        return
    assert layout.regions[-1].whole
    covered = np.zeros((height, width), bool)
    for r in tiles:
        covered[r.y : r.y + r.height, r.x : r.x + r.width] = True
        assert r.x >= 0 and r.y >= 0 and r.x + r.width <= width and r.y + r.height <= height
    assert covered.all()
    xs, ys = sorted({r.x for r in tiles}), sorted({r.y for r in tiles})
    tile_w, tile_h = layout.tile
    for starts, side in ((xs, tile_w), (ys, tile_h)):
        assert all(b - a <= side * (1 - 0.2) + 1 for a, b in itertools.pairwise(starts))


# -- a real detector on real scenes ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def yolox():
    detector = load_detector(DetectorConfig(str(YOLOX), backend="onnx", threads=2))
    yield detector
    detector.close()


@pytest.fixture(scope="module")
def scenes_of_vtest() -> list[np.ndarray]:
    return [scene[0] for scene in vtest_scenes(1, 15, start_step=20)]


def _mosaic(scenes, size, seed, detector):
    """The scenes laid off any tile grid on the letterbox's grey (benchmarks/mosaic.py); each scene's own
    detections, moved to where it lies, are the reference."""
    canvas = np.full((size[1], size[0], 3), GREY, np.uint8)
    reference: list[Detection] = []
    for scene, (x, y) in zip(scenes, scene_places(size, len(scenes), seed), strict=True):
        canvas[y : y + SCENE[1], x : x + SCENE[0]] = scene
        for d in detector.detect(scene).detections:
            box = BoxXYXY(d.box.x1 + x, d.box.y1 + y, d.box.x2 + x, d.box.y2 + y)
            reference.append(Detection(d.class_id, d.label, d.score, box))
    return canvas, reference


def _recall_precision(found: list[Detection], reference: list[Detection]) -> tuple[float, float]:
    """Greedy one-to-one matching, same class, IoU >= 0.5, best scores first."""
    taken: set[int] = set()
    for ref in sorted(reference, key=lambda d: -d.score):
        candidates = [
            (ref.box.iou(f.box), i) for i, f in enumerate(found) if i not in taken and f.class_id == ref.class_id
        ]
        best = max(candidates, default=(0.0, -1))
        if best[0] >= 0.5:
            taken.add(best[1])
    return len(taken) / max(1, len(reference)), len(taken) / max(1, len(found))


@pytest.mark.parametrize(("size", "seed"), [((3840, 2160), 1), ((2560, 1440), 3)])
def test_people_a_few_dozen_pixels_tall_in_a_big_frame_are_found_on_tiles(yolox, scenes_of_vtest, size, seed):
    """Letterboxed whole, the frame reaches the model at a sixth or ninth of its size and nearly nobody is found.
    On tiles, at least 0.9 of each scene's own detections are, and the tiles' boxes are as exact as supervision's
    InferenceSlicer's on the same frame with the same model (within 0.03 of its precision and recall)."""
    scenes = scenes_of_vtest[: 15 if size[0] >= 3840 else 8]
    canvas, reference = _mosaic(scenes, size, seed, yolox)
    assert len(reference) > 60
    yolox.tiling = None
    whole, _ = _recall_precision(yolox.detect(canvas).detections, reference)
    yolox.tiling = Tiling()
    try:
        result = yolox.detect(canvas)
    finally:
        yolox.tiling = None
    recall, precision = _recall_precision(result.detections, reference)
    assert whole < 0.1 and recall >= 0.9, (whole, recall, result.layout)
    tile = result.layout.tile
    slicer = slicer_detections(yolox, canvas, tile, (int(tile[0] * 0.2), int(tile[1] * 0.2)))
    slicer_recall, slicer_precision = _recall_precision(slicer, reference)
    assert precision >= slicer_precision - 0.03 and recall >= slicer_recall - 0.03, (
        (recall, precision),
        (slicer_recall, slicer_precision),
    )


@settings(max_examples=12, deadline=None)
@given(st.integers(120, 640), st.integers(90, 640), st.integers(0, 128), st.integers(0, 96))
def test_a_frame_no_bigger_than_a_tile_gives_the_plain_paths_detections_exactly(yolox, width, height, left, top):
    frame = cv2.imread(str(Path(VTEST).parent / "cat_720p.jpg"))[top : top + height, left : left + width]
    yolox.tiling = None
    plain = yolox.detect(frame).detections
    yolox.tiling = Tiling()
    try:
        tiled = yolox.detect(frame)
    finally:
        yolox.tiling = None
    assert tiled.detections == plain and tiled.layout is not None and not tiled.layout.tiled


def test_a_tiled_frame_runs_as_one_batch_where_the_model_takes_one_and_finds_the_same(yolox, tmp_path):
    """YOLOX with its batch made dynamic (as the Triton export does): the 33 regions go to the engine in one run
    and give the boxes the fixed-batch model gives row by row."""
    import onnx

    from edge_inference.models.triton_repository import batchable

    dynamic = batchable(onnx.load(str(YOLOX)))
    assert dynamic is not None
    onnx.save(dynamic, str(tmp_path / "yolox_batch.onnx"))
    batched = load_detector(DetectorConfig(str(tmp_path / "yolox_batch.onnx"), backend="onnx", threads=2))
    try:
        assert batched.backend.accepts_batch and not yolox.backend.accepts_batch
        runs: list[int] = []
        run = batched.backend.run_timed
        batched.backend.run_timed = lambda tensor: (runs.append(len(tensor)), run(tensor))[1]  # type: ignore[method-assign]
        frame = cv2.resize(cv2.imread(str(Path(VTEST).parent / "cat_720p.jpg")), (2560, 1440))
        batched.tiling = yolox.tiling = Tiling()
        got, want = batched.detect(frame), yolox.detect(frame)
    finally:
        yolox.tiling = None
        batched.close()
    assert runs == [len(got.layout.regions)] and len(runs) == 1
    assert [d.label for d in got.detections] == [d.label for d in want.detections]
    for a, b in zip(got.detections, want.detections, strict=True):
        assert a.box.iou(b.box) > 0.99 and abs(a.score - b.score) < 1e-3


@pytest.mark.process
def test_edge_detect_tiles_says_how_the_frame_was_cut_and_refuses_a_bad_grid_in_one_line(tmp_path):
    big = tmp_path / "big.jpg"
    cv2.imwrite(str(big), cv2.resize(cv2.imread(str(Path(VTEST).parent / "cat_720p.jpg")), (3840, 2160)))
    done = run_edge("detect", str(big), "--model", str(YOLOX), "--backend", "onnx", "--tiles", "auto", "--json")
    assert done.returncode == 0, done.stderr
    import json

    record = json.loads(done.stdout.splitlines()[-1])
    assert record["regions"]["inferences"] == 33 and "8x4 tiles of 640x640" in record["regions"]["tiles"]
    assert any(d["label"] == "cat" for d in record["detections"])
    refused = run_edge("detect", str(big), "--tiles", "3x2", "--tile-overlap", "0")
    assert refused.returncode != 0 and refused.stderr.strip().count("\n") == 0, refused.stderr
    assert refused.stderr.startswith("error: tile overlap 0.0 must be above 0")


@pytest.mark.parametrize(
    ("engine", "model"),
    [("openvino", "openvino/yolox_nano.xml"), ("tflite", "tflite/yolox_nano_float16_quantize.tflite")],
)
def test_tiles_run_on_every_engine_here_and_find_what_onnx_runtime_finds(yolox, scenes_of_vtest, engine, model):
    """The same tiles through OpenVINO (which takes the pixels itself, its pre-processing compiled in) and LiteRT
    find the boxes ONNX Runtime's tiles find on the 4K frame."""
    canvas, reference = _mosaic(scenes_of_vtest, (3840, 2160), 1, yolox)
    other = load_detector(DetectorConfig(str(MODELS / model), backend=engine, threads=2))
    yolox.tiling = other.tiling = Tiling()
    try:
        theirs, ours = other.detect(canvas), yolox.detect(canvas)
    finally:
        yolox.tiling = None
        other.close()
    assert theirs.layout == ours.layout and theirs.layout is not None and theirs.layout.tiled
    agreed, _ = _recall_precision(theirs.detections, ours.detections)
    found, _ = _recall_precision(theirs.detections, reference)
    assert agreed >= 0.9 and found >= 0.85, (agreed, found)
