"""Live comparison: one source, one capture, the same frames offered to a pipeline per backend.

Each pipeline runs in live mode, so a slower backend skips frames instead of holding the others back; its processed
fps is its own. Agreement is mAP@0.5 against the first backend, over the recent frames both of them processed.
"""

from __future__ import annotations

import threading
from typing import Any

from edge.capture import CaptureLoop
from edge.pipeline import StreamPipeline
from edge.sources import FrameSource
from models.agreement import agreement

WINDOW = 150  # recent frames the agreement is computed over


class CompareGroup:
    def __init__(
        self, group_id: str, source: FrameSource, members: list[StreamPipeline], *, pace: bool, loop: bool
    ) -> None:
        self.group_id = group_id
        self.source = source
        self.members = members
        self.pace, self.loop = pace, loop
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        for member in self.members:
            member.start()
        self._thread = threading.Thread(target=self._capture, name=f"{self.group_id}-capture", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.source.close()
        for member in self.members:
            member.stop()

    def _capture(self) -> None:
        def deliver(frame: Any) -> None:
            for member in self.members:
                member.offer(frame)

        def on_state(state: str, error: str | None) -> None:
            for member in self.members:
                if member.ready:
                    member.set_state(state, error)  # type: ignore[arg-type]

        def on_reconnect() -> None:
            for member in self.members:
                member.stats.reconnect()

        def on_end() -> None:
            for member in self.members:
                member.set_state("ended")

        CaptureLoop(
            self.source,
            deliver,
            stop=self._stop,
            pace=self.pace,
            loop=self.loop,
            on_state=on_state,
            on_reconnect=on_reconnect,
            on_end=on_end,
        ).run()

    def snapshot(self) -> dict[str, Any]:
        reference = self.members[0]
        ref_recent = dict(list(reference.recent)[-WINDOW:])
        rows = []
        for member in self.members:
            stats = member.stats.snapshot()
            detector = member.detector
            mine = dict(list(member.recent)[-WINDOW:])
            common = sorted(set(ref_recent) & set(mine))
            score = agreement([ref_recent[i] for i in common], [mine[i] for i in common]) if common else None
            rows.append(
                {
                    "stream": member.stream_id,
                    "backend": detector.backend.key if detector else member.labels["backend"],
                    "device": detector.backend.device if detector else None,
                    "model": detector.spec.name if detector else member.labels["model"],
                    "state": member.state,
                    "fps_processed": stats["fps_processed"],
                    "fps_dropped": stats["fps_dropped"],
                    "latency_ms": {k: stats["latency_ms"][k] for k in ("inference", "end_to_end")},  # type: ignore[index]
                    "agreement": {
                        "reference": reference.stream_id,
                        "frames": len(common),
                        "map50": None if score is None or score.map50 is None else round(score.map50, 4),
                    },
                }
            )
        return {"group": self.group_id, "source": self.source.description, "backends": rows}
