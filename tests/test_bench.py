"""`edge bench` as a user runs it: pairs on the same frames, agreement, JSON/CSV/PNG, unavailable pairs explained."""

from __future__ import annotations

import csv
import json
import os

import cv2
import numpy as np
import pytest

from tests.conftest import VTEST
from tests.helpers import run_edge

pytestmark = pytest.mark.process


def test_bench_compares_models_and_backends(tmp_path):
    out = tmp_path / "bench"
    proc = run_edge(
        "bench",
        "--source",
        str(VTEST),
        "--models",
        "yolox-nano,ssd-mobilenet-v2",
        "--backends",
        "onnx,openvino:CPU,tflite,edgetpu",
        "--frames",
        "20",
        "--step",
        "10",
        "--reference",
        "onnx",
        "--out",
        str(out),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "edge bench: 20 frames" in proc.stderr  # what it does, one line
    assert "\r" not in proc.stderr and "frame/s" not in proc.stderr  # no progress bar in a log: stderr is no terminal
    lines = proc.stdout.splitlines()
    assert lines[2].startswith("Model") and "infer p50" in lines[2] and "mAP50" in lines[2]
    rows = {(r["model"], r["backend"]): r for r in json.loads((out / "bench.json").read_text())["pairs"]}
    ran = [k for k, r in rows.items() if r["status"] == "ok"]
    assert set(ran) == {
        ("yolox-nano", "onnx"),
        ("yolox-nano", "openvino"),
        ("yolox-nano", "tflite"),
        ("ssd-mobilenet-v2", "onnx"),
        ("ssd-mobilenet-v2", "openvino"),
        ("ssd-mobilenet-v2", "tflite"),
    }
    assert rows[("yolox-nano", "tflite")]["file"] == "yolox-nano-tflite"
    assert rows[("ssd-mobilenet-v2", "onnx")]["file"] == "ssd-mobilenet-v2-onnx"
    for key in ran:
        row = rows[key]
        assert row["frames"] == 20 and row["fps"] > 0 and row["peak_rss_mib"] > 50 and row["cpu_percent"] > 0
        assert row["inference_p50_ms"] <= row["inference_p95_ms"] <= row["inference_p99_ms"]
        assert row["end_to_end_p50_ms"] >= row["inference_p50_ms"]
        # CPU per frame in milliseconds, all threads: never more than the cores had in a frame's wall time (the
        # kernel counts CPU in 10 ms ticks, user and system each: 20 ms over the run on a fast machine)
        cores = len(os.sched_getaffinity(0))
        assert 0 < row["cpu_ms_per_frame"] <= 1e3 / row["fps"] * cores * 1.05 + 20 / row["frames"], row
    assert rows[("yolox-nano", "onnx")]["reference"] and rows[("yolox-nano", "onnx")]["map50"] == 1.0
    assert (
        rows[("yolox-nano", "tflite")]["map50"] >= 0.95
        and "person" in rows[("yolox-nano", "tflite")]["agreement"]["per_class"]
    )
    # the reference for SSD is its ONNX conversion: why the TFLite file agrees with it at about 0.6-0.7 is said
    # under the table, where the figure is read (it was said in BENCHMARKS.md alone)
    note = "# mAP50 of ssd-mobilenet-v2 against ssd-mobilenet-v2-onnx: the conversion replaced TFLite's fast NMS"
    assert note in proc.stdout, proc.stdout
    assert "# mAP50 of yolox-nano" not in proc.stdout  # the same float weights: no excuse to make
    # said once, and never of the reference file against itself (OpenVINO runs the same ONNX file)
    notes = [line for line in proc.stdout.splitlines() if line.startswith("# mAP50 of ")]
    assert len(notes) == 1 and "of ssd-mobilenet-v2-onnx" not in notes[0], notes
    tpu = rows[("ssd-mobilenet-v2", "edgetpu")]
    assert tpu["status"] == "not run" and "Edge TPU" in tpu["reason"]
    assert "not run: the registry has no yolox-nano file that edgetpu can run" in proc.stdout
    with (out / "bench.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 8
    chart = cv2.imread(str(out / "bench.png"))
    assert chart is not None and chart.shape[0] > 300
    assert (np.abs(chart.astype(int) - 255).sum(axis=2) > 60).mean() > 0.02  # more than a blank canvas


def test_bench_with_nothing_runnable_fails_clearly(tmp_path):
    proc = run_edge(
        "bench",
        "--source",
        str(VTEST),
        "--models",
        "nanodet-m",
        "--backends",
        "edgetpu",
        "--frames",
        "3",
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert proc.returncode == 1 and "not run" in proc.stdout and "Traceback" not in proc.stderr
    proc = run_edge(
        "bench", "--source", str(VTEST), "--models", "yolox-nano", "--backends", "coral", "--out", str(tmp_path)
    )
    assert proc.returncode == 1 and "unknown backend 'coral'" in proc.stderr


def test_a_results_folder_that_cannot_be_written_is_refused_before_measuring(tmp_path):
    a_file = tmp_path / "results.txt"
    a_file.write_text("kept")
    for out, fragment in [
        (a_file, f"--out {a_file} is a file: give it a folder"),
        (a_file / "bench", f"cannot write the results to {a_file / 'bench'} (Not a directory)"),
    ]:
        proc = run_edge(
            "bench", "--source", str(VTEST), "--models", "yolox-nano", "--backends", "onnx", "--out", str(out)
        )
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("error:") and fragment in proc.stderr, proc.stderr
        assert "frames of" not in proc.stderr and not proc.stdout  # nothing was measured only to be lost
    assert a_file.read_text() == "kept"


def test_bench_takes_regions_as_one_more_dimension_on_a_big_video(tmp_path):
    """Full frame against tiles on the same frames of a 1080p street of six scenes: the whole frame agrees with the
    tiles' boxes hardly at all (people 25-60 px tall), at a ninth of the inferences."""
    from benchmarks.mosaic import write_mosaic

    video = tmp_path / "street.avi"
    write_mosaic(video, 3, size=(1920, 1080), scenes=6)
    out = tmp_path / "bench"
    proc = run_edge("bench", "--source", str(video), "--models", "yolox-nano", "--backends", "onnx", "--regions",
                    "tiles,full", "--frames", "3", "--warmup", "1", "--out", str(out), timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = {row["regions"]: row for row in json.loads((out / "bench.json").read_text())["pairs"]}
    assert rows["tiles"]["reference"] and not rows["full"]["reference"]
    assert rows["full"]["agreement"]["map50"] < 0.3, rows["full"]["agreement"]
    assert rows["tiles"]["cpu_ms_per_frame"] > 3 * rows["full"]["cpu_ms_per_frame"]
    assert "onnx on tiles" in proc.stdout
    refused = run_edge("bench", "--source", str(video), "--models", "yolox-nano", "--backends", "onnx",
                       "--regions", "full,motion", "--out", str(out))  # fmt: skip
    assert refused.returncode != 0 and refused.stderr.startswith("error: --regions motion needs a stream's motion")
