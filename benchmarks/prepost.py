"""Pre- and post-processing cost per frame next to inference, for each detector on vtest.avi frames.

    python -m benchmarks.prepost [--frames 200]

Target (issue 2): pre + post <= 2 ms median per frame on a 2-core machine. Beside the stages: the process's CPU ms
per frame over the whole loop (pre-processing, inference, decoding), from the kernel.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.common import MODELS, VTEST, machine, pct, read_frames, stage_timings
from edge_inference.edge.detection.loader import DetectorConfig, load_detector

CASES = {
    "yolox_nano.onnx": MODELS / "onnx/yolox_nano.onnx",
    "nanodet_m.onnx": MODELS / "onnx/nanodet_m.onnx",
    "yolov8n_int8.onnx": MODELS / "onnx/yolov8n_int8.onnx",
    "ssd_mobilenet_v2.onnx": MODELS / "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=200)
    args = parser.parse_args()
    frames = read_frames(VTEST, args.frames)
    print(f"# pre/post-processing vs inference, {len(frames)} frames of vtest.avi (768x576), ONNX Runtime CPU")
    print(f"# {machine()}")
    header = f"{'model':<24}{'pre p50':>9}{'pre p95':>9}{'post p50':>9}{'post p95':>9}{'pre+post p50':>14}"
    print(header + f"{'infer p50':>11}{'infer p95':>11}{'share':>7}{'CPU/frame':>11}  target")
    failed = False
    for name, path in CASES.items():
        detector = load_detector(DetectorConfig(str(path), backend="onnx"))
        stage_timings(detector, frames[:5], warm=0)  # warm up outside the CPU window
        cpu0 = time.process_time()
        timings = stage_timings(detector, frames, warm=0)
        cpu_ms = (time.process_time() - cpu0) * 1e3 / len(timings)
        detector.close()
        pre, post = [t.preprocess_ms for t in timings], [t.postprocess_ms for t in timings]
        infer = [t.inference_ms for t in timings]
        both = [a + b for a, b in zip(pre, post, strict=True)]
        overhead = pct(both, 50)
        ok = overhead <= 2.0
        failed |= not ok
        share = overhead / (overhead + pct(infer, 50))
        print(
            f"{name:<24}{pct(pre, 50):>9.2f}{pct(pre, 95):>9.2f}{pct(post, 50):>9.2f}{pct(post, 95):>9.2f}"
            f"{overhead:>14.2f}{pct(infer, 50):>11.2f}{pct(infer, 95):>11.2f}{share:>7.0%}{cpu_ms:>11.2f}"
            f"  {'ok' if ok else 'MISSED'}"
        )
    print("# times in ms; share = (pre+post) / (pre+post+inference) at the median")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
