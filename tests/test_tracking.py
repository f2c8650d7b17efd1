"""Tracking, zones and lines: on the real pedestrian video against counts made by eye, and on boxes we place.

How the reference counts were made (vtest.avi, 795 frames at 10 fps, 768x576): the line of
deploy/events.example.yaml runs down across the road at x = 0.28 of the width (215 px) from y = 0.25 to 0.7
(144 to 403 px), so it cuts the road and leaves out the far path behind it and the lawn in front. Contact sheets
of every 4th frame, cropped to 180 px either side of the line and to y 120..440 px with the line drawn and the
frame number printed (seven sheets of 30 frames each), were looked at one by one, following each person from
sheet to sheet. A person counts when their feet pass from one side of the line to the other while on the road.
Right to left (the line's "out", as it is drawn from top to bottom): the woman in the white hood (about frame
180), the man in the striped top (202), the bearded man in the brown jacket (248), a man in black who passes him
on the line (304), the woman in red (524), a man in a dark jacket on the far side of the road (596), a man in
dark clothes who meets him on the line (674) and the woman in the blue jacket (708): 8. Left to right ("in"):
the bearded man coming back (306), the man in black going back (326), a second woman in red (650), the man in
the dark jacket coming back (673), the man in dark clothes going back (710), and the blonde woman in the black
coat who walks up from the lawn onto the road (757): 6. People who walk up to the line and turn back, the
couple on the lawn below the line's end, and a man still on the line when the video ends are not crossings.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

import cv2
import numpy as np
import pytest
import yaml

from edge_inference.edge.config import (
    EventsConfig,
    LineConfig,
    MotionConfig,
    StreamConfig,
    TrackingConfig,
    ZoneConfig,
)
from edge_inference.edge.events.builder import EventBuilder
from edge_inference.edge.runtime.streams import tracker_for
from edge_inference.edge.stream.drawing import ZONE_COLOUR, render_jpeg
from edge_inference.edge.stream.tracking import StreamTracker
from edge_inference.models.detection import BoxXYXY, Detection
from edge_inference.models.labels import COCO80, unknown_labels
from tests.conftest import REPO, VTEST, example_detections

HAND_COUNT_IN, HAND_COUNT_OUT = 6, 8
FPS = 10.0
WIDTH, HEIGHT = 768, 576  # vtest.avi


def example_stream() -> StreamConfig:
    config = yaml.safe_load((REPO / "deploy/events.example.yaml").read_text())
    return StreamConfig.model_validate(config["streams"][0])


@dataclass
class VideoRun:
    frames_seen: Counter[int]  # track id -> frames it was seen in
    first_seen: dict[int, int]
    crossings: list[tuple[int, int, str]]  # frame, track id, in/out
    crossed_in: int
    crossed_out: int


@pytest.fixture(scope="module")
def vtest_run() -> VideoRun:
    """The example stream's tracker and line over every frame of the video, as file mode runs it, on the example
    model's boxes for each frame (made once per machine: tests/video_detections.py)."""
    stream = example_stream()
    frames = example_detections().frames()
    assert len(frames) == 795, f"read {len(frames)} frames of {VTEST}"
    tracker = StreamTracker(stream.tracking, [], stream.lines)
    run = VideoRun(Counter(), {}, [], 0, 0)
    for index, detections in enumerate(frames):
        analysis = tracker.analyse(detections, WIDTH, HEIGHT, index / FPS)
        for det in analysis.detections:
            if det.track_id is not None:
                run.frames_seen[det.track_id] += 1
                run.first_seen.setdefault(det.track_id, index)
        (line,) = analysis.lines
        run.crossings += [(index, t, "in") for t in line.just_in] + [(index, t, "out") for t in line.just_out]
        run.crossed_in, run.crossed_out = line.crossed_in, line.crossed_out
    return run


def test_line_crossings_on_the_pedestrian_video_match_the_count_made_by_eye(vtest_run: VideoRun):
    assert abs(vtest_run.crossed_in - HAND_COUNT_IN) <= 1, vtest_run.crossings
    assert abs(vtest_run.crossed_out - HAND_COUNT_OUT) <= 1, vtest_run.crossings
    assert len(vtest_run.crossings) == vtest_run.crossed_in + vtest_run.crossed_out  # each told once, with its id


def test_track_ids_stay_with_their_person_across_frames(vtest_run: VideoRun):
    """About two dozen people cross the scene: ids are not re-issued every few frames."""
    lifetimes = list(vtest_run.frames_seen.values())
    assert len(lifetimes) <= 40, f"{len(lifetimes)} track ids"
    assert statistics.median(lifetimes) >= 50, sorted(lifetimes)  # 5 s at 10 fps
    for frame, track_id, _ in vtest_run.crossings:
        # whoever crosses was followed under the same id on the way to the line
        assert frame - vtest_run.first_seen[track_id] >= 20, (frame, track_id)


def _person(x: float, y: float, score: float = 0.9, w: float = 30, h: float = 80) -> Detection:
    return Detection(0, "person", score, BoxXYXY(x - w / 2, y - h, x + w / 2, y))  # (x, y): the feet


def _walk(
    tracker: StreamTracker,
    steps: list[list[Detection]],
    dt: float = 0.1,
    start: float = 1000.0,
    width: int = 640,
    height: int = 480,
) -> list:
    return [tracker.analyse(dets, width, height, start + i * dt) for i, dets in enumerate(steps)]


def test_a_lost_track_is_let_go_after_lost_after_s_however_few_frames_a_slow_machine_processes():
    """The tracker counted lost frames at the stream's rate: a Pi behind a 30 fps camera, processing 5 frames a
    second, kept a lost person for 60 processed frames (12 s) instead of `lost_after_s` (2 s), and since an event
    stays open while its track is held, every event ended 12 s after its person left, not `end_after_s` (3 s)."""
    tracking = TrackingConfig(labels=["person"], lost_after_s=2.0)
    events = EventsConfig(labels=["person"], min_frames=3, end_after_s=3.0)
    for processed_fps in (30.0, 5.0, 2.0):  # the camera's rate, a Pi's, a Pi with four cameras on one Coral
        tracker, builder = StreamTracker(tracking, [], []), EventBuilder("cam", events)
        dt, walked = 1.0 / processed_fps, []
        steps = [[_person(100 + 40 * i * dt, 300)] for i in range(round(4 * processed_fps))] + [[]] * round(
            10 * processed_fps
        )
        for analysis, i in zip(_walk(tracker, steps, dt), range(len(steps)), strict=True):
            now = 1000.0 + i * dt
            changes = builder.observe(
                analysis.detections, (), (), np.zeros((8, 8, 3), np.uint8), now, held=analysis.held
            )
            walked.append((now, analysis.held, [c.kind for c in changes]))
        last_seen = 1000.0 + (round(4 * processed_fps) - 1) * dt
        released = min(now for now, held, _ in walked if now > last_seen and not held)
        assert last_seen + 2.0 - dt <= released <= last_seen + 2.0 + dt, (processed_fps, released - last_seen)
        ended = [now for now, _, kinds in walked if "end" in kinds]
        assert len(ended) == 1 and ended[0] - last_seen <= 3.0 + dt, (processed_fps, ended)


def _gated(tracker: StreamTracker, builder: EventBuilder, runs: list[tuple[float, list[Detection]]]) -> list:
    """Frames a motion gate let through at the times given, every frame between them skipped as still (one every
    0.1 s): (time, track ids held, event changes) after each."""
    out, last = [], None
    for now, detections in runs:
        still = round(now - 0.1, 3) if last is not None and now - last > 0.15 else None  # the frame before: skipped
        analysis = tracker.analyse(detections, 640, 480, now, still)
        image = np.zeros((8, 8, 3), np.uint8)
        changes = builder.observe(analysis.detections, (), (), image, now, held=analysis.held)
        out.append((now, analysis.held, [c.kind for c in changes]))
        last = now
    return out


def test_under_a_motion_gate_a_parked_car_missed_once_stays_one_event_and_a_person_who_left_ends_promptly():
    """A motion gate runs the detector on a still scene only now and then: every `recheck_s`, doubling up to 30 s
    while objects stay put, and every `max_idle_s` (10 s) on an empty one. A parked car the detector misses on one
    of those checks was not lost for the whole still spell before it (it ended its event and began another with a
    new id), and a person who walked out before the scene went still is let go at the first check after
    `lost_after_s`, not 30 checks later (the lost window once counted processed frames: five minutes)."""
    tracking = TrackingConfig(labels=["person"], lost_after_s=2.0)
    events = EventsConfig(labels=["person"], min_frames=3, end_after_s=3.0)
    parked = _person(300, 300)
    tracker, builder = StreamTracker(tracking, [], []), EventBuilder("cam", events)
    arrives = [(1000.0 + i * 0.1, [parked]) for i in range(5)]  # drove in: motion, every frame detected
    checks = [(1001.0, [parked]), (1003.0, [parked]), (1007.0, [parked]), (1015.0, []), (1016.0, [parked])]
    checks += [(1017.0, [parked]), (1019.0, [parked])]  # missed at 1015 (the interval then back to recheck_s)
    seen = _gated(tracker, builder, arrives + checks)
    assert [kinds for _, _, kinds in seen if kinds] == [["start"]]  # one event, never ended
    assert all(held == {0} for now, held, _ in seen if now >= 1001.0)  # the car's one track throughout
    tracker, builder = StreamTracker(tracking, [], []), EventBuilder("cam", events)
    walks = [(1000.0 + i * 0.1, [_person(100 + 10 * i, 300)]) for i in range(30)]
    leaves = [(1003.0 + i * 0.1, []) for i in range(10)]  # out of the frame: still motion, frames processed
    idle = [(1014.0, []), (1024.0, []), (1034.0, [])]  # the scene still and empty: a check every 10 s
    seen = _gated(tracker, builder, walks + leaves + idle)
    at_first_idle = next(entry for entry in seen if entry[0] == 1014.0)
    assert at_first_idle[1] == frozenset() and at_first_idle[2] == ["end"]  # let go, and its event ended, then


def test_a_line_counts_each_direction_only_within_its_ends():
    line = LineConfig(name="gate", start=(320, 100), end=(320, 300))  # pixels, drawn top to bottom
    tracker = StreamTracker(TrackingConfig(labels=["person"]), [], [line])
    to_the_right = [[_person(200 + 10 * i, 250), _person(200 + 10 * i, 450)] for i in range(25)]
    results = _walk(tracker, to_the_right)
    gate = results[-1].lines[0]
    # the person below the line's end (feet at y=450) walks past it without counting
    assert (gate.crossed_in, gate.crossed_out) == (1, 0)
    assert sum(len(r.lines[0].just_in) for r in results) == 1
    back = [[_person(440 - 10 * i, 250)] for i in range(25)]
    gate = _walk(tracker, back, start=1010.0)[-1].lines[0]
    assert (gate.crossed_in, gate.crossed_out) == (1, 1)


def test_a_zone_counts_who_stands_in_it_and_for_how_long():
    zone = ZoneConfig(name="door", polygon=[(0.5, 0.5), (1.0, 0.5), (1.0, 1.0), (0.5, 1.0)])  # 0..1 of the frame
    tracker = StreamTracker(TrackingConfig(labels=["person"]), [zone], [])
    # one person stands in the zone for 3 s, another walks past above it, a cat is not tracked
    cat = Detection(15, "cat", 0.9, BoxXYXY(400, 300, 450, 400))
    steps = [[_person(480, 400), _person(100 + 5 * i, 200), cat] for i in range(31)]
    (door,) = _walk(tracker, steps)[-1].zones
    assert door.objects == {"person": 1}
    (track_id,) = door.track_ids
    assert door.dwell_s[track_id] == pytest.approx(3.0 - 0.1, abs=0.15)  # tracked from its second frame
    assert door.polygon == ((320, 240), (640, 240), (640, 480), (320, 480))
    leaves = [[_person(100, 200)] for _ in range(5)]
    (door,) = _walk(tracker, leaves, start=1003.1)[-1].zones
    assert door.objects == {} and door.dwell_s == {}


def test_a_zone_drawn_on_a_frame_of_another_size_is_named_until_the_frame_fits():
    """Pixels taken from the camera's 1920x1080 main stream, applied to a 640x360 sub-stream (or a frame FFmpeg
    scaled): the zone lay outside the picture and nobody was ever in it, without a word."""
    door = ZoneConfig(name="door", polygon=[(1500, 700), (1900, 700), (1900, 1070), (1500, 1070)])
    gate = LineConfig(name="gate", start=(960, 0), end=(960, 1080))
    yard = ZoneConfig(name="yard", polygon=[(0.0, 0.5), (1.0, 0.5), (1.0, 1.0), (0.0, 1.0)])  # fits any frame
    tracker = StreamTracker(TrackingConfig(), [door, yard], [gate], "porch")
    standing = [[_person(1700, 1000)] for _ in range(3)]
    _walk(tracker, standing, width=640, height=360)
    assert tracker.placement_problem == (
        "stream porch: zone door has the point (1500, 700), beyond the 640x360 frame, so it never holds anyone: "
        "write its points in 0..1 of the frame (they then fit any resolution) or in pixels of this frame; "
        "line gate has the point (960, 0), beyond the 640x360 frame, so it may never be crossed: "
        "write its points in 0..1 of the frame (they then fit any resolution) or in pixels of this frame"
    )
    door_state, _ = _walk(tracker, standing, start=1010.0, width=1920, height=1080)[-1].zones
    assert tracker.placement_problem is None and door_state.objects == {"person": 1}
    # a zone drawn a little past the bottom edge, to take in the whole doorway, is the user's choice
    edge = ZoneConfig(name="edge", polygon=[(0, 300), (640, 300), (640, 380), (0, 380)])
    tracker = StreamTracker(TrackingConfig(), [edge], [], "porch")
    _walk(tracker, standing, width=640, height=360)
    assert tracker.placement_problem is None


def test_a_coordinate_past_1_among_fractions_is_refused_not_read_as_a_zone_of_one_pixel():
    with pytest.raises(ValueError, match=r"\(1.2, 0.5\) is not in 0..1, so the zone's points are read as pixels: "
                       r"a zone 1.2x0.5 pixels across; keep every coordinate in 0..1 of the frame"):  # fmt: skip
        ZoneConfig(name="door", polygon=[(0, 0.5), (1.2, 0.5), (1, 1)])
    with pytest.raises(ValueError, match=r"\(1.05, 0.5\) is not in 0..1, so the line's points are read as pixels: "
                       r"a line 0.95 pixels long"):  # fmt: skip
        LineConfig(name="gate", start=(0.1, 0.5), end=(1.05, 0.5))
    with pytest.raises(
        ValueError, match=r"\(0, 1.08\) is not in 0..1.*a region 0.6x1.08 pixels across"
    ):  # motion's ignored clock overlay
        MotionConfig(ignore=[[(0, 0), (0.6, 0), (0.6, 0.08), (0, 1.08)]])
    assert LineConfig(name="gate", start=(0, 240), end=(640, 240)).end == (640, 240)  # pixels, written as such
    assert ZoneConfig(name="door", polygon=[(0, 0), (1, 0), (1, 1)]).polygon[1] == (1, 0)  # all in 0..1


def test_zones_and_lines_are_drawn_on_the_snapshot_when_asked():
    zone = ZoneConfig(name="door", polygon=[(0.5, 0.5), (1.0, 0.5), (1.0, 1.0), (0.5, 1.0)])
    line = LineConfig(name="gate", start=(0.25, 0.0), end=(0.25, 1.0))
    tracker = StreamTracker(TrackingConfig(), [zone], [line])
    analysis = tracker.analyse([], 640, 480, 0.0)
    image = np.full((480, 640, 3), 40, np.uint8)
    plain = cv2.imdecode(np.frombuffer(render_jpeg(image, [], height=None, quality=95, boxes=True), np.uint8), 1)
    drawn = render_jpeg(image, [], height=240, quality=95, boxes=True, zones=analysis.zones, lines=analysis.lines)
    drawn_image = cv2.imdecode(np.frombuffer(drawn, np.uint8), 1)
    assert drawn_image.shape[:2] == (240, 320)  # scaled with the frame
    assert np.abs(plain.astype(int) - 40).max() < 8  # nothing drawn unless asked
    inside = drawn_image[180, 240].astype(int)  # tinted inside the zone, towards its colour
    assert inside[2] > 40 + 10 and inside[0] < inside[2]
    edge = drawn_image[200, 157:164].astype(int)  # around the zone's left edge, x=160 after scaling
    assert np.abs(edge - np.array(ZONE_COLOUR)).sum(axis=1).min() < 90
    assert drawn_image[120, 80].astype(int)[[0, 2]].min() > 150  # the magenta line at x=80


def tracked_ids(tracker: StreamTracker, frames: list[list[Detection]]) -> list[list[int | None]]:
    return [[d.track_id for d in tracker.analyse(f, WIDTH, HEIGHT, i / FPS).detections] for i, f in enumerate(frames)]


def test_labels_match_in_any_case_and_spelled_as_topics_write_them():
    """ "Person" from a Home Assistant user, "traffic_light" copied from a topic: the model's "person", "traffic
    light". They used to match nothing, silently: nothing tracked, no event."""
    frames = example_detections().frames()[:150]
    exact = tracked_ids(StreamTracker(TrackingConfig(labels=["person"]), [], []), frames)
    assert sum(t is not None for frame in exact for t in frame) > 100
    assert tracked_ids(StreamTracker(TrackingConfig(labels=["Person", "Traffic_Light"]), [], []), frames) == exact
    nothing = tracked_ids(StreamTracker(TrackingConfig(labels=["dog"]), [], []), frames)
    assert not any(t is not None for frame in nothing for t in frame)


def test_events_for_a_label_have_it_tracked_even_where_tracking_names_others():
    """An event is a tracked object: `events: labels: [person]` beside `tracking: labels: [car]` made no event."""
    stream = StreamConfig.model_validate(
        {"id": "s", "source": "x", "tracking": {"labels": ["car"]}, "events": {"labels": ["Person"]}}
    )
    assert stream.tracked_labels == ["car", "Person"]
    frames = example_detections().frames()[:150]
    tracker = tracker_for(stream)
    assert tracker is not None
    tracked = [d for i, f in enumerate(frames) for d in tracker.analyse(f, WIDTH, HEIGHT, i / FPS).detections]
    assert sum(d.track_id is not None for d in tracked if d.label == "person") > 100
    every = StreamConfig.model_validate(
        {"id": "s", "source": "x", "tracking": {"labels": ["car"]}, "events": {"labels": []}}
    )
    assert every.tracked_labels == []  # events for every label: every label tracked


def test_a_label_the_model_does_not_have_is_named_with_the_nearest_one_it_has():
    unknown = unknown_labels(["Person", "traffic_light", "persons", "class_7", "helicopter"], list(COCO80))
    assert unknown == ["'persons' (did you mean 'person'?)", "'helicopter'"]
