"""Prometheus exposition: stage latency histograms observed per frame, rates and counters read at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edge_inference.edge.detection.detector_pool import describe_engine
from edge_inference.edge.detection.timings import STAGES
from edge_inference.edge.runtime.cpu import CpuFigures
from edge_inference.edge.runtime.health import service_health
from edge_inference.edge.runtime.snapshots import cpu_figures, event_figures
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.pipeline import FrameResult, StreamPipeline
from edge_inference.service.limits import UploadGate

BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)
LABELS = ["stream", "model", "backend"]


def _labels(pipeline: StreamPipeline) -> list[str]:
    detector = pipeline.detector
    if detector is None:
        return [pipeline.stream_id, pipeline.names.model, pipeline.names.backend]
    return [pipeline.stream_id, detector.spec.name, f"{detector.backend.key}/{detector.backend.device}"]


class _StreamCollector(Collector):
    def __init__(self, manager: StreamManager, uploads: UploadGate, strict: bool) -> None:
        self.manager = manager
        self.uploads = uploads
        self.strict = strict

    def collect(self) -> Iterator[Metric]:
        gauges = {
            "fps_in": GaugeMetricFamily("edge_fps_in", "Frames captured per second", labels=LABELS),
            "fps_processed": GaugeMetricFamily("edge_fps_processed", "Frames processed per second", labels=LABELS),
            "fps_dropped": GaugeMetricFamily("edge_fps_dropped", "Frames skipped per second (live)", labels=LABELS),
        }
        counters = {
            "frames_processed": CounterMetricFamily("edge_frames_processed", "Frames processed", labels=LABELS),
            "frames_dropped": CounterMetricFamily("edge_frames_dropped", "Frames skipped (live)", labels=LABELS),
            "frames_still": CounterMetricFamily(
                "edge_frames_skipped_motion", "Frames not inferred: motion gating saw nothing move", labels=LABELS
            ),
            "errors": CounterMetricFamily("edge_errors", "Inference or decoding errors", labels=LABELS),
            "reconnects": CounterMetricFamily("edge_source_reconnects", "Source failures reopened", labels=LABELS),
            "stalls": CounterMetricFamily(
                "edge_source_stalls", "Sources that delivered nothing for stall_timeout_s, reopened", labels=LABELS
            ),
            "restarts": CounterMetricFamily(
                "edge_detector_restarts",
                "Detectors reloaded after a stuck inference, or workers restarted",
                labels=LABELS,
            ),
            "load_failures": CounterMetricFamily(
                "edge_model_load_failures", "Failed model loads (each is retried with backoff)", labels=LABELS
            ),
        }
        drops = CounterMetricFamily("edge_subscriber_drops", "Results dropped by slow subscribers", labels=LABELS)
        up = GaugeMetricFamily("edge_stream_up", "1 while the stream delivers frames", labels=LABELS)
        ready = GaugeMetricFamily("edge_ready", "1 while /health/ready answers 200")
        status = GaugeMetricFamily("edge_health_status", "1 for the service's current status", labels=["status"])
        handled = []
        for pipeline in self.manager.pipelines.values():
            labels = _labels(pipeline)
            figures = pipeline.stats.snapshot()
            handled.append(figures)
            for key, gauge in gauges.items():
                gauge.add_metric(labels, float(getattr(figures, key)))
            for key, counter in counters.items():
                counter.add_metric(labels, float(getattr(figures, key)))
            drops.add_metric(labels, float(pipeline.results.dropped))
            up.add_metric(labels, 1.0 if pipeline.state == "running" else 0.0)
        health = service_health(self.manager, self.strict)
        ready.add_metric([], 1.0 if health.ready else 0.0)
        for name in ("starting", "ok", "degraded", "down"):
            status.add_metric([name], 1.0 if health.status == name else 0.0)
        yield from gauges.values()
        yield from counters.values()
        yield drops
        yield up
        yield ready
        yield status
        refused = CounterMetricFamily("edge_uploads_refused", "POST /detect answered 503: workers and queue were full")
        refused.add_metric([], float(self.uploads.refused))
        yield refused
        yield from _zone_metrics(self.manager)
        yield from _event_metrics(self.manager)
        yield from _detector_metrics(self.manager)
        yield from _cpu_metrics(cpu_figures(self.manager, handled))


def _cpu_metrics(figures: CpuFigures) -> Iterator[Metric]:
    """CPU per frame holds where fps does not (a loaded machine): the figure to compare engines and settings by."""
    total = CounterMetricFamily(
        "edge_cpu_seconds", "CPU time of the service and its children (FFmpeg decoders), from the kernel"
    )
    total.add_metric([], figures.cpu_seconds_total)
    yield total
    if figures.cpu_ms_per_frame is not None:
        per_frame = GaugeMetricFamily(
            "edge_cpu_seconds_per_frame",
            f"CPU seconds per frame handled (inferred or skipped as still), all streams, last {figures.window_s:g} s",
        )
        per_frame.add_metric([], figures.cpu_ms_per_frame / 1e3)
        yield per_frame


def _detector_metrics(manager: StreamManager) -> Iterator[Metric]:
    """One series per loaded engine, labelled by model and device (several streams may share it)."""
    labels = ["model", "backend", "device"]
    speed = GaugeMetricFamily("edge_detector_inference_ms", "Median engine run time, recent runs", labels=labels)
    wait = GaugeMetricFamily("edge_detector_queue_wait_ms", "Median wait of a frame for its turn", labels=labels)
    rate = GaugeMetricFamily("edge_detector_fps", "Frames inferred per second, all its streams", labels=labels)
    served = GaugeMetricFamily("edge_detector_streams", "Streams this engine serves", labels=labels)
    frames = CounterMetricFamily("edge_detector_frames", "Frames inferred", labels=labels)
    for engine in manager.detectors.engines():
        figures = describe_engine(engine)
        key = [figures.model, figures.backend, figures.device]
        speed.add_metric(key, figures.inference_ms_p50 or 0.0)
        wait.add_metric(key, figures.queue_wait_ms_p50 or 0.0)
        rate.add_metric(key, figures.detection_fps)
        served.add_metric(key, float(len(figures.streams)))
        frames.add_metric(key, float(figures.frames))
    yield from (speed, wait, rate, served, frames)


def _zone_metrics(manager: StreamManager) -> Iterator[Metric]:
    objects = GaugeMetricFamily(
        "edge_zone_objects", "Tracked objects in a zone now", labels=["stream", "zone", "label"]
    )
    dwell = GaugeMetricFamily(
        "edge_zone_longest_dwell_seconds",
        "Longest time an object now in the zone has been there",
        labels=["stream", "zone"],
    )
    crossings = CounterMetricFamily(
        "edge_line_crossings", "Objects that crossed a line, by direction", labels=["stream", "line", "direction"]
    )
    for stream_id, pipeline in manager.pipelines.items():
        latest = pipeline.latest
        for zone in latest.zones if latest else ():
            for label, count in zone.objects.items():
                objects.add_metric([stream_id, zone.name, label], float(count))
            dwell.add_metric([stream_id, zone.name], zone.longest_dwell_s)
        for line in latest.lines if latest else ():
            crossings.add_metric([stream_id, line.name, "in"], float(line.crossed_in))
            crossings.add_metric([stream_id, line.name, "out"], float(line.crossed_out))
    yield from (objects, dwell, crossings)


def _event_metrics(manager: StreamManager) -> Iterator[Metric]:
    figures = event_figures(manager)
    if figures is None:
        return
    recorded = CounterMetricFamily("edge_event_changes_recorded", "Event starts, updates and ends stored")
    recorded.add_metric([], float(figures.recorded))
    lost = CounterMetricFamily("edge_event_changes_lost", "Event changes lost because the disk could not keep up")
    lost.add_metric([], float(figures.lost))
    waiting = GaugeMetricFamily("edge_outbox_waiting", "Messages stored, not yet delivered", labels=["sink"])
    dropped = CounterMetricFamily(
        "edge_outbox_dropped", "Messages dropped because the outbox was full", labels=["sink"]
    )
    for sink, counts in figures.outbox.items():
        waiting.add_metric([sink], float(counts["waiting"]))
        dropped.add_metric([sink], float(counts["dropped"]))
    yield from (recorded, lost, waiting, dropped)
    if figures.mqtt_connected is not None:
        connected = GaugeMetricFamily("edge_mqtt_connected", "1 while connected to the MQTT broker")
        connected.add_metric([], 1.0 if figures.mqtt_connected else 0.0)
        yield connected


class ServiceMetrics:
    """One registry per app, so several apps (tests) never share series."""

    def __init__(self, manager: StreamManager, uploads: UploadGate, strict: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "edge_stage_latency_seconds",
            "Per-frame time in each pipeline stage",
            [*LABELS, "stage"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StreamCollector(manager, uploads, strict))
        for pipeline in manager.pipelines.values():
            pipeline.add_listener(self._observer(pipeline))

    def _observer(self, pipeline: StreamPipeline) -> Callable[[FrameResult], None]:
        children: dict[str, Histogram] = {}

        def observe(result: FrameResult) -> None:
            if not children:  # labels are final once the detector has loaded, i.e. before the first frame
                labels = _labels(pipeline)
                children.update({s: self.latency.labels(*labels, s) for s in STAGES})
            timing = result.timing
            for stage, child in children.items():
                child.observe(getattr(timing, f"{stage}_ms") / 1e3)

        return observe

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
