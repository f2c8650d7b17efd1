"""Local ONNX Runtime vs a Triton Inference Server on the same machine (issue 60), and a server gone mid-stream.

    python -m benchmarks.triton [--seconds 20] [--rounds 2] [--outage 20]

A real Triton (NVIDIA's PyTriton, `tests/triton.py`; the model run by ONNX Runtime on one thread in its Python
backend) serves yolox-nano from the repository `edge models export-triton` writes, twice: with dynamic batching
(max_batch_size 8) and without (max_batch_size 0).

1. One loop of frames (vtest.avi, pre-read), each variant in a fresh process: the local ONNX engine on one thread
   (its cheapest CPU per frame) against the remote engine over HTTP and gRPC, with system shared memory and
   without, the model taking pixels (export-triton's default) and its own float input (`--input tensor`). Frames
   per second, the edge process's CPU per frame, and the server's (its process group's, from /proc) beside it.
   Target: the edge's CPU per frame remote <= 0.5 of local.
2. 1 and 4 streams (files, unpaced: every frame, lanes in flight) on one server, batching on and off: total
   frames per second, and the batch sizes Triton's statistics show it ran. Targets: with 4 streams the server
   forms batches above 1, and total fps with dynamic batching >= without.
3. A service with a remote stream and a local one; the server killed for `--outage` seconds, then started again:
   seconds until the stream says so (target <= 5), the local stream's frames meanwhile, seconds until frames flow
   again after the server is back, and whether the log holds a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from io import StringIO
from pathlib import Path
from typing import Any

from benchmarks.common import MODELS, VTEST, machine, read_frames
from edge_inference.edge.detection.timings import process_cpu_seconds
from tests.triton import TritonServer, export

YOLOX = MODELS / "onnx" / "yolox_nano.onnx"
BATCHED, SINGLE, TENSOR = "yolox_batched", "yolox_single", "yolox_tensor"  # TENSOR: `--input tensor`


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds of every live process in a process group (the server: PyTriton, tritonserver, its stubs)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: the process group
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def loop_child(model: str, backend: str, memory: str, seconds: float) -> dict[str, float]:
    from edge_inference.edge.detection.loader import DetectorConfig, load_detector

    options = {"triton": {"shared_memory": memory}} if backend == "triton" else {}
    threads = 1 if backend == "onnx" else None
    detector = load_detector(DetectorConfig(model, backend=backend, threads=threads, engine_options=options))
    frames = read_frames(VTEST, 50)
    for frame in frames[:5]:
        detector.detect(frame)
    done, started, cpu0 = 0, time.monotonic(), process_cpu_seconds()
    while time.monotonic() - started < seconds:
        detector.detect(frames[done % len(frames)])
        done += 1
    elapsed, cpu = time.monotonic() - started, process_cpu_seconds() - cpu0
    detector.close()
    return {"fps": done / elapsed, "cpu_ms": cpu * 1e3 / done, "frames": done}


def loop_variant(server: TritonServer, name: str, args: argparse.Namespace) -> dict[str, float]:
    model, backend, memory = {
        "local onnx (1 thread)": (str(YOLOX), "onnx", "off"),
        "triton http": (server.http(SINGLE), "triton", "off"),
        "triton http + shm": (server.http(SINGLE), "triton", "system"),
        "triton grpc": (server.grpc(SINGLE), "triton", "off"),
        "triton grpc + shm": (server.grpc(SINGLE), "triton", "system"),
        "triton http, float input": (server.http(TENSOR), "triton", "off"),
        "triton grpc, float input": (server.grpc(TENSOR), "triton", "off"),
    }[name]
    pgid = server.process.pid if server.process else 0
    server0 = group_cpu_seconds(pgid)
    command = [sys.executable, "-m", "benchmarks.triton", "--loop-child", model, backend, memory]
    out = subprocess.run([*command, "--seconds", str(args.seconds)], capture_output=True, text=True, check=False)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{name} failed:\n{out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(line[7:])
    result["server_cpu_ms"] = 0.0 if backend == "onnx" else (group_cpu_seconds(pgid) - server0) * 1e3 / result["frames"]
    return result


def batch_sizes(server: TritonServer, model: str) -> dict[int, int]:
    import tritonclient.http as httpclient

    from edge_inference.backends.triton_times import batch_sizes as sizes

    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        return sizes(client.get_inference_statistics(model)["model_stats"][0])
    finally:
        client.close()


def streams_child(model: str, streams: int, seconds: float) -> dict[str, Any]:
    from benchmarks.shared import run_service

    found = run_service(model, "triton", seconds, streams, share=True, batch=1)
    return {"fps": found["fps"], "cpu_ms": found["cpu_ms"]}


def streams_variant(server: TritonServer, model: str, streams: int, seconds: float) -> dict[str, Any]:
    """In a process of its own: the server is this process's child, and the kernel's count would include it."""
    before = batch_sizes(server, model)
    command = [sys.executable, "-m", "benchmarks.triton", "--streams-child", server.grpc(model), str(streams)]
    out = subprocess.run([*command, "--seconds", str(seconds)], capture_output=True, text=True, check=False)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{model} with {streams} streams failed:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(line[7:])
    after = batch_sizes(server, model)
    ran = {size: after.get(size, 0) - before.get(size, 0) for size in after}
    result["batches"] = {k: v for k, v in ran.items() if v}
    return result


def outage(server: TritonServer, seconds: float) -> dict[str, Any]:
    """Seconds to say the server is gone, the local stream's frames meanwhile, seconds to resume after it is back."""
    from edge_inference.edge.config import ServiceConfig, StreamConfig
    from edge_inference.edge.runtime.streams import StreamManager

    log = StringIO()
    handler = logging.StreamHandler(log)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    config = ServiceConfig(
        streams=[
            StreamConfig(id="remote", source=str(VTEST), model=server.grpc(SINGLE), loop=True),
            StreamConfig(id="local", source=str(VTEST), model=str(YOLOX), backend="onnx", loop=True),
        ]
    )
    manager = StreamManager(config)
    manager.start()
    remote, local = manager.pipelines["remote"], manager.pipelines["local"]
    try:
        while remote.stats.frames_processed < 20:
            time.sleep(0.1)
        server.kill()
        killed = time.monotonic()
        while remote.state != "failed":
            time.sleep(0.05)
        said_s, said = time.monotonic() - killed, remote.error
        local_before = local.stats.frames_processed
        time.sleep(max(0.0, seconds - (time.monotonic() - killed)))
        local_frames = local.stats.frames_processed - local_before
        server.start()
        back = time.monotonic()
        frames = remote.stats.frames_processed
        while remote.stats.frames_processed < frames + 5 or remote.state != "running":
            time.sleep(0.05)
        resumed_s = time.monotonic() - back
    finally:
        manager.stop()
        logging.getLogger().removeHandler(handler)
    return {
        "said_s": said_s,
        "error": said,
        "local_frames": local_frames,
        "resumed_s": resumed_s,
        "traceback": "Traceback" in log.getvalue(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--outage", type=float, default=20)
    parser.add_argument("--only", default="loops,streams,outage", help="which parts, comma-separated")
    parser.add_argument("--loop-child", nargs=3, metavar=("MODEL", "BACKEND", "MEMORY"))
    parser.add_argument("--streams-child", nargs=2, metavar=("MODEL", "STREAMS"))
    args = parser.parse_args()
    if args.streams_child:
        model, count = args.streams_child
        print("RESULT " + json.dumps(streams_child(model, int(count), args.seconds)))
        return 0
    if args.loop_child:
        model, backend, memory = args.loop_child
        print("RESULT " + json.dumps(loop_child(model, backend, memory, args.seconds)))
        return 0
    print(f"# {machine()}; {args.seconds:g} s per run, {args.rounds} rounds, rotated")
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder) / "models"
        export(repository, str(YOLOX), BATCHED, max_batch_size=8)
        export(repository, str(YOLOX), SINGLE, max_batch_size=0)
        export(repository, str(YOLOX), TENSOR, max_batch_size=0, pixels=False)
        server = TritonServer(repository, [BATCHED, SINGLE, TENSOR], Path(folder) / "triton.log").start()
        try:
            return run_all(server, args)
        finally:
            server.stop()


def run_all(server: TritonServer, args: argparse.Namespace) -> int:
    parts = {"loops": run_loops, "streams": run_streams, "outage": run_outage}
    for name in args.only.split(","):
        parts[name.strip()](server, args)
    return 0


def run_loops(server: TritonServer, args: argparse.Namespace) -> None:
    names = [
        "local onnx (1 thread)",
        "triton http",
        "triton http + shm",
        "triton grpc",
        "triton grpc + shm",
        "triton http, float input",
        "triton grpc, float input",
    ]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            runs[name].append(loop_variant(server, name, args))
    print("\n## one loop of frames (edge process CPU from the kernel; the server's from its process group)")
    local_cpu = statistics.median(r["cpu_ms"] for r in runs[names[0]])
    for name in names:
        fps = statistics.median(r["fps"] for r in runs[name])
        cpu = statistics.median(r["cpu_ms"] for r in runs[name])
        served = statistics.median(r["server_cpu_ms"] for r in runs[name])
        ratio = cpu / local_cpu
        verdict = (
            ""
            if name == names[0]
            else f"  edge CPU / local {ratio:.3f} (target <= 0.5: {'met' if ratio <= 0.5 else 'MISSED'})"
        )
        print(f"{name:<24}{fps:7.1f} fps  edge {cpu:6.2f} ms CPU/frame  server {served:6.2f} ms CPU/frame{verdict}")


def run_streams(server: TritonServer, args: argparse.Namespace) -> None:
    print(
        "\n## streams on one server over gRPC (files unpaced, one shared engine; batch sizes from Triton's statistics)"
    )
    totals: dict[tuple[str, int], list[float]] = {}
    for round_ in range(args.rounds):
        for model in [BATCHED, SINGLE] if round_ % 2 == 0 else [SINGLE, BATCHED]:
            for streams in (1, 4):
                found = streams_variant(server, model, streams, args.seconds)
                totals.setdefault((model, streams), []).append(found["fps"])
                print(
                    f"{model:<14} {streams} stream(s) {found['fps']:7.1f} fps  edge {found['cpu_ms']:6.2f} ms CPU/frame"
                    f"  server batches {found['batches']}"
                )
    on, off = statistics.median(totals[(BATCHED, 4)]), statistics.median(totals[(SINGLE, 4)])
    print(
        f"4 streams: dynamic batching {on:.1f} fps vs none {off:.1f}: ratio {on / off:.3f} "
        f"(target >= 1: {'met' if on >= off else 'MISSED'})"
    )


def run_outage(server: TritonServer, args: argparse.Namespace) -> None:
    print(f"\n## server killed for {args.outage:g} s mid-stream")
    found = outage(server, args.outage)
    print(
        f"said after {found['said_s']:.2f} s (target <= 5: {'met' if found['said_s'] <= 5 else 'MISSED'}): "
        f"{found['error']}"
    )
    print(
        f"local stream meanwhile: {found['local_frames']} frames; resumed {found['resumed_s']:.2f} s after the server "
        f"was back; traceback in the log: {found['traceback']}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
