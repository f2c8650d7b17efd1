"""The FFmpeg source vs the OpenCV source: CPU per frame delivered at the detector's resolution (issue 23).

    python -m benchmarks.decode [--frames 300] [--repeat 3]

A 1280x720 H.264 clip (what a camera's main stream sends) is made from vtest.avi. Each way of reading it runs in its
own process, alternated: OpenCV decodes at full size and converts to BGR, then the frame is resized to 416 wide
(what the detector needs); FFmpeg (software decoding here) scales to 416 wide inside FFmpeg and writes 4:2:0 frames
to a pipe, converted to BGR here. CPU is the kernel's count for the process and its children (FFmpeg included).
Target: FFmpeg / OpenCV CPU per frame <= 0.8.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2

from benchmarks.common import VTEST, cpu_seconds, machine
from edge_inference.edge.stream.ffmpeg import ffmpeg_source
from edge_inference.edge.stream.sources import open_source

WIDTH, HEIGHT = 416, 234  # 1280x720 scaled to the detector's 416


def make_clip(folder: Path, frames: int) -> Path:
    clip = folder / "camera-720p.mp4"
    source = ["-stream_loop", "-1", "-i", str(VTEST), "-frames:v", str(frames), "-vf", "scale=1280:720"]
    encode = ["-c:v", "libx264", "-preset", "veryfast", "-g", "50", str(clip)]
    subprocess.run(["ffmpeg", "-loglevel", "error", *source, *encode], check=True)
    return clip


def read_all(way: str, clip: str) -> dict[str, float]:
    """Every frame of the clip at 416 wide, the way named; CPU of this process and its (waited) children."""
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    frames = 0
    if way == "opencv":
        source = open_source(clip)
        source.open()
        while (image := source.read()) is not None:
            cv2.resize(image, (WIDTH, HEIGHT), interpolation=cv2.INTER_AREA)
            frames += 1
    else:
        source = ffmpeg_source(clip, width=WIDTH)
        source.open()
        while source.read() is not None:
            frames += 1
    source.close()  # FFmpeg has exited and been waited for: its CPU is in the children's count
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    return {"frames": frames, "fps": frames / wall, "cpu_ms": cpu * 1e3 / max(frames, 1)}


def in_child(way: str, clip: Path) -> dict[str, float]:
    code = f"import json; from benchmarks.decode import read_all; print(json.dumps(read_all({way!r}, {str(clip)!r})))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    result: dict[str, float] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"# FFmpeg source vs OpenCV source, {args.frames} frames of 1280x720 H.264 to {WIDTH}x{HEIGHT}")
    print(f"# {machine()}")
    with tempfile.TemporaryDirectory() as folder:
        clip = make_clip(Path(folder), args.frames)
        results: dict[str, list[dict[str, float]]] = {"opencv": [], "ffmpeg": []}
        for _ in range(args.repeat):
            for way in ("opencv", "ffmpeg"):
                results[way].append(in_child(way, clip))
    for way, runs in results.items():
        cpu = " ".join(f"{r['cpu_ms']:6.2f}" for r in runs)
        fps = " ".join(f"{r['fps']:6.1f}" for r in runs)
        print(f"{way:<8} frames {int(runs[0]['frames'])}  CPU ms/frame {cpu}   fps {fps}")
    ratios = [f["cpu_ms"] / o["cpu_ms"] for f, o in zip(results["ffmpeg"], results["opencv"], strict=True)]
    worst = max(ratios)
    status = "met" if worst <= 0.8 else "MISSED"
    print(f"ffmpeg / opencv CPU per frame, each repetition: {' '.join(f'{r:.2f}' for r in ratios)}")
    print(f"worst {worst:.2f}  target <= 0.8: {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
