"""Our ByteTrack, zones and lines give what the libraries they replace give (trackers 2.1, supervision 0.31).

They were rewritten for speed and memory (BENCHMARKS.md: the library's tracker took 2.5 ms a frame for 20 people,
and importing it loaded supervision, SciPy and Matplotlib). The libraries are the independent answer here: the
same boxes go to both, and every detection of every frame must get the same track id, every zone the same
objects, every line the same crossings. On yolox-nano's boxes over all of vtest.avi, and on synthetic crowds of
20 people who cross one another, vanish for a while, and score around both thresholds.
"""

from __future__ import annotations

import numpy as np
import pytest

from edge_inference.edge.stream.bytetrack import ByteTracker, best_assignment, iou_matrix
from edge_inference.edge.stream.tracking import LineCounters, ZoneMasks
from tests.conftest import example_detections

sv = pytest.importorskip("supervision")
trackers = pytest.importorskip("trackers")
scipy_optimize = pytest.importorskip("scipy.optimize")

# StreamTracker's settings (edge/stream/tracking.py), at vtest.avi's 10 fps
SETTINGS = {
    "lost_track_buffer": 60,
    "frame_rate": 10.0,
    "track_activation_threshold": 0.4,
    "minimum_consecutive_frames": 2,
    "high_conf_det_threshold": 0.5,
}
WIDTH, HEIGHT = 768, 576


def library_ids(tracker, boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """trackers' ids per input box (-1 where it returns none), read back through an index column."""
    found = sv.Detections(
        xyxy=boxes,
        confidence=scores,
        class_id=np.zeros(len(boxes), np.int64),
        data={"index": np.arange(len(boxes))},
    )
    tracked = tracker.update(found)
    ids = np.full(len(boxes), -1, np.int64)
    for index, track_id in zip(tracked.data.get("index", []), tracked.tracker_id, strict=True):
        ids[int(index)] = int(track_id)
    return ids


def video_frames() -> list[tuple[np.ndarray, np.ndarray]]:
    frames = []
    for detections in example_detections().frames():
        people = [d for d in detections if d.label == "person"]
        boxes = np.array([[d.box.x1, d.box.y1, d.box.x2, d.box.y2] for d in people], np.float32).reshape(-1, 4)
        frames.append((boxes, np.array([d.score for d in people], np.float32)))
    return frames


def crowd_frames(seed: int, people: int = 20, count: int = 300) -> list[tuple[np.ndarray, np.ndarray]]:
    """People walking straight across a 768x576 frame in all directions (so paths cross), with box jitter, scores
    that wander across 0.4 and 0.5, and gaps of a few frames where a person is not detected."""
    rng = np.random.default_rng(seed)
    start = rng.uniform([0, 0], [WIDTH, HEIGHT], (people, 2))
    speed = rng.uniform(-6, 6, (people, 2))
    size = rng.uniform([25, 60], [60, 140], (people, 2))
    hidden_until = np.zeros(people)
    frames = []
    for frame in range(count):
        centre = start + speed * frame
        frame_size = np.array([WIDTH, HEIGHT])
        centre = np.abs((centre + frame_size) % (2 * frame_size) - frame_size)  # bounce off the edges
        hidden_until = np.where(rng.random(people) < 0.03, frame + rng.integers(1, 8, people), hidden_until)
        seen = hidden_until <= frame
        jitter = rng.normal(0, 2.0, (people, 4))
        boxes = np.hstack([centre - size / 2, centre + size / 2]) + jitter
        scores = np.clip(rng.normal(0.55, 0.15, people), 0.26, 0.95)
        frames.append((boxes[seen].astype(np.float32), scores[seen].astype(np.float32)))
    return frames


def compare_tracks(
    frames: list[tuple[np.ndarray, np.ndarray]], in_seconds: bool = False
) -> tuple[list[np.ndarray], int]:
    """Both trackers over the frames: the ids of each frame (asserted equal) and how many ids were given.
    `in_seconds`: ours loses tracks after `lost_after_s` of the frames' clock (as a stream runs it), the frames
    stamped at the rate the library's frame count assumes, where the two must agree."""
    library = trackers.ByteTrackTracker(**SETTINGS)
    library.reset()  # its id counter is shared by every instance in the process
    lost_after_s = SETTINGS["lost_track_buffer"] / 30.0  # the library's count of frames, at its frame_rate
    ours = ByteTracker(**SETTINGS, lost_after_s=lost_after_s if in_seconds else None)
    all_ids = []
    held_while_lost = 0  # frames where a held track was not seen: the case `held_ids` is there for
    for number, (boxes, scores) in enumerate(frames):
        expected = library_ids(library, boxes, scores)
        got = ours.update(boxes, scores, 1000.0 + number / SETTINGS["frame_rate"])
        assert got.tolist() == expected.tolist(), f"frame {number}: ours {got.tolist()}, trackers {expected.tolist()}"
        # the same tracks in the same order, each Kalman state equal to the bit (the arrays hold what its objects do)
        their_states = np.array([t.state[:, 0] for t in library.tracks], np.float32).reshape(-1, 8)
        assert np.array_equal(ours.states.view(np.int32), their_states.view(np.int32)), f"frame {number}"
        # the ids it may still match again, lost tracks included (an event stays open while its track is held)
        assert ours.held_ids == {int(t.tracker_id) for t in library.tracks if t.tracker_id >= 0}, f"frame {number}"
        held_while_lost += bool(ours.held_ids - set(got.tolist()))
        all_ids.append(got)
    assert held_while_lost > 0
    return all_ids, len({int(i) for ids in all_ids for i in ids if i >= 0})


@pytest.mark.parametrize("in_seconds", [False, True], ids=["lost-after-frames", "lost-after-seconds"])
def test_bytetrack_gives_the_librarys_track_ids_on_the_real_video(in_seconds):
    frames = video_frames()
    assert len(frames) == 795
    _, tracks = compare_tracks(frames, in_seconds)
    assert tracks >= 20  # the video's people are tracked at all (it has a few dozen)


@pytest.mark.parametrize("in_seconds", [False, True], ids=["lost-after-frames", "lost-after-seconds"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bytetrack_gives_the_librarys_track_ids_in_crowds_that_cross_and_vanish(seed, in_seconds):
    frames = crowd_frames(seed)
    ids, tracks = compare_tracks(frames, in_seconds)
    assert max(len(f) for f in ids) >= 15 and tracks >= 20


def test_the_assignment_is_scipys_optimum_on_overlapping_groups():
    """The matching is solved group by group (tracks and boxes that overlap); SciPy solves the whole matrix."""
    rng = np.random.default_rng(7)
    for _ in range(2000):
        rows, cols = rng.integers(1, 10, 2)
        weights = (rng.random((rows, cols)) * (rng.random((rows, cols)) < 0.35)).astype(np.float32)
        r, c = scipy_optimize.linear_sum_assignment(weights, maximize=True)
        expected = sorted((int(a), int(b)) for a, b in zip(r, c, strict=True) if weights[a, b] > 0)
        assert best_assignment(weights) == expected, weights


def test_the_iou_is_supervisions_to_the_bit():
    rng = np.random.default_rng(3)
    for _ in range(500):
        a, b = (rng.uniform(0, 500, (n, 4)).astype(np.float32) for n in rng.integers(1, 25, 2))
        a[:, 2:] = a[:, :2] + rng.uniform(-5, 80, (len(a), 2))  # some boxes empty or inverted
        b[:, 2:] = b[:, :2] + rng.uniform(-5, 80, (len(b), 2))
        assert np.array_equal(iou_matrix(a, b).view(np.int32), sv.box_iou_batch(a, b).view(np.int32))


def test_zones_and_lines_count_what_supervision_counts():
    """On the tracked crowd: the same objects in a zone and the same crossings of two lines, frame by frame."""
    polygon = np.array([[100, 80], [600, 120], [700, 500], [150, 420]])
    ends = [((200, 50), (260, 550)), ((50, 300), (740, 280))]
    their_zone = sv.PolygonZone(polygon, triggering_anchors=(sv.Position.BOTTOM_CENTER,))
    corner = np.array([[0, 300], [300, 330], [250, 576], [0, 560]])  # a smaller second zone, stacked with the first
    their_corner = sv.PolygonZone(corner, triggering_anchors=(sv.Position.BOTTOM_CENTER,))
    our_zones = ZoneMasks([polygon, corner])
    feet = (sv.Position.BOTTOM_CENTER,)
    their_lines = [sv.LineZone(sv.Point(*a), sv.Point(*b), triggering_anchors=feet) for a, b in ends]
    our_lines = LineCounters(ends)
    tracker = ByteTracker(**SETTINGS)
    seen_in_corner = False
    for boxes, scores in crowd_frames(4):
        ids = tracker.update(boxes, scores)
        sure = ids >= 0
        tracked = sv.Detections(xyxy=boxes[sure], class_id=np.zeros(int(sure.sum()), np.int64), tracker_id=ids[sure])
        inside = our_zones.inside(boxes[sure]).tolist()
        assert inside == [their_zone.trigger(tracked).tolist(), their_corner.trigger(tracked).tolist()]
        seen_in_corner = seen_in_corner or any(inside[1])
        crossings = our_lines.trigger(boxes[sure], ids[sure])
        for theirs, ours, got in zip(their_lines, our_lines.counters, crossings, strict=True):
            expected = theirs.trigger(tracked)
            assert [g.tolist() for g in got] == [e.tolist() for e in expected]
            assert (ours.in_count, ours.out_count) == (theirs.in_count, theirs.out_count)
    assert seen_in_corner  # the second zone was entered
    crossings = sum(line.in_count + line.out_count for line in our_lines.counters)
    assert crossings >= 10  # the lines were crossed, both ways
    assert all(line.in_count and line.out_count for line in our_lines.counters)
