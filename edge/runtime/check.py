"""`edge serve --check`: what starting the service would meet, found without serving it and without disturbing a
service that already runs on the same config: each source opened and read once, each stream's engine loaded and run
on that frame, each event sink asked (the broker to take this device's user, webhooks' hosts reached), the data
folder looked at (not locked). `auto` runs its stored pick; nothing is measured."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from edge_inference.backends import BackendError
from edge_inference.edge.config import ConfigError, ServiceConfig, StreamConfig
from edge_inference.edge.detection.auto.decide import decide_auto
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.loader import check_reference, load_detector
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.events.layer import data_dir, event_sinks, mqtt_link
from edge_inference.edge.events.storage import Level, storage_outlook
from edge_inference.edge.runtime.plan import PipelinePlan, compile_streams
from edge_inference.edge.runtime.streams import check_cameras_read_once, label_problem, source_for
from edge_inference.edge.settings import Settings
from edge_inference.edge.stream.capture import stall_timeout
from edge_inference.models.errors import ModelError
from edge_inference.models.tiles import MISSED_WORTH_SAYING_PX, missed_below

FAILURES = (EdgeError, ModelError, BackendError)


@dataclass(frozen=True)
class Finding:
    subject: str  # "stream door", "mqtt", "storage"
    text: str
    level: Level = "ok"


def check_service(config: ServiceConfig, settings: Settings) -> list[Finding]:
    """Everything `edge serve` would meet with this config, in the order it meets it."""
    findings: list[Finding] = []
    try:
        check_cameras_read_once(config.streams)
    except ConfigError as exc:
        findings.append(Finding("streams", str(exc), "problem"))
    frames = first_frames(config.streams)
    said: set[str] = set()  # engine notes (auto's reasons) said once, not on every stream of that model
    for plan in compile_streams(config, check=False):  # each pipeline's names are checked below, a line each
        frame = frames[plan.stream.id]
        findings.append(frame if isinstance(frame, Finding) else _frame_read(plan.stream, frame))
        for pipeline in plan.pipelines:
            findings.extend(engine_findings(pipeline, frame if isinstance(frame, np.ndarray) else None, settings, said))
    return findings + destination_findings(config, settings)


def _frame_read(stream: StreamConfig, frame: np.ndarray) -> Finding:
    height, width = frame.shape[:2]
    return Finding(f"stream {stream.id}", f"{stream.source}: opened, a {width}x{height} frame read")


def first_frames(streams: list[StreamConfig]) -> dict[str, np.ndarray | Finding]:
    """Each stream's first frame, or why there is none; all sources opened at once, each within the time the
    service gives an open and a read (a camera that never answers costs its own wait, not everyone's)."""
    results: dict[str, np.ndarray | Finding] = {}
    lock = threading.Lock()

    def read(stream: StreamConfig) -> None:
        got = _first_frame(stream)
        with lock:
            results.setdefault(stream.id, got)

    started = time.monotonic()
    threads = [(s, threading.Thread(target=read, args=(s,), name=f"check-{s.id}", daemon=True)) for s in streams]
    for _, thread in threads:
        thread.start()
    for stream, thread in threads:
        limit = stall_timeout(stream.stall_timeout_s, stream.fps) * 4  # the service's open (3 stalls) and a read
        thread.join(max(0.0, started + limit - time.monotonic()))
        with lock:  # a source that never returns is left to its thread, as the service leaves it
            late = f"{stream.source}: no frame within {limit:g} s (the service would keep reopening it)"
            results.setdefault(stream.id, Finding(f"stream {stream.id}", late, "problem"))
    return results


def _first_frame(stream: StreamConfig) -> np.ndarray | Finding:
    subject = f"stream {stream.id}"
    try:
        source = source_for(stream)
    except FAILURES as exc:
        return Finding(subject, str(exc), "problem")
    try:
        source.open()
        frame = source.read()
    except Exception as exc:  # noqa: BLE001 - any read failure is the source's, as the service's capture loop has it
        return Finding(subject, _said(exc), "problem")
    finally:
        source.close()
    if frame is None:
        return Finding(subject, f"{source.description}: opened, but it has no frame to read", "problem")
    return frame


def engine_findings(
    pipeline: PipelinePlan, frame: np.ndarray | None, settings: Settings, said: set[str]
) -> list[Finding]:
    """The pipeline's engine loaded as the service loads it, run on the stream's first frame (a blank one without);
    a compared engine with no file of the model is checked on the stream's model, which the engine then answers
    for."""
    stream, config = pipeline.stream, pipeline.detector
    subject = f"stream {stream.id}"
    try:
        files = pipeline.files or check_reference(config, settings)
        note = None
        if config.backend == "auto":
            config, choice = decide_auto(config, files, settings, stored_only=True)
            note = choice.reason
        detector = load_detector(config, settings, files=files)
    except Exception as exc:  # noqa: BLE001 - an engine's own exception types too: the other streams still checked
        return [Finding(subject, _said(exc), "problem")]
    try:
        found = _ran(detector, frame)
    except Exception as exc:  # noqa: BLE001 - as above
        failed = f"{detector.backend.key} loaded {config.model}, but running it failed: {_said(exc)}"
        return [Finding(subject, failed, "problem")]
    finally:
        detector.close()
    backend = detector.backend
    notes = [n for n in (note, *backend.notes) if n and n not in said]
    said.update(notes)
    text = f"{stream.model} on {backend.key} ({backend.device}): {found}" + "".join(f"; {n}" for n in notes)
    findings = [Finding(subject, text)]
    if frame is not None and stream.regions.mode == "full" and (small := _small_missed(frame, detector)) is not None:
        findings.append(Finding(subject, small, "warning"))
    if (labels := label_problem(stream, detector)) is not None:
        findings.append(Finding(subject, labels.removeprefix(f"{subject}: "), "warning"))
    return findings


def _small_missed(frame: np.ndarray, detector: Detector) -> str | None:
    """A camera far bigger than the model's input, run whole: the people who matter far off are lost."""
    pre = detector.spec.preprocessing
    height, width = frame.shape[:2]
    below = missed_below(width, height, pre.width, pre.height)
    if below < MISSED_WORTH_SAYING_PX:
        return None
    return (
        f"its {width}x{height} frames reach the model at {pre.width}x{pre.height}: people under about {below:.0f} px "
        "tall will be missed; consider `regions: motion` (or `regions: tiles`), which look at parts of the frame at "
        "the model's own scale"
    )


def _said(exc: Exception) -> str:
    return str(exc) if isinstance(exc, FAILURES) else f"{type(exc).__name__}: {exc}"


def _ran(detector: Detector, frame: np.ndarray | None) -> str:
    if frame is None:
        detector.warmup()
        return "loaded and run on a blank frame"
    result = detector.detect(frame)
    counts = Counter(d.label for d in result.detections)
    seen = ", ".join(f"{n} {label}" for label, n in counts.most_common()) or "nothing"
    return f"{seen} on the first frame ({result.timings.inference_ms:.0f} ms inference)"


def destination_findings(config: ServiceConfig, settings: Settings) -> list[Finding]:
    """Where events would go: the data folder (where a stream keeps events), then each sink: the broker logged in
    to, each webhook's host reached, whatever else `sinks:` names asked by its own check."""
    findings = []
    if any(s.events and not s.compare for s in config.streams):
        level, text = storage_outlook(data_dir(config, settings), config.storage)
        findings.append(Finding("storage", text, level))
    try:
        mqtt = mqtt_link(config, settings)
    except FAILURES as exc:
        findings.append(Finding("mqtt", str(exc), "problem"))
        mqtt = None
    try:
        sinks = event_sinks(mqtt, config)
    except FAILURES as exc:
        findings.append(Finding("sinks", str(exc), "problem"))
        sinks = [mqtt] if mqtt is not None else []
    for sink in sinks:
        text, level = sink.check()
        findings.append(Finding(sink.name, text, level))
    return findings
