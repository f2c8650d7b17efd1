"""Live comparison: one source, one capture, the same frames offered to a pipeline per backend.

Each pipeline runs in live mode, so a slower backend skips frames instead of holding the others back; its processed
fps is its own. Agreement is mAP@0.5 against the first backend, over the recent frames both of them processed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from edge_inference.edge.detection.timings import Percentiles
from edge_inference.edge.stream.capture import CaptureRunner, SourceState
from edge_inference.edge.stream.pipeline import StreamPipeline
from edge_inference.edge.stream.sources import Frame, FrameSource
from edge_inference.models.agreement import agreement

WINDOW = 150  # recent frames the agreement is computed over
# frames both members processed before their agreement is given: over the first few a box or two more swing it
# (0.82 after 30 s on two nearly identical engines, then 0.998)
AGREEMENT_FRAMES = 30


@dataclass(frozen=True)
class Agreement:
    reference: str  # the member every other is compared with
    frames: int  # frames both processed, over which mAP@0.5 is computed
    map50: float | None  # None until AGREEMENT_FRAMES frames were both processed
    needs: int = AGREEMENT_FRAMES  # the frames both must have processed before map50 is given


@dataclass(frozen=True)
class CompareRow:
    stream: str
    backend: str
    device: str | None
    model: str
    state: str
    fps_processed: float
    fps_dropped: float
    latency_ms: dict[str, Percentiles]  # inference and end_to_end
    agreement: Agreement


@dataclass(frozen=True)
class CompareSnapshot:
    group: str
    source: str
    backends: list[CompareRow]


class CompareGroup:
    def __init__(
        self,
        group_id: str,
        source: FrameSource,
        members: list[StreamPipeline],
        *,
        pace: bool,
        loop: bool,
        stall_timeout_s: float | None = None,
    ) -> None:
        self.group_id = group_id
        self.members = members
        self.capture = CaptureRunner(
            f"{group_id}-group",
            source,
            self._deliver,
            pace=pace,
            loop=loop,
            on_state=self._on_state,
            on_reconnect=lambda: self._each(lambda m: m.stats.reconnect()),
            on_stall=lambda: self._each(lambda m: m.stats.stall()),
            on_end=lambda: self._each(lambda m: m.set_source_state("ended")),
            stall_timeout_s=stall_timeout_s,
        )

    @property
    def source(self) -> FrameSource:
        return self.capture.source

    def start(self) -> None:
        for member in self.members:
            member.start()
        self.capture.start()

    def begin_stop(self) -> None:
        self.capture.begin_stop()
        for member in self.members:
            member.begin_stop()

    def stop(self, timeout: float = 5.0) -> bool:
        self.begin_stop()
        deadline = time.monotonic() + timeout
        released = self.capture.stop(timeout)
        for member in self.members:
            member.stop(max(0.1, deadline - time.monotonic()))
        return released

    def check(self, now: float) -> None:
        self.capture.check(now)  # members' own checks (stuck inference) are made on them by the watchdog

    def _each(self, action: Callable[[StreamPipeline], None]) -> None:
        for member in self.members:
            action(member)

    def _deliver(self, frame: Frame) -> None:
        for member in self.members:
            member.offer(frame)

    def _on_state(self, state: SourceState, error: str | None) -> None:
        for member in self.members:
            member.set_source_state(state, error)

    def snapshot(self) -> CompareSnapshot:
        reference = self.members[0]
        ref_recent = dict(list(reference.recent)[-WINDOW:])
        rows = []
        for member in self.members:
            stats = member.stats.snapshot()
            detector = member.detector
            mine = dict(list(member.recent)[-WINDOW:])
            common = sorted(set(ref_recent) & set(mine))
            enough = len(common) >= AGREEMENT_FRAMES
            score = agreement([ref_recent[i] for i in common], [mine[i] for i in common]) if enough else None
            map50 = None if score is None or score.map50 is None else round(score.map50, 4)
            rows.append(
                CompareRow(
                    stream=member.stream_id,
                    backend=detector.backend.key if detector else member.names.backend,
                    device=detector.backend.device if detector else None,
                    model=detector.spec.name if detector else member.names.model,
                    state=member.state,
                    fps_processed=stats.fps_processed,
                    fps_dropped=stats.fps_dropped,
                    latency_ms={k: stats.latency_ms[k] for k in ("inference", "end_to_end")},
                    agreement=Agreement(reference.stream_id, len(common), map50),
                )
            )
        return CompareSnapshot(self.group_id, self.source.description, rows)
