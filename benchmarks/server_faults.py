"""The fault matrix's hostile-server rows (issue 77): a remote model on an Open Inference Protocol server that
answers wrong (tests/kserve_server.py, our own server running yolox-nano, in this process), beside a stream on ONNX
Runtime in the service. For each misbehaviour: what the remote stream says, the service's RSS against its normal,
the local stream's longest gap between frames, and how long the remote stream takes to publish again once the
server answers right.

    python -m benchmarks.faults --only server-flood server-trickle server-never server-wrong-shape ...
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import MODELS, VTEST
from benchmarks.fault_rows import Row, Served, measured
from tests.kserve_server import kserve_server

SSD = str(MODELS / "onnx" / "ssd_mobilenet_v2_coco_quant_postprocess.onnx")
YOLOX = MODELS / "onnx" / "yolox_nano.onnx"
WATCHED_S = 20.0
WHAT = {
    "none": "answers right (the control: how RSS and the gaps move anyway)",
    "flood": "sends 845 MB (Content-Length) for a 1.2 MB output",
    "flood-chunked": "streams 845 MB without a length",
    "trickle": "sends its answer a byte every 0.5 s",
    "never": "never answers",
    "reset": "resets the connection mid-answer",
    "wrong-shape": "answers half the declared shape",
    "nan": "answers NaN",
    "error": "answers 500",
}


def _config(folder: Path, reference: str) -> Path:
    steady = {"id": "steady", "source": str(VTEST), "loop": True, "model": SSD, "backend": "onnx"}
    remote = {"id": "remote", "source": str(VTEST), "loop": True, "model": reference}
    remote |= {"engine_options": {"triton": {"timeout_s": 2, "shared_memory": "off"}}}
    config = folder / "streams.json"
    config.write_text(json.dumps({"streams": [steady, remote]}))
    return config


def _frames(server: Served) -> dict[str, int]:
    streams = server.client.get("/api/v1/stats").json()["streams"]
    return {name: int(streams[name]["frames_processed"]) for name in ("steady", "remote")}


def server_fault_case(how: str) -> Row:
    with tempfile.TemporaryDirectory() as folder, kserve_server("yolox_nano", YOLOX) as (reference, model):
        server = Served(["--config", str(_config(Path(folder), reference))])
        try:
            server.wait(lambda: server.answers("/health/ready"), 180)
            server.wait(lambda: min(_frames(server).values()) > 10, 180)
            normal = statistics.median(_sampled_rss(server, 5.0))

            def misbehaving() -> tuple[str, str]:
                model.misbehave = how
                peak, longest, said = normal, 0.0, ""
                last, last_at = _frames(server)["steady"], time.monotonic()
                ends = time.monotonic() + WATCHED_S
                while time.monotonic() < ends:
                    now, steady = time.monotonic(), _frames(server)["steady"]
                    if steady != last:
                        longest, last, last_at = max(longest, now - last_at), steady, now
                    peak = max(peak, server.rss_mib())
                    remote = server.stream("remote")
                    said = remote.get("error") or said
                    time.sleep(0.05)
                longest = max(longest, time.monotonic() - last_at)
                state = server.stream("remote")["state"]
                model.misbehave = "none"
                before, fixed_at = _frames(server)["remote"], time.monotonic()
                server.wait(lambda: _frames(server)["remote"] > before + 2, 120)
                recovery = time.monotonic() - fixed_at
                return (
                    f"remote stream {state}: '{said[:160]}'; service RSS peak {peak / normal:.2f}x its normal "
                    f"({normal:.0f} -> {peak:.0f} MiB); local stream's longest gap {longest:.1f} s",
                    f"publishing again {recovery:.1f} s after the server answered right",
                )

            return measured(server, f"a KServe server that {WHAT[how]}", misbehaving)
        finally:
            server.stop()


def _sampled_rss(server: Served, seconds: float) -> list[float]:
    samples, ends = [], time.monotonic() + seconds
    while time.monotonic() < ends:
        samples.append(server.rss_mib())
        time.sleep(0.1)
    return samples
