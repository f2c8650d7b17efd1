"""How long `edge` takes before it answers: this tree against another, side by side.

    python -m benchmarks.cli_start [--against /path/to/other/checkout] [--rounds 5]

Each command runs in a fresh process (`python -m edge_inference`), alternating between the trees every round, and
the kernel's CPU seconds of the child (rusage) are read beside its wall time; medians over the rounds, and this
tree's CPU as a ratio of the other's. The commands: a config that is not valid YAML (the answer is one line), `edge
--help`, and `edge detect` on one photo with a named engine (no measurement), the model from the shared mirror.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import MEDIA, REPO, machine

BAD_YAML = "streams:\n  - id: a\n    source: x\n    bad: [\n"


def commands(folder: Path) -> dict[str, list[str]]:
    config = folder / "bad.yaml"
    config.write_text(BAD_YAML)
    photo = str(MEDIA / "cat_720p.jpg")
    return {
        "serve, config not valid YAML": ["serve", "--config", str(config)],
        "--help": ["--help"],
        "detect one photo, -b onnx": ["detect", photo, "-m", "yolox-nano", "-b", "onnx", "--json"],
    }


def timed(tree: Path, args: list[str], folder: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one run of `edge args` from `tree`, started in `folder` (`-m`
    puts the working folder first on the path: started in a checkout, that checkout's package would run)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    command = [sys.executable, "-m", "edge_inference", *args]
    subprocess.run(command, env=env, cwd=folder, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="another checkout of this repository (a git worktree)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trees = {"this tree": REPO} | ({"other tree": args.against.resolve()} if args.against else {})
    print(f"# edge's start: fresh processes, {args.rounds} alternated rounds, medians; {machine()}")
    with tempfile.TemporaryDirectory() as folder:
        for name, command in commands(Path(folder)).items():
            figures: dict[str, list[tuple[float, float]]] = {tree: [] for tree in trees}
            for _ in range(args.rounds):
                for tree, path in trees.items():
                    figures[tree].append(timed(path, command, Path(folder)))
            cpu = {tree: statistics.median(c for _, c in runs) for tree, runs in figures.items()}
            line = [f"{name:<30}"]
            for tree, runs in figures.items():
                line.append(f"{tree}: wall {statistics.median(w for w, _ in runs):.2f} s, CPU {cpu[tree]:.2f} s")
            if "other tree" in cpu:
                line.append(f"CPU this / other {cpu['this tree'] / cpu['other tree']:.2f}")
            print("  ".join(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
