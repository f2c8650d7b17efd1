"""The cost of comparing: two backends live on one source, each pipeline's fps, and API latency under that load.

    python -m benchmarks.compare [--seconds 20]

Runs a real `edge serve --compare onnx,openvino` on vtest.avi (file paced at its 10 fps, and unpaced), reads each
pipeline's processed and dropped fps from /api/v1/compare, and times API requests made meanwhile. Beside the fps:
the service process's CPU ms per frame processed (both pipelines' frames), from the kernel over the same window.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from benchmarks.common import VTEST, machine, pct
from tests.server import running_server

ENDPOINTS = ("/api/v1/streams", "/api/v1/stats", "/api/v1/compare", "/api/v1/streams/main-onnx/detections/latest")


def run(paced: bool, seconds: float) -> None:
    args = ["--source", str(VTEST), "--model", "yolox-nano", "--compare", "onnx,openvino:CPU", "--loop"]
    if not paced:
        args.append("--no-pace")
    with tempfile.TemporaryDirectory() as tmp, running_server(args, Path(tmp) / "log") as server:
        server.wait_until("/health/ready", timeout=120)
        server.wait_for_frames("main-openvino", 20)
        latencies: dict[str, list[float]] = {e: [] for e in ENDPOINTS}
        process = psutil.Process(server.process.pid)
        deadline = time.monotonic() + seconds
        with httpx.Client(base_url=server.base, timeout=10) as client:
            cpu0, frames0 = _cpu_seconds(process), _frames(client)
            while time.monotonic() < deadline:
                for endpoint in ENDPOINTS:
                    t0 = time.perf_counter()
                    assert client.get(endpoint).status_code == 200
                    latencies[endpoint].append((time.perf_counter() - t0) * 1e3)
                time.sleep(0.05)
            groups = client.get("/api/v1/compare").json()
            cpu_ms = (_cpu_seconds(process) - cpu0) * 1e3 / max(1, _frames(client) - frames0)
    label = "paced at 10 fps" if paced else "unpaced (as fast as the source decodes)"
    print(f"\n## two backends live, {label}")
    for row in groups[0]["backends"]:
        lat = row["latency_ms"]
        print(
            f"  {row['stream']:<15} {row['device']:<22} processed {row['fps_processed']:6.1f} fps, dropped "
            f"{row['fps_dropped']:6.1f} fps, inference p50/p95 {lat['inference']['p50']:.1f}/"
            f"{lat['inference']['p95']:.1f} ms, agreement {row['agreement']['map50']}"
        )
    print(f"  service CPU per frame processed (both pipelines): {cpu_ms:.2f} ms")
    every = [v for values in latencies.values() for v in values]
    print(
        f"  API under that load: {len(every)} requests, p50 {pct(every, 50):.1f} ms, p95 {pct(every, 95):.1f} ms, "
        f"max {max(every):.1f} ms"
    )
    for endpoint, values in latencies.items():
        print(f"    {endpoint:<48} p95 {pct(values, 95):.1f} ms")


def _cpu_seconds(process: psutil.Process) -> float:
    """The service's CPU seconds, its threads and any children it has waited for."""
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def _frames(client: httpx.Client) -> int:
    streams = client.get("/api/v1/stats").json()["streams"]
    return sum(int(s["frames_processed"]) for s in streams.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    print(f"# cost of live comparison, yolox-nano on ONNX Runtime CPU and OpenVINO CPU\n# {machine()}")
    run(True, args.seconds)
    run(False, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
