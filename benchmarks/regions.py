"""Small objects in a 4K frame: the whole frame, tiles and motion regions side by side (issue 79).

    python -m benchmarks.regions [--frames 40] [--still-frames 100]

The videos are made here (benchmarks/mosaic.py), 3840x2160 at 10 fps: fifteen vtest.avi scenes at 640x480 on one
canvas, people 25-60 px tall, with sensor noise. "busy": all fifteen walking, motion nearly everywhere; "sparse":
three walking, twelve showing the empty street, as a wide camera sees people in a few places; "still": every scene
held on its first frame. Each run is the service's pipeline on the file (file mode, unpaced, every frame in order;
yolox-nano on ONNX Runtime, tracking on) with `regions:` full, tiles and motion. CPU time is the process's from the
kernel while the file plays (its decoding included: the same in every run), per frame of the video.

Recall is against an independent answer, frame by frame: supervision's InferenceSlicer (640 px slices overlapping
128 px, its own grid and merge) running the same model on every frame. A mode's result at a frame is the last one it
published (a frame the motion gate skipped shows the one before); same class, IoU >= 0.5. The model's own spread
(a box near its score threshold found on one grid and not another) bounds every mode's recall below 1; the goals are
ratios to tiles: motion regions >= 0.90 of tiles' recall at <= 0.25 of tiles' CPU per frame; on the still scene,
motion regions <= 0.1 of tiles' CPU.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.common import MODELS, cpu_seconds, machine
from benchmarks.mosaic import slicer_detections, write_mosaic
from edge_inference.edge.config import RegionsConfig, ServiceConfig, StreamConfig, TrackingConfig
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.drawing import render_jpeg
from edge_inference.edge.stream.pipeline import FrameResult
from edge_inference.models.detection import Detection

MODES = ("full", "tiles", "motion")
TILES_4K = 33  # the regions of a 4K frame run whole as tiles (8x4 and the full frame)


def play(clip: Path, mode: str, picture: Path | None = None) -> tuple[float, dict[int, list[Detection]], int, int]:
    """(CPU seconds, the published detections by frame index, frames inferred, inferences run); `picture`: the
    last frame run as motion regions, with them drawn, written there."""
    stream = StreamConfig(
        id="gate",
        source=str(clip),
        model=str(MODELS / "onnx/yolox_nano.onnx"),
        backend="onnx",
        mode="file",
        pace=False,
        tracking=TrackingConfig(),
        regions=RegionsConfig(mode=mode),  # type: ignore[arg-type]
    )
    manager = StreamManager(ServiceConfig(streams=[stream]))
    pipeline = manager.pipelines["gate"]
    published: dict[int, list[Detection]] = {}
    shown: list[FrameResult] = []

    def keep(result: FrameResult) -> None:
        published[result.index] = result.detections
        if picture is not None and 0 < len(result.regions) < TILES_4K:  # motion regions, not the whole as tiles
            shown[:] = [result]

    pipeline.add_listener(keep)
    manager.start()
    while pipeline.detector is None:
        time.sleep(0.05)
    before = cpu_seconds()
    while pipeline.state != "ended":
        time.sleep(0.05)
    spent = cpu_seconds() - before
    stats = pipeline.stats.snapshot()
    manager.stop()
    if picture is not None and shown:
        result = shown[0]
        drawn = render_jpeg(
            result.image, result.detections, height=1080, quality=80, boxes=False, regions=result.regions
        )
        picture.write_bytes(drawn)
    return spent, published, stats.frames_processed, stats.inferences


def recall(reference: dict[int, list[Detection]], seen: dict[int, list[Detection]], frames: int) -> float:
    """The share of the reference's boxes, frame by frame, found in what the other run showed at that frame."""
    found = total = 0
    shown: list[Detection] = []
    for index in range(frames):
        shown = seen.get(index, shown)
        taken: set[int] = set()
        for ref in reference.get(index, []):
            total += 1
            best = max(
                ((ref.box.iou(d.box), i) for i, d in enumerate(shown) if i not in taken and d.class_id == ref.class_id),
                default=(0.0, -1),
            )
            if best[0] >= 0.5:
                taken.add(best[1])
                found += 1
    return found / max(1, total)


def slicer_reference(clip: Path, frames: int) -> dict[int, list[Detection]]:
    """supervision's InferenceSlicer with the same model, frame by frame: the independent answer."""
    import cv2

    from edge_inference.edge.detection.loader import DetectorConfig, load_detector

    detector = load_detector(DetectorConfig(str(MODELS / "onnx/yolox_nano.onnx"), backend="onnx"))
    capture, answers = cv2.VideoCapture(str(clip)), {}
    for index in range(frames):
        ok, frame = capture.read()
        if not ok:
            break
        answers[index] = slicer_detections(detector, frame, (640, 640), (128, 128))
    capture.release()
    detector.close()
    return answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=40, help="frames of each walking video (10 fps)")
    parser.add_argument("--still-frames", type=int, default=100, help="frames of the still video")
    parser.add_argument("--picture", type=Path, help="write the sparse video's motion regions, drawn, here (JPEG)")
    args = parser.parse_args()
    print(f"# {machine()}")
    print(f"# 3840x2160, fifteen vtest scenes at 640x480; walking {args.frames} frames, still {args.still_frames}")
    cpu: dict[tuple[str, str], float] = {}
    caught: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for clip, frames, how in (
            ("busy", args.frames, {}),
            ("sparse", args.frames, {"walking": 3}),
            ("still", args.still_frames, {"still": True}),
        ):
            path = Path(folder) / f"{clip}.avi"
            write_mosaic(path, frames, **how)
            reference = slicer_reference(path, frames) if clip != "still" else {}
            for mode in MODES if clip != "still" else ("tiles", "motion"):
                picture = args.picture if (clip, mode) == ("sparse", "motion") else None
                spent, published, inferred, inferences = play(path, mode, picture)
                cpu[clip, mode] = spent / frames
                caught[clip, mode] = recall(reference, published, frames) if reference else float("nan")
                print(
                    f"{clip:<7}{mode:<7} CPU {cpu[clip, mode] * 1e3:7.1f} ms a frame   recall {caught[clip, mode]:6.3f}"
                    f"   frames inferred {inferred:4d}   inferences {inferences / max(1, inferred):5.1f} a frame"
                )
    for clip in ("busy", "sparse"):
        kept = caught[clip, "motion"] / caught[clip, "tiles"]
        spent = cpu[clip, "motion"] / cpu[clip, "tiles"]
        print(f"{clip}: motion / tiles recall  {kept:.3f}  goal >= 0.90: {_said(kept >= 0.9)}")
        print(f"{clip}: motion / tiles CPU     {spent:.3f}  goal <= 0.25: {_said(spent <= 0.25)}")
    still = cpu["still", "motion"] / cpu["still", "tiles"]
    print(f"still: motion / tiles CPU      {still:.3f}  goal <= 0.10: {_said(still <= 0.1)}")
    return 0


def _said(met: bool) -> str:
    return "met" if met else "MISSED"


if __name__ == "__main__":
    raise SystemExit(main())
