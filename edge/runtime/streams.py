"""All configured streams of a running service: built from the config, started and stopped (`snapshots.py` reports
on them)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from edge_inference.backends.engine import serving_engine
from edge_inference.edge.config import (
    ConfigError,
    ServiceConfig,
    StreamConfig,
    TrackingConfig,
)
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.detector_pool import DetectorPool, lone_engine_threads
from edge_inference.edge.detection.loader import load_detector
from edge_inference.edge.detection.threads import CameraThreads, EnginePlan, plan_engine, usable_cores
from edge_inference.edge.events.layer import EventLayer
from edge_inference.edge.runtime.compare import CompareGroup
from edge_inference.edge.runtime.cpu import CpuPerFrame
from edge_inference.edge.runtime.plan import EngineKey, PipelinePlan, StreamPlan, compile_streams
from edge_inference.edge.runtime.watchdog import Watchdog
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.edge.stream.ffmpeg import ffmpeg_source
from edge_inference.edge.stream.motion import gate_and_regions
from edge_inference.edge.stream.pipeline import StreamNames, StreamPipeline
from edge_inference.edge.stream.sources import FrameSource, camera_device, open_source
from edge_inference.edge.stream.tracking import StreamTracker
from edge_inference.models.labels import labels_listed, unknown_labels

log = logging.getLogger("edge.streams")


def source_for(stream: StreamConfig) -> FrameSource:
    """OpenCV's capture, or the ffmpeg program where the stream has an `ffmpeg:` block."""
    width, height, fps = stream.width, stream.height, stream.fps
    if stream.ffmpeg is None:
        return open_source(stream.source, width=width, height=height, fps=fps, size_check_s=stream.resolution_check_s)
    hwaccel, input_args = stream.ffmpeg.hwaccel, stream.ffmpeg.input_args
    return ffmpeg_source(stream.source, hwaccel=hwaccel, input_args=input_args, width=width, height=height, fps=fps)


def file_lanes(stream: StreamConfig, source: FrameSource) -> int:
    """Frames of the stream that may be in inference at once: a file's every frame is wanted, so as many as the
    engine's share of the cores allows (a lane each); a live source's newest frame, one at a time."""
    mode = stream.mode if stream.mode != "auto" else ("live" if source.live else "file")
    return usable_cores() if mode == "file" else 1


def tracker_for(stream: StreamConfig) -> StreamTracker | None:
    if not stream.analysed:
        return None
    tracking = (stream.tracking or TrackingConfig()).model_copy(update={"labels": stream.tracked_labels})
    return StreamTracker(tracking, stream.zones, stream.lines, stream.id)


def check_cameras_read_once(streams: list[StreamConfig]) -> None:
    """A V4L2 camera streams to one reader: a second stream on it failed to open forever, with advice about other
    programs and the 'video' group, while the program holding it was this one."""
    owners: dict[str, str] = {}
    for stream in streams:
        device = camera_device(stream.source)
        if device is None:
            continue
        if device in owners:
            raise ConfigError(
                f"streams {owners[device]} and {stream.id} both read the camera {device}, which gives its frames to "
                "one reader: give it one stream (to compare backends on it, `compare:` on that stream)"
            )
        owners[device] = stream.id


def label_problem(stream: StreamConfig, detector: Detector) -> str | None:
    """The labels the stream's config names that its model does not detect, with the model's own; None if all are."""
    model_labels = list(detector.spec.labels.values())
    unknown = [
        f"{setting} names {', '.join(names)}"
        for setting, labels in stream.named_labels.items()
        if (names := unknown_labels(labels, model_labels))
    ]
    if not unknown:
        return None
    return f"stream {stream.id}: {'; '.join(unknown)}, which {stream.model} does not detect: " + (
        f"use its labels ({labels_listed(model_labels)})"
        if model_labels
        else "it has no label names (give it a label file)"
    )


class StreamManager:
    def __init__(self, config: ServiceConfig, settings: Settings | None = None) -> None:
        self.config = config
        self.settings = settings or get_settings()
        self.pipelines: dict[str, StreamPipeline] = {}
        self.groups: dict[str, CompareGroup] = {}
        self._plans: dict[str, PipelinePlan] = {}  # per pipeline, compare members included
        self._units: list[StreamPipeline | CompareGroup] = []  # what start() and stop() drive
        self.watchdog = Watchdog(self._checked)
        self.cpu = CpuPerFrame()  # the service's CPU per frame handled, for stats and metrics
        self.events = EventLayer(config, self.settings)
        self.detectors = DetectorPool(max_batch=config.detectors.max_batch, share=config.detectors.share)
        self._engines: list[EngineKey] = []  # what each pipeline loads, for the budget
        self._requests: dict[EngineKey, int] = {}  # frames each engine may have waiting
        self.label_problems: dict[str, str] = {}  # stream -> the labels its config names that its model lacks
        check_cameras_read_once(config.streams)
        for plan in compile_streams(config, settings=self.settings):  # each pipeline's detector decided once
            stream = plan.stream
            source = source_for(stream)
            if plan.compared:
                self._add_group(plan, source)
                continue
            (pipeline,) = plan.pipelines
            self._plans[stream.id] = pipeline
            mode = None if stream.mode == "auto" else stream.mode
            lanes = file_lanes(stream, source)
            load = self._loader(pipeline, lanes)
            motion, regions = gate_and_regions(stream.motion, stream.regions)
            self.pipelines[stream.id] = StreamPipeline(
                stream.id,
                source,
                load,
                mode=mode,
                pace=stream.pace,
                loop=stream.loop,
                names=StreamNames(stream.model, stream.backend, source.description),
                stall_timeout_s=stream.stall_timeout_s,
                inference_timeout_s=stream.inference_timeout_s,
                tracker=tracker_for(stream),
                motion=motion,
                regions=regions,
                lanes=lanes,
                camera_threads=self._camera_threads(pipeline, load, lanes),
            )
            self.events.attach(stream, self.pipelines[stream.id])
            self._units.append(self.pipelines[stream.id])

    def _add_group(self, plan: StreamPlan, source: FrameSource) -> None:
        stream, members = plan.stream, []
        for member in plan.pipelines:
            if member.problem is not None:
                raise ConfigError(f"stream {stream.id}: {member.problem}")
            pipeline = StreamPipeline(
                member.id,
                None,
                self._loader(member),
                mode="live",
                names=StreamNames(member.stream.model, member.stream.backend, source.description),
                inference_timeout_s=stream.inference_timeout_s,
                tracker=tracker_for(member.stream),
            )
            self.pipelines[member.id] = pipeline
            self._plans[member.id] = member
            members.append(pipeline)
        self.groups[stream.id] = CompareGroup(
            stream.id, source, members, pace=stream.pace, loop=stream.loop, stall_timeout_s=stream.stall_timeout_s
        )
        self._units.append(self.groups[stream.id])

    def _loader(self, pipeline: PipelinePlan, requests: int = 1) -> Any:
        """Loads the pipeline's detector on a shared engine, with the thread budget's threads and lanes; `requests`:
        the stream's frames that may wait for the engine at once."""
        key, stream = pipeline.engine_key, pipeline.stream
        self._engines.append(key)
        self._requests[key] = self._requests.get(key, 0) + requests
        isolation = self.config.detectors.isolation

        def load(buffers: int, threads: int | None = None) -> Detector:
            plan = self.engine_plan(key, requests) if threads is None else EnginePlan(threads, 1)
            config = replace(pipeline.detector, buffers=buffers, threads=plan.threads, engine_isolation=isolation)
            opener = self.detectors.opener(stream.id, stream.inference_timeout_s, plan.lanes, stream.threads is None)
            files = pipeline.files  # the model as the plan resolved it: the loader only opens it
            detector = load_detector(config, self.settings, opener=opener, wait_for_auto=False, files=files)
            self._check_labels(stream, detector)
            return detector

        return load

    def _camera_threads(self, pipeline: PipelinePlan, load: Any, requests: int) -> CameraThreads[Detector] | None:
        """A live stream on the thread budget may move its engine to one thread where one keeps up with the camera
        (`CameraThreads`); one with `threads:` keeps them."""
        if pipeline.stream.threads is not None:
            return None
        key = pipeline.engine_key
        return CameraThreads(lambda: self.engine_plan(key, requests).threads, load, lone_engine_threads)

    def _check_labels(self, stream: StreamConfig, detector: Detector) -> None:
        """Labels the config names that the model does not detect: a typo that would keep events from ever firing,
        said once in the log and kept in /health's problems (degraded) until a model that has them loads."""
        problem = label_problem(stream, detector)
        if problem is None:
            self.label_problems.pop(stream.id, None)
            return
        if self.label_problems.get(stream.id) != problem:
            log.warning("%s", problem)
        self.label_problems[stream.id] = problem

    def engine_plan(self, key: EngineKey, requests: int = 1) -> EnginePlan:
        """Cores are divided among the engines the config loads; a shared engine's among its streams' lanes. A
        model on a server takes no cores here: a lane (a request in flight) for every frame that may wait."""
        shared = self.config.detectors.share
        if serving_engine(key[0]) is not None:
            return EnginePlan(1, max(1, self._requests[key] if shared else requests))
        local = [k for k in self._engines if serving_engine(k[0]) is None]
        if shared:
            return plan_engine(self._requests[key], len(set(local)), threads=key[3])
        return plan_engine(requests, len(local), threads=key[3])

    def start(self) -> None:
        self.events.start()
        for unit in self._units:
            unit.start()
        self.watchdog.start()

    def begin_stop(self) -> None:
        """End every subscriber's stream now (shutdown must not wait for clients); threads stop in `stop`."""
        self.events.begin_stop()
        for unit in self._units:
            unit.begin_stop()

    def stop(self, timeout: float = 4.0) -> None:
        """Stop every stream and release cameras and accelerators: signalled together, joined within `timeout`."""
        self.watchdog.stop()
        self.begin_stop()
        deadline = time.monotonic() + timeout
        left = sum(not unit.stop(max(0.1, deadline - time.monotonic())) for unit in self._units)
        self.events.stop(time.time())
        # a source still opening (a camera that does not answer) closes itself when its open returns
        behind = f" ({left} sources still opening were left to close themselves)" if left else ""
        log.info("streams stopped; cameras and accelerators released%s", behind)

    def _checked(self) -> list[StreamPipeline | CompareGroup]:
        return [*self.pipelines.values(), *self.groups.values()]

    @property
    def ready(self) -> bool:
        return all(p.ready for p in self.pipelines.values())

    def plan_of(self, stream_id: str) -> PipelinePlan:
        """What a pipeline's detector loads, as its plan decided it (an upload's own detector loads the same)."""
        return self._plans[stream_id]

    def group_of(self, pipeline: StreamPipeline) -> str | None:
        """The compare group a pipeline is a member of."""
        return next((g for g, group in self.groups.items() if pipeline in group.members), None)
