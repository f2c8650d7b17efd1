"""What a measurement is: the engines timed (`Candidate`), each one's figures (`Measurement`), the pick among
them (`fastest`) and how sure it is (`certainty`), and the measurement's fixed shape."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

WARM_RUNS = 2

ROUNDS = 3  # turns per engine; the seconds of each are the settings' auto_round_s

CLOSE = 0.03  # engines whose best rounds are within 3% of the best are a tie, decided by CPU per frame

# A measurement during which other programs kept BUSY_CORES or more busy is made again at a later start that finds
# them using under QUIET_CORES (sampled for QUIET_SAMPLE_S): a pick stored while the machine was busy was kept once
# it was quiet, 0.88x the fastest engine three times out of three (issue 62)
BUSY_CORES, QUIET_CORES, QUIET_SAMPLE_S = 0.5, 0.25, 0.5

CHILD_STOP_S = 5.0  # a timed child's time to end once told to, before it is killed

Say = Callable[[str], None]


@dataclass(frozen=True)
class Candidate:
    backend: str
    device: str
    model: str  # what to load: the registry name of this engine's file, or the file itself


@dataclass(frozen=True)
class Measurement:
    backend: str
    device: str
    model: str
    ms_p50: float | None  # one frame (pre-processing, inference, decoding): 1000 / the median round's throughput
    error: str | None = None
    fps_rounds: list[float] = dataclasses.field(default_factory=list)  # frames per second in each round
    cpu_ms: float | None = None  # CPU per frame over all rounds, from the kernel
    infer_ms: float | None = None  # the engine's own run per frame (no pre/post): what the service sees live

    @property
    def fps(self) -> float | None:
        return None if not self.ms_p50 else 1000.0 / self.ms_p50

    @property
    def best_fps(self) -> float | None:
        """Throughput in the engine's best round: what decides. Load from elsewhere on the machine (a burst of
        uploads, another stream) only ever slows a round down, so the best round is the least disturbed figure; a
        burst over some rounds of one engine moved its median by 20% (ONNX Runtime 60.6 against 78.4 fps when
        undisturbed) and picked an engine that used 1.2x the CPU per frame."""
        return max(self.fps_rounds) if self.fps_rounds else self.fps

    @property
    def spread(self) -> float:
        """(fastest - slowest round) / median: how much this engine's figure moved while it was measured."""
        if len(self.fps_rounds) < 2 or not self.fps:
            return 0.0
        return (max(self.fps_rounds) - min(self.fps_rounds)) / self.fps


def fastest(results: list[Measurement]) -> Measurement | None:
    """The pick: the highest throughput in a best round; among engines within CLOSE of it, the least CPU per
    frame."""
    timed = [r for r in results if r.ms_p50]
    if not timed:
        return None
    best = max(timed, key=lambda r: r.best_fps or 0.0)
    tied = [r for r in timed if (r.best_fps or 0) >= (best.best_fps or 0) * (1 - CLOSE)]
    if len(tied) > 1 and all(r.cpu_ms for r in tied):
        return min(tied, key=lambda r: r.cpu_ms or 0.0)
    return best


def certainty(results: list[Measurement]) -> str:
    """How sure the pick is, in words: its slowest round against the others' fastest."""
    best = fastest(results)
    others = [r for r in results if r.ms_p50 and r is not best]
    if best is None:
        return "no engine could be timed here"
    if not others:
        return "the only engine that ran"
    if not best.fps_rounds or any(not r.fps_rounds for r in others):
        return "from single-frame timings (measured by an older version)"
    runner = max(others, key=lambda r: r.best_fps or 0.0)
    best_fps, runner_fps = best.best_fps or 0.0, runner.best_fps or 1.0
    if min(best.fps_rounds) > max(max(r.fps_rounds) for r in others):
        margin = best_fps / runner_fps
        return f"sure: every round of {best.backend} beat every round of the others ({margin:.2f}x {runner.backend})"
    if runner_fps >= best_fps * (1 - CLOSE):
        return (
            f"close: {best.backend} and {runner.backend} are within {CLOSE:.0%} in throughput; "
            f"{best.backend} uses less CPU per frame ({best.cpu_ms:.1f} vs {runner.cpu_ms:.1f} ms)"
        )
    return (
        f"likely: {best.backend} is ahead in its best round, but {runner.backend}'s best round beat "
        f"{best.backend}'s slowest"
    )
