"""What each part of the service holds in memory: the bare detect loop's parts, then what the service adds.

    python -m benchmarks.memory_parts [--seconds 10]

One fresh process, each step on top of the ones before, RSS (VmRSS) after each: the interpreter; numpy and
OpenCV; the engine (ONNX Runtime imported); the project's detection modules (the config's pydantic models among
them); yolox-nano loaded on one thread and five frames run (the bare loop ends here); a second lane of the engine
(a second inference running beside the first, as a file or a second camera gets); the web stack (FastAPI, uvicorn,
sse-starlette, prometheus_client); then a second fresh process running the whole service (`StreamManager` and the
app) on vtest.avi for `--seconds`. Issue 62: the service's RSS was 1.5-1.7x the bare loop's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

# no project or third-party module at the top: `--parts` measures a process that has imported nothing yet
SHARED = Path(os.environ.get("EDGE_SHARED_DIR", Path(__file__).resolve().parent.parent.parent / "shared")).resolve()
MODEL = SHARED / "models/onnx/yolox_nano.onnx"
PHOTO = SHARED / "media/cat_720p.jpg"


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def parts() -> list[tuple[str, float]]:
    """The steps of one process, each on top of the ones before: (what, RSS MiB after it)."""
    steps = [("interpreter", rss_mib())]
    import cv2
    import numpy  # noqa: F401

    steps.append(("numpy + OpenCV", rss_mib()))
    import onnxruntime  # noqa: F401

    steps.append(("ONNX Runtime imported", rss_mib()))
    from edge_inference.edge.detection.loader import DetectorConfig, load_detector

    steps.append(("the project's detection modules (config models)", rss_mib()))
    config = DetectorConfig(str(MODEL), backend="onnx", device="cpu", threads=1, back_to_back=False)
    detector = load_detector(config)
    image = cv2.imread(str(PHOTO))
    assert image is not None, "the shared media's cat_720p.jpg"
    for _ in range(5):
        detector.detect(image)
    steps.append(("yolox-nano loaded, 5 frames (the bare loop)", rss_mib()))
    lanes = [threading.Thread(target=lambda: [detector.detect(image) for _ in range(5)]) for _ in range(2)]
    for lane in lanes:
        lane.start()
    for lane in lanes:
        lane.join()
    steps.append(("a second inference running beside it (2 lanes)", rss_mib()))
    import fastapi  # noqa: F401
    import prometheus_client  # noqa: F401
    import sse_starlette  # noqa: F401
    import uvicorn  # noqa: F401

    steps.append(("FastAPI, uvicorn, sse-starlette, prometheus_client", rss_mib()))
    import edge_inference.service.app  # noqa: F401

    steps.append(("the service's own modules", rss_mib()))
    return steps


def service_rss(seconds: float) -> float:
    """The whole service on vtest.avi, one stream, in a fresh process: its RSS after `seconds`."""
    code = (
        "import time\n"
        "from benchmarks.shared import run_service\n"
        f"result = run_service({str(MODEL)!r}, 'onnx', {seconds}, 1, True, 1, live=True)\n"
        "print('RSS', [l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line = next(x for x in out.stdout.splitlines() if x.startswith("RSS "))
    return int(line.split()[1]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--parts", action="store_true", help="(the fresh process's side) print the steps as JSON")
    args = parser.parse_args()
    if args.parts:
        print(json.dumps(parts()))
        return 0
    from benchmarks.common import machine

    print(f"# {machine()}; vtest.avi, {MODEL.name} on ONNX Runtime, one thread per lane")
    fresh = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory_parts", "--parts"], capture_output=True, text=True, check=True
    )
    previous = 0.0
    bare = 0.0
    for what, rss in json.loads(fresh.stdout.splitlines()[-1]):
        print(f"{what:<55} {rss:7.1f} MiB  (+{rss - previous:5.1f})")
        previous = rss
        if what.endswith("(the bare loop)"):
            bare = rss
    served = service_rss(args.seconds)
    print(f"{'the whole service, one camera, in its own process':<55} {served:7.1f} MiB")
    print(f"service / bare loop {served / bare:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
