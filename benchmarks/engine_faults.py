"""The fault matrix's engine rows (issue 57): an engine that aborts, segfaults or hangs in native code, beside a
stream on ONNX Runtime in the service's own process. The engine is tests/plugins/crashing_engine.py (ONNX Runtime
underneath, dying on its Nth inference), installed as a plugin distribution is; plugins run isolated by default.

    python -m benchmarks.faults --only engine-abort engine-segfault engine-hang
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.common import MODELS, VTEST
from benchmarks.fault_rows import Row, Served, measured
from tests.helpers import install_engine_plugin

PLUGIN = Path(__file__).parents[1] / "tests" / "plugins" / "crashing_engine.py"
SSD = str(MODELS / "onnx" / "ssd_mobilenet_v2_coco_quant_postprocess.onnx")
YOLOX = str(MODELS / "onnx" / "yolox_nano.onnx")
DEATHS = 3
LOGGED = {
    "abort": "died: SIGABRT",
    "segfault": "died: SIGSEGV",
    "hang": "hung: no answer in 2 s; its process was killed",
}


def _config(folder: Path, how: str) -> Path:
    crashy = {"id": "crashy", "source": str(VTEST), "loop": True, "model": YOLOX, "backend": "crashy"}
    crashy |= {"engine_options": {"crashy": {"how": how, "after": 40}}, "inference_timeout_s": 2}
    steady = {"id": "steady", "source": str(VTEST), "loop": True, "model": SSD, "backend": "onnx"}
    config = folder / "streams.json"
    config.write_text(json.dumps({"streams": [steady, crashy]}))
    return config


class Gaps:
    """The steady stream's longest wait between new frames, and the crashy one's recovery after each death."""

    def __init__(self, server: Served) -> None:
        self.server = server
        self.longest = 0.0
        self.recoveries: list[float] = []
        self._crashy_then = 0
        self._steady, self._steady_at = -1, time.monotonic()
        self._died_at: float | None = None
        self._deaths_seen = 0

    def poll(self, logged: str) -> None:
        now = time.monotonic()
        frames = self.server.client.get("/api/v1/stats").json()["streams"]
        steady = frames["steady"]["frames_processed"]
        if steady != self._steady:
            if self._steady >= 0:
                self.longest = max(self.longest, now - self._steady_at)
            self._steady, self._steady_at = steady, now
        deaths = self.server.log.count(f"edge.detectors: the crashy engine (yolox_nano.onnx on crashy0) {logged}")
        if deaths > self._deaths_seen:
            self._deaths_seen, self._died_at = deaths, now
            self._crashy_then = frames["crashy"]["frames_processed"]
        elif self._died_at is not None and frames["crashy"]["frames_processed"] > self._crashy_then:
            self.recoveries.append(now - self._died_at)
            self._died_at = None


def engine_death_case(how: str) -> Row:
    with tempfile.TemporaryDirectory() as folder:
        site = install_engine_plugin(Path(folder) / "site", "crashy", PLUGIN.read_text())
        env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
        server = Served(["--config", str(_config(Path(folder), how))], env)
        try:
            server.wait(lambda: server.answers("/health/ready"), 180)
            gaps = Gaps(server)

            def deaths() -> tuple[str, str]:
                degraded = set()
                while len(gaps.recoveries) < DEATHS:
                    gaps.poll(LOGGED[how])
                    ready = server.client.get("/health/ready").json()
                    error = ready["streams"].get("crashy", {}).get("error") or ""
                    if ready["status"] == "degraded" and "crashy engine" in error:
                        degraded.add(error)
                    time.sleep(0.1)
                workers = [c for c in server.ps.children(recursive=True) if "isolated_worker" in " ".join(c.cmdline())]
                said = f"'{min(degraded, key=len)}'" if degraded else "never degraded"
                return (
                    f"{DEATHS} deaths; steady stream's longest gap {gaps.longest:.1f} s, errors "
                    f"{server.client.get('/api/v1/stats').json()['streams']['steady']['errors']}; "
                    f"ready degraded: {said}; engine processes now {len(workers)}",
                    "published again " + ", ".join(f"{r:.1f}" for r in gaps.recoveries) + " s after each death",
                )

            return measured(server, f"an isolated engine that {how}s on its 40th inference", deaths)
        finally:
            server.stop()
            left = [
                p for p in psutil.process_iter(["cmdline"]) if "isolated_worker" in " ".join(p.info["cmdline"] or ())
            ]
            if left:
                print(f"  engine processes left after stop: {len(left)}", flush=True)
