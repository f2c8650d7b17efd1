"""Memory of an engine's lanes: what a 4-core machine's plan (4 cameras sharing one engine: 4 lanes of 1 thread)
costs over one lane, per engine and model.

    python -m benchmarks.lanes_memory
    python -m benchmarks.lanes_memory --limit 200               # as root: 6 lanes wanted inside a 200 MiB cgroup
    python -m benchmarks.lanes_memory --limit 180 --lanes 2     # this machine's plan for a file: 2 lanes of 1 thread

Each figure is a fresh process that loads the engine through the service's own pool (copies for LiteRT, one
session for ONNX Runtime, a CPU stream per lane for OpenVINO), runs every lane at once ten times on a blank frame,
and prints its peak RSS. Memory does not depend on the cores' count or speed, so this 2-core machine gives the
figure a 4-core Raspberry Pi would (the engines' arenas are the same size on arm64).

`--limit MIB` runs yolov8n int8 with `--lanes` lanes of one thread wanted (6 by default) on LiteRT (an interpreter
per lane) and on ONNX Runtime (one session, an inference's working memory per lane), each time in a fresh child of
this process's memory cgroup limited to MIB (a small board, or `docker run --memory`), three ways: the pool as the
service builds it, which keeps a lane only while the memory left keeps its reserve and gives the lanes kept the
threads of those held back; the same with the threads given by the user (kept as given); and the pool with its
memory check off (every lane, as before it). Each prints the lanes and threads kept, how the process ended, the
throughput of as many callers as lanes wanted running back to back (fps and CPU ms a frame) and its peak RSS.
Needs root and cgroup v1 or v2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np

from benchmarks.common import MODELS, machine, peak_rss_mib
from edge_inference.backends import BackendOptions
from edge_inference.edge.detection.detector_pool import DetectorPool
from edge_inference.edge.detection.memory import own_memory_cgroup

CASES = {
    "yolox-nano (onnx)": ("onnx", "onnx/yolox_nano.onnx"),
    "yolov8n int8 (onnx)": ("onnx", "onnx/yolov8n_int8.onnx"),
    "yolox-nano IR (openvino)": ("openvino", "openvino/yolox_nano.xml"),
    "yolox-nano fp16 (tflite)": ("tflite", "tflite/yolox_nano_float16_quantize.tflite"),
    "yolov8n int8 (tflite)": ("tflite", "tflite/yolov8n_full_integer_quant.tflite"),
}
LANES = (1, 2, 4)
RUNS = 10
LIMITED = (("tflite", "tflite/yolov8n_full_integer_quant.tflite"), ("onnx", "onnx/yolov8n_int8.onnx"))
LIMITED_LANES = 6


GUARDS = {
    "planned": "the service's pool",  # memory check on; the threads are the thread budget's, as a stream's are
    "on": "the service's pool, threads given",  # memory check on; threads: 1 given by the user, as on a stream
    "off": "memory check off (every lane)",
}


def one(engine: str, model: str, lanes: int, guard: str = "on") -> float:
    """Peak RSS (MiB) of this process after loading `lanes` lanes of one thread and running them all at once;
    printed before it: the lanes and threads the pool kept, then the throughput of `lanes` callers running back to
    back (a file keeping every lane busy): fps and CPU ms per frame."""
    pool = DetectorPool() if guard != "off" else DetectorPool(memory=lambda: None)
    options = BackendOptions(threads=1)
    handle = pool.acquire("bench", engine, MODELS / model, options, 10.0, lanes, guard == "planned")
    assert handle.shared is not None
    print(f"lanes {handle.lanes}", flush=True)  # fewer than asked where memory held some back
    print(f"threads {handle.shared.threads}", flush=True)
    tensor = handle.inputs[0]
    shape = [d if d > 0 else 1 for d in tensor.shape]  # a dynamic dimension (-1): one
    blank = np.zeros(shape, dtype=tensor.dtype)
    together = threading.Barrier(lanes)

    def caller() -> None:
        together.wait()
        for _ in range(RUNS):
            handle.run(blank)

    for phase in ("warm", "timed"):
        workers = [threading.Thread(target=caller) for _ in range(lanes)]
        wall, cpu = time.perf_counter(), time.process_time()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        frames = lanes * RUNS
        if phase == "timed":
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"fps {frames / wall:.2f} cpu {cpu * 1e3 / frames:.1f}", flush=True)
    handle.close()
    return peak_rss_mib()


def measured(engine: str, model: str, lanes: int) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.lanes_memory", "--one", engine, model, str(lanes)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def limited_cgroup(limit_mib: int) -> Path:
    """A new child of this process's memory cgroup, limited to `limit_mib` (v1 or v2 names), without swap."""
    parent = own_memory_cgroup()
    if parent is None:
        raise SystemExit("--limit: no memory cgroup found under /sys/fs/cgroup")
    folder = parent / f"edge-lanes-{os.getpid()}"
    try:
        folder.mkdir()
        v2 = (folder / "memory.max").exists()
        (folder / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(limit_mib * 2**20))
        (folder / ("memory.swap.max" if v2 else "memory.swappiness")).write_text("0")
    except OSError as exc:
        with contextlib.suppress(OSError):
            folder.rmdir()
        raise SystemExit(
            f"--limit needs root and a memory cgroup it may make a child in ({exc}): cgroup v1, or v2 with the memory"
            " controller delegated (e.g. under `systemd-run --scope -p Delegate=yes`)"
        ) from exc
    return folder


def _join(folder: Path) -> None:
    """In the child, before it runs Python: move itself into the cgroup."""
    (folder / "cgroup.procs").write_text(str(os.getpid()))


def under_limit(limit_mib: int, lanes: int) -> None:
    print(f"# {lanes} lanes of one thread wanted, in a {limit_mib} MiB memory cgroup each time; {machine()}")
    for engine, model in LIMITED:
        print(f"{model} on {engine}")
        for guard, name in GUARDS.items():
            _limited_run(limit_mib, engine, model, lanes, f"  {name}", guard)


def _limited_run(limit_mib: int, engine: str, model: str, lanes: int, name: str, guard: str) -> None:
    """One fresh process in a fresh cgroup of `limit_mib`: lanes and threads kept, how it ended, its throughput
    and peak RSS."""
    folder = limited_cgroup(limit_mib)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.lanes_memory", "--one", engine, model, str(lanes), guard],
            capture_output=True,
            text=True,
            check=False,
            preexec_fn=partial(_join, folder),
        )
    finally:
        folder.rmdir()
    lines = out.stdout.strip().splitlines()
    said = {line.split()[0]: line.split()[1:] for line in lines if line.split()}
    kept = f"{said.get('lanes', ['?'])[0]} of {lanes} lanes x {said.get('threads', ['?'])[0]} threads"
    if out.returncode != 0:
        print(f"{name:<37} {kept}: killed (exit {out.returncode}), no figure")
        return
    fps, _, cpu = said["fps"]
    print(f"{name:<37} {kept}: ran, {fps} fps at {cpu} ms of CPU a frame, peak RSS {lines[-1]} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs="+", metavar="ENGINE MODEL LANES [on|off]", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, metavar="MIB", help="lanes inside a memory cgroup of MIB (root)")
    parser.add_argument("--lanes", type=int, default=LIMITED_LANES, help="lanes wanted under --limit")
    args = parser.parse_args()
    if args.one:
        engine, model, lanes, *guard = args.one
        print(f"{one(engine, model, int(lanes), *guard):.0f}")
        return 0
    if args.limit:
        under_limit(args.limit, args.lanes)
        return 0
    print(f"# peak RSS (MiB) with every lane running at once, fresh process each; {machine()}")
    for name, (engine, model) in CASES.items():
        peaks = {lanes: measured(engine, model, lanes) for lanes in LANES}
        extra = (peaks[LANES[-1]] - peaks[1]) / (LANES[-1] - 1)
        row = " | ".join(f"{lanes} lane{'s' if lanes > 1 else ''} {peak:4.0f}" for lanes, peak in peaks.items())
        print(f"{name:<26} {row} | per extra lane +{extra:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
