"""What running an engine in a process of its own costs (issue 57): CPU per frame (from the kernel, the service and
its engine process together) and memory, in-process (`isolation: thread`) against isolated (`isolation: process`),
per CPU engine and model, on a real `edge serve` reading vtest.avi as fast as the engine goes.

    python -m benchmarks.isolation [--seconds 20] [--rounds 2] [--threads 1]

Variants alternate within each round, so a busy moment of the machine falls on each alike. Memory: the service's
RSS, the engine process's, and their PSS together (shared library pages counted once between them). The rule the
default follows: a CPU engine is isolated by default where its CPU per frame isolated is within 3% of in-process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.common import MODELS, VTEST, machine
from tests.server import Server

CASES = [
    ("onnx", MODELS / "onnx/yolox_nano.onnx"),
    ("onnx", MODELS / "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx"),
    ("tflite", MODELS / "tflite/yolox_nano_float16_quantize.tflite"),
    ("tflite", MODELS / "tflite/ssd_mobilenet_v2_coco_quant_postprocess.tflite"),
    ("openvino", MODELS / "openvino/yolox_nano.xml"),
]
GOAL = 1.03


def _pss_mib(process: psutil.Process) -> float:
    try:
        return float(process.memory_full_info().pss) / 2**20
    except (psutil.Error, AttributeError):
        return float("nan")


def measure(engine: str, model: Path, isolation: str, seconds: float, threads: int, folder: Path) -> dict[str, float]:
    """One fresh service on one stream: CPU ms per frame and memory over `seconds` after it warmed up."""
    stream = {
        "id": "main",
        "source": str(VTEST),
        "loop": True,
        "pace": False,
        "model": str(model),
        "backend": engine,
        "device": "cpu",
        "threads": threads,
        "isolation": isolation,
    }
    config = folder / f"{engine}-{model.stem}-{isolation}.json"
    config.write_text(json.dumps({"streams": [stream]}))
    server = Server(["--config", str(config)], folder / "serve.log", env={"EDGE_AUTO_MEASURE": "0"})
    try:
        server.wait_until("/health/ready", timeout=180)
        server.wait_for_frames("main", 30, timeout=120)
        service = psutil.Process(server.process.pid)

        def cpu() -> float:
            total = sum(service.cpu_times()[:2])
            for child in service.children(recursive=True):
                try:
                    total += sum(child.cpu_times()[:2])
                except psutil.Error:
                    continue
            return total

        def frames() -> int:
            return int(server.client.get("/api/v1/stats").json()["streams"]["main"]["frames_processed"])

        cpu0, f0, t0 = cpu(), frames(), time.monotonic()
        time.sleep(seconds)
        cpu1, f1, t1 = cpu(), frames(), time.monotonic()
        children = service.children(recursive=True)
        return {
            "cpu_ms": (cpu1 - cpu0) * 1e3 / max(1, f1 - f0),
            "fps": (f1 - f0) / (t1 - t0),
            "service_rss": service.memory_info().rss / 2**20,
            "engine_rss": sum(c.memory_info().rss for c in children) / 2**20,
            "pss": _pss_mib(service) + sum(_pss_mib(c) for c in children),
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    results: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.rounds):
            for engine, model in CASES:
                for isolation in ("thread", "process"):
                    figures = measure(engine, model, isolation, args.seconds, args.threads, Path(folder))
                    results.setdefault((engine, model.name, isolation), []).append(figures)
                    print(f"  {engine} {model.name} {isolation}: {figures}", flush=True)
    print(f"machine: {machine()}; {args.threads} thread(s) per engine, {args.seconds:g} s per phase")
    print_table(results)


def print_table(results: dict[tuple[str, str, str], list[dict[str, float]]]) -> None:
    print(
        "| engine | model | CPU ms/frame in-process | isolated | ratio (each round) | fps in / iso | "
        "RSS service+engine MiB in / iso | PSS MiB in / iso |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for engine, model in CASES:
        inside, apart = results[(engine, model.name, "thread")], results[(engine, model.name, "process")]
        ratios = [a["cpu_ms"] / i["cpu_ms"] for i, a in zip(inside, apart, strict=True)]
        cpu_in, cpu_apart = (statistics.median(r["cpu_ms"] for r in rows) for rows in (inside, apart))
        fps_in, fps_apart = (statistics.median(r["fps"] for r in rows) for rows in (inside, apart))
        rss_in, rss_apart = (max(r["service_rss"] + r["engine_rss"] for r in rows) for rows in (inside, apart))
        pss_in, pss_apart = (max(r["pss"] for r in rows) for rows in (inside, apart))
        verdict = "within 3%" if statistics.median(ratios) <= GOAL else "above 3%"
        print(
            f"| {engine} | {model.name} | {cpu_in:.2f} | {cpu_apart:.2f} | "
            f"{statistics.median(ratios):.3f} ({', '.join(f'{r:.3f}' for r in ratios)}; {verdict}) | "
            f"{fps_in:.1f} / {fps_apart:.1f} | {rss_in:.0f} / {rss_apart:.0f} | {pss_in:.0f} / {pss_apart:.0f} |"
        )


if __name__ == "__main__":
    main()
