"""Each tier of the suite timed from a fresh clone: wall time and CPU (the kernel's count for pytest and every
process it started), side by side in one run.

    python -m benchmarks.suite_time                      every tier, one after another, then the whole suite
    python -m benchmarks.suite_time --tiers inprocess    one tier
    python -m benchmarks.suite_time --no-whole           the tiers alone

The clone is of this checkout's HEAD (commit first), in a temporary folder with a new venv of its own (this
Python's): the models and media come from EDGE_SHARED_DIR (default ../shared of this checkout). The whole suite runs
first, as the README says (`python3 tests/run.py`: the installs into that venv, then every tier in one run), so its
time holds what a new clone costs; then each tier alone (`pytest -m TIER`) in the same venv.
Goals on 2 cores: the in-process tier <= 120 s, the whole suite <= 600 s.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("EDGE_SHARED_DIR", REPO.parent / "shared")).resolve()
TIERS = {"inprocess": "not (process or system or minutes)", "process": "process", "system": "system"}
GOALS_S = {"inprocess": 120.0, "whole": 600.0}


@dataclass
class Timed:
    name: str
    wall_s: float
    cpu_s: float
    returncode: int
    summary: str


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(name: str, command: list[str], cwd: Path, log: Path) -> Timed:
    """`command` run to its end; CPU from the kernel's account of waited-for children (pytest and what it started,
    each reaped by its parent in turn)."""
    before_cpu, started = _children_cpu_s(), time.monotonic()
    env = {**os.environ, "EDGE_SHARED_DIR": str(SHARED)}
    with log.open("w") as out:
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    wall, cpu = time.monotonic() - started, _children_cpu_s() - before_cpu
    lines = log.read_text(errors="replace").splitlines()
    summary = next((line for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line)), "no summary")
    extra = [line for line in lines if line.startswith(("tiers: ", "tests/run.py: the suite took"))]
    return Timed(name, wall, cpu, done.returncode, "; ".join([summary.strip("= "), *extra]))


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiers", default="inprocess,process,system", help="comma-separated: " + ", ".join(TIERS))
    parser.add_argument("--no-whole", action="store_true", help="leave out the whole suite (tests/run.py)")
    parser.add_argument("--keep", action="store_true", help="keep the clone and the logs; say where")
    args = parser.parse_args()
    args.chosen = [tier for tier in args.tiers.split(",") if tier]
    unknown = [tier for tier in args.chosen if tier not in TIERS]
    if unknown:
        parser.error(f"no tier {unknown[0]!r}: one of {', '.join(TIERS)}")
    if not (SHARED / "models").is_dir():
        parser.error(f"the real models are not at {SHARED / 'models'}: set EDGE_SHARED_DIR")
    return args


def fresh_clone(folder: Path) -> tuple[Path, str, float]:
    """A clone of HEAD and a new venv beside it: the clone, the venv's Python, the seconds the venv took."""
    clone = folder / "edge-inference"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True).stdout
    print(f"fresh clone of {head.strip()} at {clone}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True)
    return clone, str(folder / "venv" / "bin" / "python"), time.monotonic() - started


def report(results: list[Timed]) -> None:
    print(f"\n{'run':<10} {'wall s':>8} {'CPU s':>8} {'CPU/wall':>8} {'goal s':>7}  result")
    for result in results:
        goal = GOALS_S.get(result.name)
        verdict = "" if goal is None else ("met" if result.wall_s <= goal else "MISSED")
        print(
            f"{result.name:<10} {result.wall_s:8.1f} {result.cpu_s:8.1f} {result.cpu_s / result.wall_s:8.2f} "
            f"{'' if goal is None else f'{goal:.0f}':>7}  {verdict} {result.summary}"
        )


def main() -> int:
    args = arguments()
    folder = Path(tempfile.mkdtemp(prefix="edge-suite-time-"))
    clone, python, venv_s = fresh_clone(folder)
    results = []
    if args.no_whole:  # the tiers need the project in the venv all the same
        subprocess.run([python, "-m", "pip", "install", "-q", "-e", ".[test]"], cwd=clone, check=True)
    else:  # first: the installs of a new clone are part of what it measures
        print("the whole suite (python3 tests/run.py) ...", flush=True)
        whole = timed("whole", [python, "tests/run.py"], clone, folder / "whole.log")
        whole.wall_s += venv_s  # the venv's making is part of a new clone's cost
        results.append(whole)
    for tier in args.chosen:
        print(f"tier {tier} ...", flush=True)
        command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", TIERS[tier]]
        results.append(timed(tier, command, clone, folder / f"{tier}.log"))
    report(results)
    print(f"logs: {folder}" if args.keep else "")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(folder)], check=False)
    return 0 if all(result.returncode == 0 for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
