"""Is the service doing its job? One rule, used by /health/*, the dashboard and the metrics.

- starting: some stream's model is still on its first load (nothing has failed yet).
- ok: every stream delivers frames steadily (a file that played to its end counts as done, not as a fault).
- degraded: anything else while some stream delivers: a source reconnecting, stalled or flapping (several reconnects
  within a minute, each reopen succeeding), a model that failed and is being retried, a detector being reloaded.
  Ready answers 200 while degraded (the service still works: other streams, /detect, the API), and 503 in strict
  mode, where ready means "every stream delivers frames".
  Events that cannot be stored (a full disk, no writable data folder) make an otherwise ok service degraded, with
  the reason in `problems`: detection still works, but something the user relies on does not. So do labels the
  config names (`tracking.labels`, `events.labels`) that the stream's model does not detect: events that never fire.
- down: no stream delivers frames, whatever the models' state: ready is 503, so a probe that reads only the status
  code is told the truth.
Live is 503 only when the process itself is unsound: the watchdog or a stream's worker threads are dead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.pipeline import Health

Status = Literal["starting", "ok", "degraded", "down"]
UP_STATES = ("running", "ended")


@dataclass(frozen=True)
class StreamHealth(Health):
    up: bool = False  # delivering frames (or a file played to its end)
    fps: float = 0.0


@dataclass(frozen=True)
class ServiceHealth:
    status: Status
    ready: bool
    strict: bool
    streams: dict[str, StreamHealth]
    problems: list[str]  # the service's own, beside the streams': events not stored, labels the model lacks, ...


def is_live(manager: StreamManager) -> bool:
    return manager.watchdog.alive and all(p.workers_alive for p in manager.pipelines.values())


def service_health(manager: StreamManager, strict: bool) -> ServiceHealth:
    streams, first_loads = _stream_healths(manager)
    problems = [*manager.events.problems, *manager.label_problems.values(), *_stream_problems(streams, first_loads)]
    problems += [
        p.tracker.placement_problem for p in manager.pipelines.values() if p.tracker and p.tracker.placement_problem
    ]
    all_up = all(h.up and h.unstable is None for h in streams.values())
    any_up = any(h.up for h in streams.values())
    status: Status = (
        "starting" if first_loads else "ok" if all_up and not problems else "degraded" if any_up else "down"
    )
    ready = status == "ok" or (status == "degraded" and not strict)
    return ServiceHealth(status, ready, strict, streams, problems)


def _stream_healths(manager: StreamManager) -> tuple[dict[str, StreamHealth], set[str]]:
    """Each stream's health, and the streams on their model's first load with nothing failed yet (starting)."""
    streams: dict[str, StreamHealth] = {}
    first_loads: set[str] = set()
    for stream_id, pipeline in manager.pipelines.items():
        health = pipeline.health()
        if health.state == "loading" and pipeline.stats.load_failures == 0 and health.detector_restarts == 0:
            first_loads.add(stream_id)
        up = health.state in UP_STATES
        streams[stream_id] = StreamHealth(**asdict(health), up=up, fps=pipeline.stats.fps_processed())
    return streams, first_loads


def _stream_problems(streams: dict[str, StreamHealth], first_loads: set[str]) -> list[str]:
    """Streams that deliver no frames (past their first load and their source's first open) or keep dropping, in the
    service's problems: degraded or down never comes without a reason there."""
    problems = []
    for stream_id, health in streams.items():
        if not health.up and stream_id not in first_loads and health.state != "connecting":
            problems.append(f"stream {stream_id}: {health.state}" + (f": {health.error}" if health.error else ""))
        if health.unstable:
            problems.append(f"stream {stream_id}: {health.unstable}")
    return problems
