"""CPU per frame: the window's arithmetic on a known sequence, and children's CPU counted while they run."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from edge_inference.edge.runtime.cpu import WINDOW_S, CpuPerFrame, process_cpu_seconds


def test_cpu_per_frame_is_taken_over_the_last_window_of_samples():
    clock, cpu = [0.0], [10.0]
    meter = CpuPerFrame(cpu=lambda: cpu[0], clock=lambda: clock[0])
    assert meter.read(0).cpu_ms_per_frame is None  # nothing handled yet
    clock[0], cpu[0] = 10.0, 11.0  # 1 s of CPU for 100 frames in 10 s
    first = meter.read(100)
    assert first.cpu_ms_per_frame == 10.0 and first.cores_busy == 0.1 and first.cpu_seconds_total == 11.0
    clock[0], cpu[0] = WINDOW_S + 20, 13.0  # then 2 s for 100 frames: the old start drops out of the window
    clock_then = clock[0]
    later = meter.read(200)
    assert later.window_s <= clock_then - 10.0 and later.cpu_ms_per_frame == 20.0


@pytest.mark.process
def test_a_running_childs_cpu_is_counted_before_it_ends():
    own = sum(os.times()[:2])
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.monotonic() + 120
        while process_cpu_seconds() - own - (sum(os.times()[:2]) - own) < 0.3:
            assert time.monotonic() < deadline, "the busy child's CPU never showed"
            time.sleep(0.1)
    finally:
        child.kill()
        child.wait()
