"""`edge bench`: every model x backend pair on the same decoded frames, with latency, cost and agreement."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import psutil

from edge_inference.backends import BackendError, engine_keys
from edge_inference.backends.engine import serving_engine
from edge_inference.backends.names import backend_named
from edge_inference.edge.config import compared
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.model_files import model_for_engine
from edge_inference.edge.detection.timings import StageTimings
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings
from edge_inference.edge.stream.sources import open_source
from edge_inference.models.agreement import Agreement, agreement
from edge_inference.models.detection import Detection
from edge_inference.models.errors import ModelError
from edge_inference.models.tiles import Tiling


@dataclass(frozen=True)
class Pair:
    model: str  # as the user named it: a registry name, a family, or a file
    backend: str
    device: str = "auto"
    regions: str = "full"  # full: the whole frame; tiles: overlapping tiles at the model's scale (models/tiles.py)

    @property
    def label(self) -> str:
        device = "" if self.device == "auto" else f":{self.device}"
        return f"{self.model} @ {self.backend}{device}" + ("" if self.regions == "full" else f" on {self.regions}")


@dataclass
class PairResult:
    pair: Pair
    file: str | None = None  # the registry entry or path that ran
    engine: str | None = None
    device: str | None = None  # what actually ran it
    reason: str | None = None  # why it could not run here
    timings: list[StageTimings] = field(default_factory=list)
    detections: list[list[Detection]] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # the process's CPU over the timed frames, from the kernel
    peak_rss_mib: float = 0.0
    agreement: Agreement | None = None
    reference: bool = False

    @property
    def ok(self) -> bool:
        return self.reason is None and bool(self.timings)

    @property
    def fps(self) -> float:
        return len(self.timings) / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_percent(self) -> float:
        """Of one core: 100 is one core busy throughout."""
        return 100 * self.cpu_s / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_ms_per_frame(self) -> float:
        """What a frame costs in CPU, all threads: unlike fps, it holds when other programs take the cores."""
        return self.cpu_s * 1e3 / len(self.timings) if self.timings else 0.0


def parse_backends(text: str) -> list[tuple[str, str]]:
    """'onnx,openvino:CPU,onnx:cuda' -> [(onnx, auto), (openvino, CPU), (onnx, cuda)]; a model on a server
    (`triton+grpc://gpu:8001/yolox_nano`) is a backend too, and so is an engine on another model
    (`onnx@yolox-nano-int8`): every model's pair with it runs that model, scored against the model's other pairs
    (local CPU against a remote GPU, float against its int8 conversion, on the same frames)."""
    chosen = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if serving_engine(item) is not None:
            chosen.append((item, "auto"))
            continue
        name, device, model = compared(item)  # read as a stream's `compare:` items are
        try:
            key = backend_named(name, engine_keys())
        except BackendError as exc:
            raise EdgeError(f"--backends: {exc}") from None
        chosen.append((key + (f"@{model}" if model else ""), device or "auto"))
    if not chosen:
        raise EdgeError("--backends is empty; e.g. --backends onnx,openvino,tflite")
    return chosen


def read_frames(source: str, count: int, step: int = 1) -> list[np.ndarray]:
    """Decode once, so decoding is not part of what is compared."""
    frame_source = open_source(source)
    frame_source.open()
    frames: list[np.ndarray] = []
    index = 0
    try:
        while len(frames) < count:
            image = frame_source.read()
            if image is None:
                break
            if index % step == 0:
                frames.append(image)
            index += 1
    finally:
        frame_source.close()
    if not frames:
        raise EdgeError(f"{frame_source.description} gave no frames to benchmark")
    return frames


class _PeakRSS:
    """Samples this process's RSS while a pair runs."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        process = psutil.Process()
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, process.memory_info().rss)

    def __enter__(self) -> _PeakRSS:
        self.peak = psutil.Process().memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_pair(
    pair: Pair,
    frames: list[np.ndarray],
    *,
    conf: float,
    warmup: int,
    settings: Settings | None,
    step: Callable[[], None] = lambda: None,
) -> PairResult:
    result = PairResult(pair)
    engine, _, given = compared(pair.backend)
    target, reason = model_for_engine(given or pair.model, engine)
    if target is None:
        result.reason = reason
        return result
    result.file = target
    try:
        # timed as a stream runs the engine (threads idle between frames), so the figures are the service's
        tiling = Tiling() if pair.regions == "tiles" else None
        config = DetectorConfig(target, engine, pair.device, conf=conf, back_to_back=False, tiling=tiling)
        detector = load_detector(config, settings)
    except (BackendError, ModelError, EdgeError) as exc:
        result.reason = str(exc)
        return result
    result.engine, result.device = detector.backend.engine, detector.backend.device
    try:
        for frame in frames[:warmup]:
            detector.detect(frame)
        process = psutil.Process()
        cpu0, t0 = process.cpu_times(), time.perf_counter()
        with _PeakRSS() as rss:
            for frame in frames:
                detected = detector.detect(frame)
                result.timings.append(detected.timings)
                result.detections.append(detected.detections)
                step()
        result.wall_s = time.perf_counter() - t0
        cpu1 = process.cpu_times()
        result.cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        result.peak_rss_mib = rss.peak / 2**20
    except Exception as exc:  # noqa: BLE001 - one pair failing mid-run must not lose the others
        result.reason = f"failed while running: {exc}"
    finally:
        detector.close()
    return result


BENCH_REGIONS = ("full", "tiles")  # motion regions need a stream's motion: benchmarks/regions.py measures them


def parse_regions(text: str) -> list[str]:
    """`--regions full,tiles`: each pair run on the whole frame, on tiles, or both (the first is the reference)."""
    wanted = [r.strip().lower() for r in text.split(",") if r.strip()]
    for item in wanted:
        if item == "motion":
            raise EdgeError(
                "--regions motion needs a stream's motion between frames: compare it live (a stream with "
                "`regions: motion`) or with `python -m benchmarks.regions`; give full and/or tiles here"
            )
        if item not in BENCH_REGIONS:
            raise EdgeError(f"--regions {item}: give full and/or tiles, such as --regions full,tiles")
    return list(dict.fromkeys(wanted)) or ["full"]


def plan(
    models: list[str], backends: list[tuple[str, str]], reference: str | None, regions: list[str] | None = None
) -> list[Pair]:
    pairs = [Pair(m, b, d, r) for m in models for r in regions or ["full"] for b, d in backends]
    if reference:
        key, _, device = reference.partition(":")
        for model in models:
            if not any(p.model == model and p.backend == key for p in pairs):
                pairs.insert(0, Pair(model, key, device or "auto"))
    return pairs


def score_against_reference(results: list[PairResult], reference: str | None) -> None:
    """Each pair's mAP@0.5 against the reference pair of the same model (the first that ran, by default)."""
    key = reference.partition(":")[0] if reference else None
    for model in dict.fromkeys(r.pair.model for r in results):
        mine = [r for r in results if r.pair.model == model and r.ok]
        ref = next((r for r in mine if r.pair.backend == key), None) if key else (mine[0] if mine else None)
        if ref is None:
            continue
        ref.reference = True
        for result in mine:
            result.agreement = agreement(ref.detections, result.detections)
