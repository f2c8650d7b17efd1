"""`--backend auto`'s pick against the engine that is fastest in the pipeline, measured afresh each repetition.

    python -m benchmarks.auto_pick [--repeat 3] [--seconds 8]

Each repetition times the engines as `--backend auto` does (a fresh cache file: a new measurement), then runs the
service's pipeline (vtest.avi, file mode, unpaced, one stream) on every engine, in a rotating order, and compares
the pick's throughput with the fastest one's. CPU per frame (the kernel's) is printed beside fps.
Target (issue 23): pick / fastest >= 0.95 in every repetition.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from benchmarks.common import machine
from benchmarks.shared import run_service
from edge_inference.edge.detection.autoselect import auto_choice, candidates
from edge_inference.edge.settings import get_settings

MODEL = "yolox-nano"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8)
    args = parser.parse_args()
    print(f"# auto's pick vs the fastest engine in the pipeline, {MODEL}, {args.seconds:g} s per engine")
    print(f"# {machine()}")
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        for repetition in range(args.repeat):
            os.environ["EDGE_AUTO_CACHE"] = str(Path(folder) / f"auto-{repetition}.json")
            settings = get_settings()
            pick = auto_choice(MODEL, settings)
            engines = [c.backend for c in candidates(MODEL, settings)]
            order = engines[repetition % len(engines) :] + engines[: repetition % len(engines)]
            figures = {}
            for backend in order:
                result = run_service(MODEL, backend, args.seconds, 1, True, 1)
                figures[backend] = (float(result["fps"]), float(result["cpu_ms"]))  # type: ignore[arg-type]
            fastest = max(figures, key=lambda k: figures[k][0])
            ratio = figures[pick.backend][0] / figures[fastest][0]
            ratios.append(ratio)
            row = ", ".join(f"{k} {fps:.1f} fps {cpu:.1f} ms CPU" for k, (fps, cpu) in figures.items())
            print(f"repetition {repetition + 1}: auto picked {pick.backend}; pipeline {row}")
            print(f"  pick / fastest ({fastest}) {ratio:.3f}; auto said: {pick.reason}")
    worst = min(ratios)
    status = "met" if worst >= 0.95 else "MISSED"
    print(f"pick / fastest per repetition: {' '.join(f'{r:.3f}' for r in ratios)}; worst {worst:.3f}")
    print(f"target >= 0.95 every repetition: {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
